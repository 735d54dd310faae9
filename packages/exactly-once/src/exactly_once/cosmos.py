"""The one Cosmos DB implementation of both ports, over one container.

Records and an effect's documents share the container (and a partition), so an inbox record
can be written in the same transactional batch as the documents it guards. Every conditional
write goes through one If-Match helper; a lease is dated by the `_ts` of its claim's write and
judged against `GetCurrentTimestamp()` read in the same query as the record, never by a
worker's clock.

A record's own fields are laid out by a `RecordShape`: the core's (`CoreRecordShape`) by
default, or one of yours for records that other readers (a console, an audit, an operator's
tool) already know in a shape of their own.

The translation of the SDK's errors (`store_errors`, `if_match_write`), the two reads
(`point_read`, `read_with_clock`) and the batch's failed operation are public and take the
exceptions to raise (`ErrorKinds`): an application's own Cosmos adapters reuse them rather than
translating the SDK a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiohttp
from azure.core import MatchConditions
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from exactly_once._records import (
    JsonInput,
    JsonMapping,
    JsonObject,
    JsonValue,
    Record,
    RecordRead,
    RecordStatus,
    Stamp,
    StoredDocument,
)
from exactly_once.exceptions import (
    CorruptRecordError,
    DocumentExistsError,
    RecordChangedError,
    RecordExistsError,
    StoreError,
    StoreRefusedError,
    TransientStoreError,
)

__all__ = [
    "BATCH_ERRORS",
    "CORE_ERRORS",
    "NETWORK_ERRORS",
    "NOT_REFUSAL_STATUS_CODES",
    "RECORD_TYPE",
    "TRANSIENT_STATUS_CODES",
    "CoreRecordShape",
    "CosmosStore",
    "ErrorKinds",
    "RecordFields",
    "RecordShape",
    "claim_fields",
    "failed_operation",
    "failed_operation_message",
    "if_match",
    "if_match_write",
    "is_refusal_status",
    "is_transient_status",
    "point_read",
    "read_with_clock",
    "store_error_for",
    "store_errors",
    "user_fields",
]

RECORD_TYPE = "exactlyOnceRecord"
# Throttling, timeouts, "retry with" and every server-side failure may succeed later.
TRANSIENT_STATUS_CODES = frozenset({408, 410, 429, 449})
# The 4xx that are NOT a refusal of the request itself: 401/403 (the credential or its role)
# and 404 (a database or container missing) are the deployment's problem, not the message's,
# and dead-lettering every message until an operator fixes them would be worse than retrying;
# 409 and 412 are conflicts the callers decide on. Every other 4xx that is not transient (400
# for an id with `/` or a number Cosmos refuses, 413 for a document too large) is a refusal.
NOT_REFUSAL_STATUS_CODES = frozenset({401, 403, 404, 409, 412})
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    ServiceRequestError,
    ServiceResponseError,
    cosmos_errors.CosmosClientTimeoutError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    ConnectionError,
)
# One request answers both "what is stored" and "what time is it for the database".
_READ_WITH_CLOCK = "SELECT c AS doc, GetCurrentTimestamp() AS now FROM c WHERE c.id = @id"
# A claim whose record vanished between the create's 409 and the read creates again this often.
_CLAIM_ATTEMPTS = 3


class RecordShape(Protocol):
    """How a record's own fields are laid out in its document.

    The store owns the rest: `id` (the record's key), the partition key field, `type` (the
    shape's `record_type`, which tells its records from every other document and is checked on
    every read), `ttl` (from `expires_after_seconds`) and Cosmos DB's own properties (`_etag`,
    `_ts`), which stamp it."""

    @property
    def record_type(self) -> str:
        """The `type` of this shape's documents."""
        ...

    def fields(self, record: Record) -> dict[str, Any]:
        """The record's own fields, as JSON."""
        ...

    def record(self, document: Mapping[str, Any], key: str, partition: str) -> Record:
        """The record a stored document of this shape holds (unstamped: the store adds the
        stamp and the expiry). A document it cannot read raises: `CorruptRecordError`, or a
        `KeyError`, `TypeError` or `ValueError`, which the store turns into one."""
        ...


