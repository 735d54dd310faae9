"""One contract for the idempotency store: the fake and the Cosmos adapter on our emulator.

The fake drives the unit tests, so it must behave as the adapter does over a real Cosmos wire
server: a create that conflicts carries the stored record, and fenced writes honour ETags.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from fakes import FakeIdempotencyStore

from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.domain.idempotency import (
    IdempotencyRecord,
    IdempotencyRecordExistsError,
    OrderIdClaim,
    RecordStatus,
    record_id,
)
from orders.entrypoints.http_contract import accepted_response
from orders.exceptions import LeaseLostError
from orders.service.ports import IdempotencyStore


@pytest.fixture(params=["fake", "python-emulator"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "fake":
        yield FakeIdempotencyStore()
        return
    server = request.getfixturevalue("python_cosmos")
    async with CosmosClient(server.endpoint, credential=server.key) as client:
        database = await client.create_database_if_not_exists("http-contract")
        container = await database.create_container_if_not_exists(
            id="idempotency", partition_key=PartitionKey(path="/id"), default_ttl=-1
        )
        yield CosmosIdempotencyStore(container)


def claim_for(key: str | None = None, *, scope: str = "app:t", order_id: str = "o-1") -> Any:
    key = key or uuid.uuid4().hex
    return IdempotencyRecord(
        record_id=record_id(scope, key),
        scope=scope,
        key=key,
        request_hash="hash-1",
        order_id=order_id,
        status=RecordStatus.IN_PROGRESS,
        lease_expires_at=1_000.5,
        ttl_seconds=3600,
    )


async def test_claim_returns_the_record_with_an_etag(store: IdempotencyStore) -> None:
    claim = claim_for()

    owned = await store.claim(claim)

    assert owned.etag
    assert replace(owned, etag=None) == claim


async def test_second_claim_conflicts_with_the_stored_record(store: IdempotencyStore) -> None:
    claim = claim_for()
    owned = await store.claim(claim)

    with pytest.raises(IdempotencyRecordExistsError) as conflict:
        await store.claim(replace(claim, request_hash="hash-2"))

    assert conflict.value.existing == owned


async def test_complete_is_fenced_by_the_claimants_etag(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())
    completed = owned.completed(accepted_response(owned.order_id))

    done = await store.complete(completed, etag=owned.etag or "")
    with pytest.raises(LeaseLostError):
        await store.complete(completed, etag=owned.etag or "")

    assert done.etag and done.etag != owned.etag
    assert done.status is RecordStatus.COMPLETED and done.response is not None
    with pytest.raises(IdempotencyRecordExistsError) as conflict:
        await store.claim(claim_for(owned.key))
    assert conflict.value.existing == done


async def test_take_over_succeeds_once_per_etag(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())
    renewed = replace(owned, lease_expires_at=2_000.0, etag=None)

    winner = await store.take_over(renewed, etag=owned.etag or "")
    with pytest.raises(LeaseLostError):
        await store.take_over(renewed, etag=owned.etag or "")
    with pytest.raises(LeaseLostError):
        await store.complete(owned.completed(accepted_response("o-1")), etag=owned.etag or "")

    assert winner.lease_expires_at == 2_000.0


async def test_release_is_fenced_and_frees_the_key(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())

    with pytest.raises(LeaseLostError):
        await store.release(owned.record_id, etag='"not-the-etag"')
    await store.release(owned.record_id, etag=owned.etag or "")
    await store.release(owned.record_id, etag=owned.etag or "")  # already gone: fine

    again = await store.claim(claim_for(owned.key))
    assert again.etag


async def test_fenced_writes_on_a_vanished_record_lose_the_lease(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())
    await store.release(owned.record_id, etag=owned.etag or "")

    with pytest.raises(LeaseLostError):
        await store.complete(owned.completed(accepted_response("o-1")), etag=owned.etag or "")


async def test_find_order_sees_only_completed_records_of_the_scope(
    store: IdempotencyStore,
) -> None:
    order_id = f"o-{uuid.uuid4().hex}"
    owned = await store.claim(claim_for(scope="app:mine", order_id=order_id))

    before = await store.find_order("app:mine", order_id)
    await store.complete(owned.completed(accepted_response(order_id)), etag=owned.etag or "")
    mine = await store.find_order("app:mine", order_id)
    theirs = await store.find_order("app:theirs", order_id)

    assert before is None and theirs is None
    assert mine is not None and mine.order_id == order_id


async def test_an_order_id_claim_keeps_the_first_payload(store: IdempotencyStore) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"

    first = await store.claim_order_id(OrderIdClaim(order_id, "hash-1"))
    again = await store.claim_order_id(OrderIdClaim(order_id, "hash-1"))
    other = await store.claim_order_id(OrderIdClaim(order_id, "hash-2"))

    assert first == again == other == OrderIdClaim(order_id, "hash-1")
    # A claim is not a key record: GET's lookup of accepted orders never returns it.
    assert await store.find_order("app:t", order_id) is None
