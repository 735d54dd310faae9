"""The outbox side of the orders container: its change feed and the dispatched mark, and the
dispatcher's leases in the leases container (both the core's Cosmos adapters, as they are)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from exactly_once.cosmos import if_match, store_errors
from exactly_once.cosmos_change_feed import CosmosChangeFeed, CosmosLeaseStore
from orders.adapters.cosmos_layout import LEASE_DOCUMENT_TYPE, LEASE_ID_PREFIX


class CosmosOutboxFeed(CosmosChangeFeed):
    """`OutboxFeed` over the orders container: the core's change feed, and the mark."""

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        marked = {key: value for key, value in document.items() if not key.startswith("_")}
        marked["dispatched"] = True
        marked["dispatchedAt"] = datetime.now(UTC).isoformat()
        with store_errors():
            try:
                await self._container.replace_item(
                    item=document["id"],
                    body=marked,
                    **if_match(document["_etag"]),
                )
            except cosmos_errors.CosmosAccessConditionFailedError:
                return  # another dispatcher marked it (or it changed): nothing left to do


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
