"""The change-feed processor's two ports over Cosmos DB: the monitored container's feed
(`CosmosChangeFeed`) and the lease container (`CosmosLeaseStore`).

A lease document: `id` (`<prefix>` and a digest of the feed range, which is a long JSON string
with characters ids may not hold), `type`, `feedRange`, `owner` (null: free), `leaseSeconds`,
`continuation` and, while another instance asks for it, `requestedBy`; its `_etag` fences
every write and its `_ts` dates the lease. The lease container may be partitioned by `/id` (the
layout the Functions trigger's own lease container uses) or by another top-level field, which
then holds the id too.

A continuation is the SDK's change-feed continuation token (base64 JSON, the same across the
SDKs): it names the feed range it resumes (`continuation.Range`) and a position per part of it
(`continuation.continuation`: a `token`, the server's ETag, and its `range`). The processor
checks the first; the second is what a split's child keeps of its parent's token.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from exactly_once._records import Stamp
from exactly_once.change_feed import (
    DEFAULT_FEED_LEASE_SECONDS,
    ChangePage,
    EpkRange,
    ForeignContinuationError,
    Lease,
    LeaseTable,
)
from exactly_once.cosmos import RecordFields, if_match, if_match_write, store_errors
from exactly_once.exceptions import CorruptRecordError, TransientStoreError

__all__ = [
    "DEFAULT_LEASE_PREFIX",
    "DEFAULT_LEASE_TYPE",
    "CosmosChangeFeed",
    "CosmosLeaseStore",
]

DEFAULT_LEASE_PREFIX = "lease-"
DEFAULT_LEASE_TYPE = "changeFeedLease"
# Every lease of one processor, each with the database's time, in one request.
_LEASES_WITH_CLOCK = "SELECT c AS doc, GetCurrentTimestamp() AS now FROM c WHERE c.type = @type"


class CosmosChangeFeed:
    """`ChangeFeed` over a container (the latest-version pull model, by feed range)."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def feed_ranges(self) -> list[str]:
        with store_errors():
            # The partition map read afresh (one small request per balance): the balancer sees
            # a split or a merge within `acquire_seconds`, whether or not this client's own
            # requests met the 410 of a range gone (the SDK refreshes its map on a 1002 only).
            ranges = self._container.read_feed_ranges(force_refresh=True)
            return [EpkRange.parse(json.dumps(feed_range)).text async for feed_range in ranges]

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        # Every response of this read, in order, as the SDK hands it to this read's hook: the
        # last one's `etag` is where the SDK wrote the continuation after it (in place), never
        # another read's, as the client's last response headers could be.
        responses: list[Mapping[str, Any]] = []

        def keep(headers: Mapping[str, Any], _body: object) -> None:
            responses.append(headers)

        with store_errors():
            async with self._stale_partition_map_refreshed():
                if continuation is None:
                    feed = self._container.query_items_change_feed(
                        feed_range=json.loads(feed_range),
                        start_time="Beginning",
                        max_item_count=max_items,
                        response_hook=keep,
                    )
                else:
                    # The continuation names its feed range: the SDK refuses both together.
                    feed = self._container.query_items_change_feed(
                        continuation=narrowed(continuation, EpkRange.parse(feed_range)),
                        max_item_count=max_items,
                        response_hook=keep,
                    )
                changes: list[dict[str, Any]] = []
                async for page in feed.by_page():
                    changes = [change async for change in page]
                    break
        position = responses[-1].get("etag") if responses else None
        if not position:
            return ChangePage(changes, None)
        return ChangePage(changes, str(position), continuation_range(str(position)).text)

    @contextlib.asynccontextmanager
    async def _stale_partition_map_refreshed(self) -> AsyncIterator[None]:
        """A read that met a range gone (410) leaves the SDK's partition map read again, so
        that the next read is routed by the ranges there are now. azure-cosmos 4.17 follows a
        1002 (split) by refreshing its map itself, but answers a 1007 (a merged range) with the
        map it has: a client whose map predates the merge asks the gone range again and again,
        until the interpreter's recursion limit ends it (RecursionError)."""
        try:
            yield
        except (cosmos_errors.CosmosHttpResponseError, RecursionError) as error:
            if (
                isinstance(error, cosmos_errors.CosmosHttpResponseError)
                and error.status_code != 410
            ):
                raise
            async for _ in self._container.read_feed_ranges(force_refresh=True):
                pass
            if isinstance(error, RecursionError):
                raise TransientStoreError(
                    "the change feed asked a merged range until the recursion limit; "
                    "its partition map is read again"
                ) from error
            raise


def _token(continuation: str) -> dict[str, Any]:
    """The SDK's continuation token as JSON; `ForeignContinuationError` for anything else."""
    try:
        token = json.loads(base64.b64decode(continuation, validate=True))
        part = token["continuation"]
        if not isinstance(part, dict) or not isinstance(part["continuation"], list):
            raise TypeError("no positions")
    except (binascii.Error, ValueError, TypeError, KeyError) as error:
        raise ForeignContinuationError(
            f"not a change-feed continuation of a feed range: {continuation[:80]!r}"
        ) from error
    return dict(token)


def continuation_range(continuation: str) -> EpkRange:
    """The feed range a continuation token resumes."""
    try:
        return EpkRange.parse(json.dumps(_token(continuation)["continuation"]))
    except ValueError as error:
        raise ForeignContinuationError(f"a continuation names no feed range: {error}") from error


