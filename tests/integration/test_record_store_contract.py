"""One contract for the `exactly_once` record-store port, three stores: the core's CosmosStore,
and billing's FencedRecords over the fake and over CosmosFencedDocuments.

Billing claims its charges and refunds through the core's state machine on FencedRecords (its
records in the shapes the console and audits read); the core's own CosmosStore serves every
other user. The same cases run against each on our Cosmos emulator through the real SDK (and
the fake), so the state machine sees the same port whichever store it runs on.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from fakes import LAYOUT, FakeFencedDocuments
from servers import CosmosServer

from exactly_once import CosmosStore, Record, RecordStore
from exactly_once.exceptions import RecordChangedError, RecordExistsError
from exactly_once.records import RecordStatus, lease_is_live
from orders.adapters.cosmos_fenced import CosmosFencedDocuments
from orders.service.billing_records import FencedRecords


@pytest.fixture(params=["core-cosmos", "billing-fake", "billing-cosmos"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RecordStore]:
    if request.param == "billing-fake":
        yield FencedRecords.charges(FakeFencedDocuments(), LAYOUT)
        return
    server: CosmosServer = request.getfixturevalue("python_cosmos")
    async with CosmosClient(server.endpoint, credential=server.key) as client:
        database = await client.create_database_if_not_exists("recordcontract")
        if request.param == "core-cosmos":
            container = await database.create_container_if_not_exists(
                id="core", partition_key=PartitionKey(path="/orderId")
            )
            yield CosmosStore(container, partition_key_field="orderId")
        else:
            container = await database.create_container_if_not_exists(
                id="inbox", partition_key=PartitionKey(path="/orderId")
            )
            yield FencedRecords.charges(CosmosFencedDocuments(container), LAYOUT)


def charge(owner: str = "worker-a") -> Record:
    """A record every store can hold: billing's charge record, as the core sees it."""
    order_id = f"order-{uuid.uuid4().hex[:10]}"
    return Record(
        key=f"billing:{order_id}:OrderAccepted",
        partition=order_id,
        request_hash="",
        status=RecordStatus.IN_PROGRESS,
        owner=owner,
        lease_seconds=10.0,
        downstream_key=f"billing:{order_id}",
        data={"messageId": f"{order_id}:OrderAccepted", "amount": "12.5", "currency": "EUR"},
    )


def unstamped(record: Record) -> Record:
    return dataclasses.replace(record, stamp=None)


async def test_a_claim_is_stamped_and_read_back_as_written(store: RecordStore) -> None:
    wanted = charge()

    claimed = await store.claim(wanted)
    found = await store.read(wanted.key, wanted.partition)

    assert claimed.stamp is not None and claimed.stamp.etag
    assert unstamped(claimed) == wanted
    assert found.record == claimed
    assert lease_is_live(claimed, found.database_now_ms)


async def test_a_taken_key_carries_the_stored_record_and_the_database_time(
    store: RecordStore,
) -> None:
    claimed = await store.claim(charge())

    with pytest.raises(RecordExistsError) as taken:
        await store.claim(dataclasses.replace(unstamped(claimed), owner="worker-b"))

    assert taken.value.existing == claimed
    assert claimed.stamp is not None
    assert taken.value.database_now_ms >= claimed.stamp.written_at_s * 1000


async def test_take_over_and_complete_are_fenced_by_the_stamp(store: RecordStore) -> None:
    claimed = await store.claim(charge())

    taken = await store.take_over(claimed, "worker-b", 20.0)
    with pytest.raises(RecordChangedError):
        await store.take_over(claimed, "worker-c", 20.0)
    with pytest.raises(RecordChangedError):
        await store.complete(claimed, "pay-late")
    done = await store.complete(taken, "pay-1")

    assert (taken.owner, taken.attempts, taken.lease_seconds) == ("worker-b", 2, 20.0)
    assert (done.status, done.result, done.owner) == (RecordStatus.COMPLETED, "pay-1", "worker-b")
    assert (await store.read(done.key, done.partition)).record == done


async def test_a_failure_is_recorded(store: RecordStore) -> None:
    claimed = await store.claim(charge())

    failed = await store.complete(claimed, None, RecordStatus.FAILED)

    assert (failed.status, failed.result) == (RecordStatus.FAILED, None)
    assert (await store.read(failed.key, failed.partition)).record == failed


async def test_release_deletes_only_the_version_it_owns(store: RecordStore) -> None:
    claimed = await store.claim(charge())
    taken = await store.take_over(claimed, "worker-b", 20.0)

    await store.release(claimed)  # stale: worker-b owns it now
    kept = (await store.read(taken.key, taken.partition)).record
    await store.release(taken)
    await store.release(taken)  # gone already: nothing to do

    assert kept == taken
    assert (await store.read(taken.key, taken.partition)).record is None


async def test_a_missing_record_reads_as_none(store: RecordStore) -> None:
    wanted = charge()

    assert (await store.read(wanted.key, wanted.partition)).record is None