def claim_fields(record: Record) -> dict[str, Any]:
    """The claim's own fields under the core's names (`requestHash`, `status`, `owner`,
    `leaseSeconds`, `attempts`): a shape of your own may keep them beside its fields."""
    return {
        "requestHash": record.request_hash,
        "status": record.status.value,
        "owner": record.owner,
        "leaseSeconds": record.lease_seconds,
        "attempts": record.attempts,
    }


class CoreRecordShape:
    """The core's own layout: every field of `Record` under its camelCase name, and `type`
    `exactlyOnceRecord` to tell records from an effect's documents in the same container."""

    record_type = RECORD_TYPE

    def fields(self, record: Record) -> dict[str, Any]:
        return {
            **claim_fields(record),
            "downstreamKey": record.downstream_key,
            "result": record.result,
            "data": record.data,
        }

    def record(self, document: Mapping[str, Any], key: str, partition: str) -> Record:
        fields = RecordFields(document)
        return Record(
            key=key,
            partition=partition,
            request_hash=fields.text("requestHash"),
            status=fields.status("status"),
            owner=fields.text("owner"),
            lease_seconds=fields.number("leaseSeconds"),
            attempts=fields.integer("attempts"),
            downstream_key=fields.optional_text("downstreamKey"),
            result=document.get("result"),
            data=document.get("data"),
        )