def narrowed(continuation: str, feed_range: EpkRange) -> str:
    """`continuation` to read `feed_range` alone: the token itself when it is that range's; a
    range's part of it when it is a range that contains it (a split's parent's token, whose
    positions the child keeps, as the .NET processor's child leases do). A token of a range
    that does not contain `feed_range` is `ForeignContinuationError`: never read elsewhere."""
    resumes = continuation_range(continuation)
    if resumes == feed_range:
        return continuation
    if not resumes.contains(feed_range):
        raise ForeignContinuationError(
            f"a continuation of {resumes} cannot read the feed range {feed_range}"
        )
    token = _token(continuation)
    positions = []
    for position in token["continuation"]["continuation"]:
        try:
            part = EpkRange.parse(json.dumps({"Range": position["range"]}))
        except (ValueError, TypeError, KeyError) as error:
            raise ForeignContinuationError(f"a continuation's position: {error!r}") from error
        if (kept := part.intersection(feed_range)) is not None:
            positions.append({**position, "range": json.loads(kept.text)["Range"]})
    token["continuation"] = {
        **token["continuation"],
        "continuation": positions,
        "Range": json.loads(feed_range.text)["Range"],
    }
    return base64.b64encode(json.dumps(token).encode("utf-8")).decode("ascii")


class CosmosLeaseStore:
    """`LeaseStore` over a lease container. `prefix` and `lease_type` tell one processor's
    leases from another's in a shared container (and keep leases written by an earlier
    processor readable: the orders app passes the names its dispatcher always wrote)."""

    def __init__(
        self,
        container: ContainerProxy,
        *,
        prefix: str = DEFAULT_LEASE_PREFIX,
        lease_type: str = DEFAULT_LEASE_TYPE,
        partition_key_field: str = "id",
        default_lease_seconds: float = DEFAULT_FEED_LEASE_SECONDS,
    ) -> None:
        self._container = container
        self._prefix = prefix
        self._type = lease_type
        self._pk = partition_key_field
        self._default_seconds = default_lease_seconds

    def lease_id(self, feed_range: str) -> str:
        return self._prefix + hashlib.sha256(feed_range.encode("utf-8")).hexdigest()[:32]

    async def read_all(self) -> LeaseTable:
        with store_errors():
            rows = [
                row
                async for row in self._container.query_items(
                    _LEASES_WITH_CLOCK, parameters=[{"name": "@type", "value": self._type}]
                )
            ]
        leases = [
            self._lease(row.get("doc"))
            for row in rows
            if str(row.get("doc", {}).get("id", "")).startswith(self._prefix)
        ]
        return LeaseTable(leases, int(rows[0]["now"]) if rows else 0)

    async def create(
        self, feed_range: str, lease_seconds: float, continuation: str | None = None
    ) -> None:
        free = Lease(feed_range, None, lease_seconds, continuation)
        # Another instance may have bootstrapped it first: then it is there, as wanted.
        exists = contextlib.suppress(cosmos_errors.CosmosResourceExistsError)
        with store_errors(), exists:
            await self._container.create_item(body=self._document(free))

    async def acquire(self, lease: Lease, owner: str, lease_seconds: float) -> Lease:
        mine = Lease(lease.feed_range, owner, lease_seconds, lease.continuation, lease.stamp)
        return await self._replace(mine)

    async def request(self, lease: Lease, owner: str) -> Lease:
        return await self._replace(replace(lease, requested_by=owner))

    async def renew(self, lease: Lease) -> Lease:
        return await self._replace(lease)

    async def checkpoint(self, lease: Lease, continuation: str) -> Lease:
        return await self._replace(replace(lease, continuation=continuation))

    async def release(self, lease: Lease) -> Lease:
        free = Lease(lease.feed_range, None, lease.lease_seconds, lease.continuation, lease.stamp)
        return await self._replace(free)

    async def delete(self, lease: Lease) -> None:
        lease_id = self.lease_id(lease.feed_range)
        with if_match_write(f"lease {lease_id!r} changed since it was read"):
            await self._container.delete_item(
                item=lease_id, partition_key=lease_id, **if_match(_stamp(lease).etag)
            )

    async def _replace(self, lease: Lease) -> Lease:
        document = self._document(lease)
        with if_match_write(f"lease {document['id']!r} changed since it was read"):
            stored = await self._container.replace_item(
                item=document["id"], body=document, **if_match(_stamp(lease).etag)
            )
        return self._lease(stored)

    def _document(self, lease: Lease) -> dict[str, Any]:
        lease_id = self.lease_id(lease.feed_range)
        document: dict[str, Any] = {
            "id": lease_id,
            self._pk: lease_id,
            "type": self._type,
            "feedRange": lease.feed_range,
            "owner": lease.owner,
            "leaseSeconds": lease.lease_seconds,
            "continuation": lease.continuation,
        }
        if lease.requested_by is not None:
            # Only while asked for: a lease keeps the shape earlier versions stored.
            document["requestedBy"] = lease.requested_by
        return document

    def _lease(self, document: object) -> Lease:
        """A stored lease, read as untrusted input: a bad field is `CorruptRecordError`."""
        if not isinstance(document, Mapping):
            raise CorruptRecordError(f"a stored lease is a {type(document).__name__}")
        fields = RecordFields(document)
        feed_range = fields.text("feedRange")
        try:
            EpkRange.parse(feed_range)
        except ValueError as error:
            raise CorruptRecordError(f"a stored lease's feedRange: {error}") from error
        return Lease(
            feed_range=feed_range,
            owner=fields.optional_text("owner"),
            lease_seconds=(
                self._default_seconds
                if document.get("leaseSeconds") is None
                else fields.number("leaseSeconds")
            ),
            continuation=fields.optional_text("continuation"),
            requested_by=fields.optional_text("requestedBy"),
            stamp=Stamp(etag=fields.text("_etag"), written_at_s=fields.integer("_ts")),
        )


def _stamp(lease: Lease) -> Stamp:
    if lease.stamp is None:
        raise ValueError(f"the lease of {lease.feed_range!r} was never read: nothing to match")
    return lease.stamp
