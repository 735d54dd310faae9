"""Races no test can time by hand, staged with the Cosmos emulator's fault endpoint: the item
that conflicted (409) is gone when the adapter reads it (404), as after a delete or a TTL
expiry in between. The adapters must answer "retry" (transient), never crash or loop."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.cosmos.exceptions import CosmosResourceExistsError
from fakes import LAYOUT, order_payload
from servers import CosmosServer

from exactly_once.decisions import Outcome, Settlement
from exactly_once.exceptions import PayloadMismatchError, TransientStoreError
from orders.adapters.cosmos_client import order_partitioned_store
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore, order_claim_id
from orders.domain.idempotency import OrderIdClaim, core_store_errors, key_claim
from orders.domain.received import ReceivedOrderMessage
from orders.service.consumer import OrderConsumer


@pytest.fixture
async def containers(python_cosmos: CosmosServer) -> AsyncIterator[dict[str, ContainerProxy]]:
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        database = await client.create_database_if_not_exists("races")
        yield {
            "orders": await database.create_container_if_not_exists(
                id="orders", partition_key=PartitionKey(path="/orderId"), default_ttl=-1
            ),
            "idempotency": await database.create_container_if_not_exists(
                id="idempotency", partition_key=PartitionKey(path="/id"), default_ttl=-1
            ),
        }


def vanish_on_read(server: CosmosServer, item_id: str, times: int) -> dict[str, Any]:
    """The next `times` point reads of `item_id` answer 404."""
    rule = {"status": 404, "count": times, "operation": "Read", "path_contains": item_id}
    response = httpx.post(f"{server.endpoint}_emulator/faults", json=rule, headers=token(server))
    response.raise_for_status()
    return dict(response.json())


def token(server: CosmosServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.fault_token}"}


def remaining_hits(server: CosmosServer, rule_id: int) -> int:
    rules = httpx.get(f"{server.endpoint}_emulator/faults", headers=token(server)).json()["faults"]
    return next((rule["remaining"] for rule in rules if rule["id"] == rule_id), 0)


async def test_an_order_that_conflicts_then_vanishes_is_a_transient_failure(
    python_cosmos: CosmosServer, containers: dict[str, ContainerProxy]
) -> None:
    consumer = OrderConsumer(order_partitioned_store(containers["orders"]), LAYOUT)
    order_id = f"race-{uuid.uuid4().hex[:10]}"
    message = ReceivedOrderMessage(json.dumps(order_payload(order_id)).encode(), order_id)
    assert (await consumer.handle(message)).outcome is Outcome.PROCESSED
    rule = vanish_on_read(python_cosmos, f"/docs/{order_id}", times=1)

    again = await consumer.handle(message)

    assert (again.outcome, again.settlement) == (Outcome.TRANSIENT_FAILURE, Settlement.ABANDON)
    assert again.error is not None and "vanished after its create conflicted" in again.error
    assert remaining_hits(python_cosmos, rule["id"]) == 0  # the 404 was really served


class FlappingContainer:
    """The real container, but another claimant releases the key between each conflict and
    our read, and claims it again before our next create: the record keeps appearing and
    vanishing (a query's empty answer cannot be staged with the emulator's fault rules)."""

    def __init__(self, container: ContainerProxy, other: dict[str, Any]) -> None:
        self._container = container
        self._other = other
        self.conflicts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._container, name)

    async def create_item(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        await self._container.upsert_item(self._other)  # the other claimant claims it again
        try:
            return dict(await self._container.create_item(body, **kwargs))
        except CosmosResourceExistsError:
            self.conflicts += 1
            await self._container.delete_item(self._other["id"], partition_key=self._other["id"])
            raise


async def test_a_key_record_that_keeps_vanishing_is_transient_after_bounded_attempts(
    containers: dict[str, ContainerProxy],
) -> None:
    record = key_claim(
        "app:t", uuid.uuid4().hex, "o-1", "h", owner="http-a", lease_seconds=30, ttl_seconds=600
    )
    other = {
        "id": record.key,
        "type": "idempotencyRecord",
        "scope": "app:t",
        "key": "k",
        "orderId": "o-1",
        "requestHash": "h",
        "status": "inProgress",
        "owner": "http-b",
        "leaseSeconds": 30,
        "attempts": 1,
    }
    flapping = FlappingContainer(containers["idempotency"], other)
    store = CosmosIdempotencyStore(cast(ContainerProxy, flapping))

    with (
        pytest.raises(TransientStoreError, match="keeps appearing and vanishing"),
        core_store_errors(),  # as the intake calls the store
    ):
        await store.claim(record)

    assert flapping.conflicts == 3  # bounded: the core's claim gives up after 3 attempts


async def test_an_order_id_claim_that_vanishes_after_its_conflict_is_transient(
    python_cosmos: CosmosServer, containers: dict[str, ContainerProxy]
) -> None:
    # The claim is the core's create-or-compare: a conflict whose claim cannot be read is
    # the core's RecordChangedError, a retry (503) for the intake, never a wrong answer; the
    # retry reads the claim and compares. (The adapter used to retry inside, three times.)
    store = CosmosIdempotencyStore(containers["idempotency"])
    claim = OrderIdClaim(f"race-{uuid.uuid4().hex[:10]}", "hash-1")
    assert await store.claim_order_id(claim) is None
    vanish_on_read(python_cosmos, order_claim_id(claim.order_id), times=1)
    other = OrderIdClaim(claim.order_id, "hash-2")

    with pytest.raises(TransientStoreError, match="vanished"):
        await store.claim_order_id(other)
    with pytest.raises(PayloadMismatchError):
        await store.claim_order_id(other)
