"""One contract for the idempotency store: the fake and the Cosmos adapter on our emulator.

The fake drives the unit tests, so it must behave as the adapter (the core's `CosmosStore` in
the intake's shape) does over a real Cosmos wire server: a create that conflicts carries the
stored record and the database's time, and fenced writes honour ETags.
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

from exactly_once._records import Record, lease_is_live
from exactly_once.exceptions import PayloadMismatchError, RecordChangedError, RecordExistsError
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.domain.idempotency import (
    CANCEL_OPERATION,
    KeyRecord,
    OrderIdClaim,
    RecordStatus,
    key_claim,
)
from orders.entrypoints.http_contract import accepted_response
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


def claim_for(key: str | None = None, *, scope: str = "app:t", order_id: str = "o-1") -> Record:
    return key_claim(
        scope,
        key or uuid.uuid4().hex,
        order_id,
        "hash-1",
        owner="http-a",
        lease_seconds=30,
        ttl_seconds=3600,
    )


async def test_claim_returns_the_record_stamped(store: IdempotencyStore) -> None:
    claim = claim_for()

    owned = await store.claim(claim)

    assert owned.stamp is not None and owned.stamp.etag
    assert replace(owned, stamp=None) == claim


async def test_second_claim_conflicts_with_the_stored_record_and_a_live_lease(
    store: IdempotencyStore,
) -> None:
    claim = claim_for()
    owned = await store.claim(claim)

    with pytest.raises(RecordExistsError) as conflict:
        await store.claim(replace(claim, request_hash="hash-2"))

    assert conflict.value.existing == owned
    assert lease_is_live(conflict.value.existing, conflict.value.database_now_ms)


async def test_complete_is_fenced_by_the_claimants_etag(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())
    answer = accepted_response("o-1")

    done = await store.complete(owned, answer)
    with pytest.raises(RecordChangedError):
        await store.complete(owned, answer)

    assert done.stamp is not None and owned.stamp is not None
    assert done.stamp.etag != owned.stamp.etag
    assert done.status is RecordStatus.COMPLETED and done.result == answer
    with pytest.raises(RecordExistsError) as conflict:
        await store.claim(claim_for(KeyRecord.of(owned).key))
    assert conflict.value.existing == done


async def test_take_over_succeeds_once_per_etag(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())

    winner = await store.take_over(owned, "http-b", 60)
    with pytest.raises(RecordChangedError):
        await store.take_over(owned, "http-c", 60)
    with pytest.raises(RecordChangedError):
        await store.complete(owned, accepted_response("o-1"))

    assert (winner.owner, winner.lease_seconds, winner.attempts) == ("http-b", 60, 2)


async def test_release_is_fenced_and_frees_the_key(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())
    taken = await store.take_over(owned, "http-b", 30)

    await store.release(owned)  # moved on: nothing of ours to release
    assert (await store.read(owned.key, owned.partition)).record == taken
    await store.release(taken)
    await store.release(taken)  # already gone: fine

    assert (await store.read(owned.key, owned.partition)).record is None
    again = await store.claim(owned)
    assert again.stamp is not None


async def test_fenced_writes_on_a_vanished_record_lose_the_lease(store: IdempotencyStore) -> None:
    owned = await store.claim(claim_for())
    await store.release(owned)

    with pytest.raises(RecordChangedError):
        await store.complete(owned, accepted_response("o-1"))


async def test_find_order_sees_only_completed_records_of_the_scope(
    store: IdempotencyStore,
) -> None:
    order_id = f"o-{uuid.uuid4().hex}"
    owned = await store.claim(claim_for(scope="app:mine", order_id=order_id))

    before = await store.find_order("app:mine", order_id)
    await store.complete(owned, accepted_response(order_id))
    mine = await store.find_order("app:mine", order_id)
    theirs = await store.find_order("app:theirs", order_id)

    assert before is None and theirs is None
    assert mine is not None and mine.order_id == order_id
    assert mine.answer == accepted_response(order_id)


async def test_find_order_passes_over_a_cancels_record_of_the_order(
    store: IdempotencyStore,
) -> None:
    order_id = f"o-{uuid.uuid4().hex}"
    cancel = key_claim("app:mine", uuid.uuid4().hex, order_id, "hash-c", owner="http-a",
                       lease_seconds=30, ttl_seconds=3600, operation=CANCEL_OPERATION)  # fmt: skip
    owned = await store.claim(cancel)
    await store.complete(owned, {"statusCode": 200, "body": {"status": "cancelled"}})

    # the cancel names the order but did not place it: GET must not take it for a submission
    assert await store.find_order("app:mine", order_id) is None
    assert owned.data == cancel.data  # stored and read back with its operation


async def test_an_order_id_claim_keeps_the_first_payload(store: IdempotencyStore) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"

    first = await store.claim_order_id(OrderIdClaim(order_id, "hash-1", owner_scope="app:a"))
    again = await store.claim_order_id(OrderIdClaim(order_id, "hash-1", owner_scope="app:b"))
    with pytest.raises(PayloadMismatchError):  # the core's create-or-compare
        await store.claim_order_id(OrderIdClaim(order_id, "hash-2"))

    assert first is None  # created by this call
    assert again == OrderIdClaim(order_id, "hash-1", owner_scope="app:a")  # the first, its owner
    assert await store.read_order_id_claim(order_id) == again
    # A claim is not a key record: GET's lookup of accepted orders never returns it.
    assert await store.find_order("app:t", order_id) is None