class CosmosStore:
    """`RecordStore` and `DocumentStore` over one container.

    `partition_key_field` is the top-level field the container is partitioned by (path
    `/<field>`): the adapter writes a record's partition there. `shape` lays out the record's
    own fields (`CoreRecordShape` by default)."""

    def __init__(
        self,
        container: ContainerProxy,
        *,
        partition_key_field: str = "pk",
        shape: RecordShape | None = None,
    ) -> None:
        self._container = container
        self._pk = partition_key_field
        self._shape: RecordShape = shape or CoreRecordShape()

    # --- RecordStore ------------------------------------------------------------------------

    async def claim(self, record: Record) -> Record:
        for _ in range(_CLAIM_ATTEMPTS):
            with store_errors():
                try:
                    stored = await self._container.create_item(body=self._record_document(record))
                    return self._record(stored)
                except cosmos_errors.CosmosResourceExistsError:
                    pass
            found = await self.read(record.key, record.partition)
            if found.record is not None:
                raise RecordExistsError(found.record, found.database_now_ms)
            # Deleted between our create and the read (a release, an expiry): create again.
        raise RecordChangedError(f"record {record.key!r} keeps appearing and vanishing")

    async def read(self, key: str, partition: str) -> RecordRead:
        found = await read_with_clock(self._container, key, partition)
        if found is None:
            return RecordRead(None, 0)
        return RecordRead(self._record(found[0]), found[1])

    async def take_over(self, existing: Record, owner: str, lease_seconds: float) -> Record:
        taken = existing.owned_by(owner, lease_seconds)
        return self._record(await self._replace_if_match(self._record_document(taken), existing))

    async def complete(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> Record:
        stored_result: JsonValue = json.loads(json.dumps(result))
        done = replace(owned, status=status, result=stored_result)
        return self._record(await self._replace_if_match(self._record_document(done), owned))

    async def release(self, owned: Record) -> None:
        # Another owner moved on, or it is gone: nothing of ours to release.
        moved_or_gone = contextlib.suppress(
            cosmos_errors.CosmosAccessConditionFailedError,
            cosmos_errors.CosmosResourceNotFoundError,
        )
        with store_errors(), moved_or_gone:
            await self._container.delete_item(
                item=owned.key, partition_key=owned.partition, **if_match(_etag_of(owned))
            )

    # --- DocumentStore ----------------------------------------------------------------------

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        created = [self._in_partition(document, partition) for document in documents]
        await self._batch(partition, [("create", (document,), {}) for document in created], created)

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        stored = await point_read(self._container, document_id, partition)
        if stored is None:
            return None
        return _stored_document(stored)

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        written = await self._replace_if_match(self._in_partition(document, partition), etag)
        return _stored_document(written)

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        await self.replace_all_and_create(partition, [(document, etag)], created=created)

    async def replace_all_and_create(
        self,
        partition: str,
        replaced: Sequence[tuple[JsonMapping, str]],
        *,
        created: Sequence[JsonMapping],
    ) -> None:
        fenced = [(self._in_partition(each, partition), etag) for each, etag in replaced]
        new = [self._in_partition(each, partition) for each in created]
        operations: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            *(("replace", (each["id"], each), {"if_match_etag": etag}) for each, etag in fenced),
            *(("create", (each,), {}) for each in new),
        ]
        await self._batch(
            partition, operations, new, replaced=[str(each["id"]) for each, _ in fenced]
        )

    # --- the one batch, and its one translation ---------------------------------------------

    async def _batch(
        self,
        partition: str,
        operations: list[tuple[str, tuple[Any, ...], dict[str, Any]]],
        created: Sequence[JsonMapping],
        *,
        replaced: Sequence[str] = (),
    ) -> None:
        """One transactional batch: the creates of `created`, after the If-Match replaces of
        `replaced` when there are any. A 409 is `DocumentExistsError` naming the created
        document and its position among `created` (the first, where the store does not say
        which); a moved ETag or a missing document (412, 404) of a replace is
        `RecordChangedError` naming it; anything else as `store_error_for` says. Nothing of a
        failed batch is written."""
        first_created = len(replaced)
        with store_errors():
            try:
                await self._container.execute_item_batch(
                    batch_operations=operations, partition_key=partition
                )
            except BATCH_ERRORS as exc:
                status, index = failed_operation(exc)
                if status == 409 and created:
                    position = max(index - first_created, 0)
                    raise DocumentExistsError(str(created[position].get("id")), position) from exc
                if replaced and status in (404, 412):
                    moved = replaced[min(index, len(replaced) - 1)]
                    raise RecordChangedError(f"{moved!r} changed since it was read") from exc
                why = failed_operation_message(exc)
                raise store_error_for(status, f"batch operation {index} failed: {why}") from exc

    def _in_partition(self, document: JsonMapping, partition: str) -> dict[str, Any]:
        """The document as written: its own fields, and `partition` in the partition key field."""
        return {**document, self._pk: partition}

    # --- the one If-Match write, and the record's document shape ----------------------------

    async def _replace_if_match(
        self, document: dict[str, Any], fence: Record | str
    ) -> dict[str, Any]:
        etag = fence if isinstance(fence, str) else _etag_of(fence)
        with if_match_write(f"{document['id']!r} changed since it was read"):
            return await self._container.replace_item(
                item=document["id"], body=document, **if_match(etag)
            )

    def _record_document(self, record: Record) -> dict[str, Any]:
        document = self._shape.fields(record) | {
            "id": record.key,
            self._pk: record.partition,
            "type": self._shape.record_type,
        }
        if record.expires_after_seconds is not None:
            # Per-item TTL: takes effect where the container has a default TTL (-1 will do).
            document["ttl"] = record.expires_after_seconds
        return document

    def _record(self, document: object) -> Record:
        """The record a stored document holds; `CorruptRecordError` for anything else.

        Stored documents are read back as untrusted input: something else may have written
        the id, or an operator edited it. A bad field is the core's store error, never a
        KeyError or TypeError from deep inside (whichever shape reads it)."""
        if not isinstance(document, dict):
            raise CorruptRecordError(f"a stored record is a {type(document).__name__}")
        if document.get("type") != self._shape.record_type:
            raise CorruptRecordError(
                f"{_shown(document.get('id'))} is not an exactly-once record "
                f"of type {self._shape.record_type!r}"
            )
        fields = RecordFields(document)
        key, partition = fields.text("id"), fields.text(self._pk)
        try:
            record = self._shape.record(document, key, partition)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptRecordError(f"record {_shown(key)}: {exc!r:.200}") from exc
        return replace(
            record,
            expires_after_seconds=fields.optional_integer("ttl"),
            stamp=Stamp(etag=fields.text("_etag"), written_at_s=fields.integer("_ts")),
        )


