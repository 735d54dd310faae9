"""The dispatcher's leases, now the core processor's, against our Cosmos emulator: the lease
documents deployed dispatchers wrote before the processor are read as they are (no migration),
and the dispatcher resumes from their checkpoints."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient, DatabaseProxy
from servers import CosmosServer

from exactly_once.change_feed import ChangeFeedProcessor
from orders.adapters.cosmos_outbox import CosmosOutboxFeed, dispatcher_leases


@pytest.fixture
async def database(python_cosmos: CosmosServer) -> AsyncIterator[DatabaseProxy]:
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        yield await client.create_database_if_not_exists("dispatcher-leases")


def lease_as_the_dispatcher_stored_it(
    feed_range: str, owner: str | None, continuation: str, **extra: Any
) -> dict[str, Any]:
    """Written out by hand, as `orders.adapters.cosmos_layout.lease_document` wrote it before
    the core's processor (keys in this order)."""
    return {
        "id": "dispatcher-" + hashlib.sha256(feed_range.encode()).hexdigest()[:32],
        "type": "dispatcherLease",
        "feedRange": feed_range,
        "owner": owner,
        **extra,
        "continuation": continuation,
    }


@pytest.mark.parametrize("stored_seconds", [{"leaseSeconds": 30.0}, {}], ids=["named", "unnamed"])
async def test_a_lease_the_old_dispatcher_stored_is_resumed_from_its_checkpoint(
    database: DatabaseProxy, stored_seconds: dict[str, float]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    orders = await database.create_container(
        id=f"orders-{suffix}", partition_key=PartitionKey(path="/orderId")
    )
    lease_container = await database.create_container(
        id=f"leases-{suffix}", partition_key=PartitionKey(path="/id")
    )
    feed = CosmosOutboxFeed(orders)
    [feed_range] = await feed.feed_ranges()
    await orders.create_item({"id": "before", "orderId": "o-1"})
    checkpoint = (await feed.read_changes(feed_range, None, 100)).continuation
    assert checkpoint is not None
    await orders.create_item({"id": "after", "orderId": "o-2"})
    old = lease_as_the_dispatcher_stored_it(feed_range, None, checkpoint, **stored_seconds)
    await lease_container.create_item(old)
    handled: list[str] = []

    async def handle(changes: list[dict[str, Any]]) -> None:
        handled.extend(change["id"] for change in changes)

    leases = dispatcher_leases(lease_container, lease_seconds=12.0)
    [read] = (await leases.read_all()).leases
    assert (read.owner, read.continuation) == (None, checkpoint)
    assert read.lease_seconds == stored_seconds.get("leaseSeconds", 12.0)
    processor = ChangeFeedProcessor(
        feed, leases, handle, owner="d2", lease_seconds=12.0, renew_seconds=4.0
    )
    await processor.run_once()

    assert handled == ["after"]  # resumed from the old checkpoint: "before" is not read again
    [lease] = (await leases.read_all()).leases  # no second lease beside the old one
    assert (lease.owner, lease.lease_seconds) == ("d2", 12.0)
    stored = await lease_container.read_item(old["id"], partition_key=old["id"])
    assert [key for key in stored if not key.startswith("_")] == [
        "id",
        "type",
        "feedRange",
        "owner",
        "leaseSeconds",
        "continuation",
    ]
    assert (stored["owner"], stored["type"]) == ("d2", "dispatcherLease")
    assert json.loads(stored["feedRange"]) == json.loads(feed_range)
