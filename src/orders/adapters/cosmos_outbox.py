"""The outbox side of the orders container: its change feed, the dispatched mark and the
parked documents, and the dispatcher's leases in the leases container (both the core's Cosmos
adapters, as they are)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from exactly_once.cosmos import if_match, store_errors
from exactly_once.cosmos_change_feed import CosmosChangeFeed, CosmosLeaseStore
from orders.adapters.cosmos_client import orders_container
from orders.adapters.cosmos_layout import (
    LEASE_DOCUMENT_TYPE,
    LEASE_ID_PREFIX,
    OUTBOX_DOCUMENT_TYPE,
)
from orders.adapters.process_clients import given_or_own
from orders.settings import Settings

# The parked outbox documents (a cross-partition query: an operator's listing).
PARKED_QUERY = (
    "SELECT c.id, c.orderId, c.parked FROM c WHERE c.type = @type AND IS_DEFINED(c.parked) "
    "AND c.dispatched = false"
)


class CosmosOutboxFeed(CosmosChangeFeed):
    """`OutboxFeed` over the orders container: the core's change feed, and the mark."""

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        marked = {"dispatched": True, "dispatchedAt": datetime.now(UTC).isoformat()}
        # A failed condition: another dispatcher marked it (or it changed), nothing left to do.
        await self._replace_if_unchanged(document, marked)

    async def park(self, document: dict[str, Any], parked: Mapping[str, Any]) -> None:
        await self._replace_if_unchanged(document, {"parked": dict(parked)})

    async def parked(self) -> list[dict[str, Any]]:
        """Every parked outbox document: its id, orderId and `parked` (reason, description,
        attempts, parkedAt)."""
        with store_errors():
            found = [
                item
                async for item in self._container.query_items(
                    PARKED_QUERY, parameters=[{"name": "@type", "value": OUTBOX_DOCUMENT_TYPE}]
                )
            ]
        return sorted(found, key=lambda item: str(item["parked"].get("parkedAt", "")))

    async def redrive(self, order_id: str, document_id: str) -> bool:
        """Take `parked` off the outbox document, so the change feed brings it to a dispatcher
        again; False when there is no such parked document."""
        with store_errors():
            try:
                document = await self._container.read_item(document_id, partition_key=order_id)
            except cosmos_errors.CosmosResourceNotFoundError:
                return False
        if document.get("type") != OUTBOX_DOCUMENT_TYPE or "parked" not in document:
            return False
        await self._replace_if_unchanged(document, {"parked": None})
        return True

    async def _replace_if_unchanged(
        self, document: dict[str, Any], changes: Mapping[str, Any]
    ) -> None:
        """Write `changes` onto `document` (None removes a field), If-Match its ETag; a failed
        condition means another writer got there first, which is not an error."""
        body = {key: value for key, value in document.items() if not key.startswith("_")}
        for key, value in changes.items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        with store_errors():
            try:
                await self._container.replace_item(
                    item=document["id"], body=body, **if_match(document["_etag"])
                )
            except cosmos_errors.CosmosAccessConditionFailedError:
                return


@asynccontextmanager
async def outbox_tools(settings: Settings) -> AsyncIterator[CosmosOutboxFeed]:
    """What `orders outbox` works with: Cosmos DB alone (the orders container)."""
    async with AsyncExitStack() as stack:
        cosmos = await given_or_own(stack, settings, None).cosmos(create_local_resources=False)
        yield CosmosOutboxFeed(orders_container(cosmos, settings))


def dispatcher_leases(container: ContainerProxy, lease_seconds: float) -> CosmosLeaseStore:
    """The dispatcher's feed-range leases in the leases container (partitioned by `/id`),
    under the names they have always had, so a deployed dispatcher's checkpoints carry on."""
    return CosmosLeaseStore(
        container,
        prefix=LEASE_ID_PREFIX,
        lease_type=LEASE_DOCUMENT_TYPE,
        partition_key_field="id",
        default_lease_seconds=lease_seconds,
    )