def _stored_document(stored: dict[str, Any]) -> StoredDocument:
    """A stored item's own fields, and its ETag apart."""
    return StoredDocument(body=user_fields(stored), etag=str(stored["_etag"]))


def _shown(value: object) -> str:
    """A stored value for an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class RecordFields:
    """Typed reads of one stored record's fields, for a `RecordShape`: a field missing or of
    another type is a `CorruptRecordError` naming it."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._document = document

    def corrupt(self, name: str, problem: str) -> CorruptRecordError:
        """The error for field `name`, which `problem`."""
        value = _shown(self._document.get(name))
        record = _shown(self._document.get("id"))
        return CorruptRecordError(f"record {record}: {name!r} {problem} (found {value})")

    def text(self, name: str) -> str:
        """A string field."""
        value = self._document.get(name)
        if not isinstance(value, str):
            raise self.corrupt(name, "is not a string")
        return value

    def optional_text(self, name: str) -> str | None:
        """A string field, or None when absent or null."""
        return None if self._document.get(name) is None else self.text(name)

    def integer(self, name: str) -> int:
        """An integer field (a bool is an int to Python, never to a record)."""
        value = self._document.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.corrupt(name, "is not an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        """An integer field, or None when absent or null."""
        return None if self._document.get(name) is None else self.integer(name)

    def number(self, name: str) -> float:
        """A number field."""
        value = self._document.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.corrupt(name, "is not a number")
        return float(value)

    def status(self, name: str) -> RecordStatus:
        """A `RecordStatus` field."""
        value = self.text(name)
        if value not in _STATUSES:
            raise self.corrupt(name, "is not a record status")
        return RecordStatus(value)


_STATUSES = frozenset(status.value for status in RecordStatus)


@dataclass(frozen=True)
class ErrorKinds:
    """The exceptions the one translation raises, each built from a message: the core's by
    default. An application whose adapters raise exceptions of their own passes them here and
    keeps this translation rather than writing another."""

    failure: Callable[[str], Exception] = StoreError
    transient: Callable[[str], Exception] = TransientStoreError
    changed: Callable[[str], Exception] = RecordChangedError
    refused: Callable[[str], Exception] | None = None
    """A refusal of the request itself (`is_refusal_status`); None: `failure`, so that an
    application with no exception of that meaning keeps raising its own."""


CORE_ERRORS = ErrorKinds(refused=StoreRefusedError)


def if_match(etag: str) -> dict[str, Any]:
    """The SDK's keywords for "only if the item still has this ETag"."""
    return {"etag": etag, "match_condition": MatchConditions.IfNotModified}


def _etag_of(record: Record) -> str:
    if record.stamp is None:
        raise ValueError(f"record {record.key!r} was never written: nothing to match")
    return record.stamp.etag


def user_fields(stored: dict[str, Any]) -> JsonObject:
    """A stored document without the store's own properties (`_etag`, `_ts`, `_rid`, ...)."""
    return {key: value for key, value in stored.items() if not key.startswith("_")}


def is_transient_status(status: int | None) -> bool:
    """Whether a Cosmos DB status may succeed later: throttling, timeouts, every 5xx."""
    return status is not None and (status in TRANSIENT_STATUS_CODES or status >= 500)


def is_refusal_status(status: int | None) -> bool:
    """Whether a Cosmos DB status refuses the request itself, for good: a 4xx that is neither
    transient nor one of `NOT_REFUSAL_STATUS_CODES` (400, 413, ...)."""
    return (
        status is not None
        and 400 <= status < 500
        and status not in NOT_REFUSAL_STATUS_CODES
        and not is_transient_status(status)
    )


def store_error_for(status: int | None, message: str, kinds: ErrorKinds = CORE_ERRORS) -> Exception:
    """A failed status as `kinds.transient`, `kinds.refused` or `kinds.failure`."""
    if is_transient_status(status):
        return kinds.transient(f"Cosmos DB answered {status}: {message}")
    if is_refusal_status(status) and kinds.refused is not None:
        return kinds.refused(f"Cosmos DB answered {status}: {message}")
    return kinds.failure(f"Cosmos DB answered {status}: {message}")


@contextmanager
def store_errors(kinds: ErrorKinds = CORE_ERRORS) -> Iterator[None]:
    """Translate what the block's SDK calls raise; expected statuses are caught inside it."""
    try:
        yield
    except cosmos_errors.CosmosHttpResponseError as exc:
        raise store_error_for(exc.status_code, str(exc.message), kinds) from exc
    except NETWORK_ERRORS as exc:
        raise kinds.transient(f"Cosmos DB unreachable: {exc!r}") from exc


@contextmanager
def if_match_write(changed: str, kinds: ErrorKinds = CORE_ERRORS) -> Iterator[None]:
    """The one If-Match write translation: a moved ETag (412) or a missing item (404) is
    `kinds.changed(changed)`, anything else as `store_errors` says."""
    with store_errors(kinds):
        try:
            yield
        except (
            cosmos_errors.CosmosAccessConditionFailedError,
            cosmos_errors.CosmosResourceNotFoundError,
        ) as exc:
            raise kinds.changed(changed) from exc


async def point_read(
    container: ContainerProxy, item_id: str, partition: str, kinds: ErrorKinds = CORE_ERRORS
) -> dict[str, Any] | None:
    """One point read (the cheapest request); None when the item does not exist."""
    with store_errors(kinds):
        try:
            return await container.read_item(item=item_id, partition_key=partition)
        except cosmos_errors.CosmosResourceNotFoundError:
            return None


async def read_with_clock(
    container: ContainerProxy, item_id: str, partition: str, kinds: ErrorKinds = CORE_ERRORS
) -> tuple[Any, int] | None:
    """The stored item and the database's time in ms, in one request; None when nothing is
    stored (the query returns no row). The item is as stored: untrusted, for its reader to
    check (a row may even lack it)."""
    with store_errors(kinds):
        rows = [
            row
            async for row in container.query_items(
                _READ_WITH_CLOCK,
                parameters=[{"name": "@id", "value": item_id}],
                partition_key=partition,
            )
        ]
    if not rows:
        return None
    return rows[0].get("doc"), int(rows[0]["now"])


# What a failed transactional batch raises: the SDK's batch error (not a CosmosHttpResponseError),
# or, from a gateway that answers with the failing status on the response, a response error.
BATCH_ERRORS = (cosmos_errors.CosmosBatchOperationError, cosmos_errors.CosmosHttpResponseError)


def failed_operation(
    exc: cosmos_errors.CosmosBatchOperationError | cosmos_errors.CosmosHttpResponseError,
) -> tuple[int, int]:
    """(status, index) of the operation that failed a transactional batch. A gateway may answer
    a failed batch with the failing status on the response itself: then the first operation."""
    if not isinstance(exc, cosmos_errors.CosmosBatchOperationError):
        return exc.status_code or 500, 0
    responses = exc.operation_responses or []
    index = exc.error_index or 0
    found = responses[index].get("statusCode") if index < len(responses) else None
    return (int(found) if found is not None else exc.status_code or 500), index


def failed_operation_message(
    exc: cosmos_errors.CosmosBatchOperationError | cosmos_errors.CosmosHttpResponseError,
) -> str:
    """What the store said of the operation that failed a transactional batch: the failing
    operation's own message where its response carries one, else the SDK's. A refusal's
    dead letter carries it, so an operator reads why without the logs."""
    if isinstance(exc, cosmos_errors.CosmosBatchOperationError):
        responses = exc.operation_responses or []
        index = exc.error_index or 0
        found = responses[index] if index < len(responses) else {}
        said = found.get("message") if isinstance(found, dict) else None
        if isinstance(said, str) and said:
            return said
    return str(exc.message)
