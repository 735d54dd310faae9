"""One contract for the `exactly_once` record-store port, three stores: the core's CosmosStore
in its own shape and in billing's, and the unit tests' fake in billing's.

Billing claims its charges and refunds through the core's `Effects.two_phase` on the core's
CosmosStore, in billing's record shapes (`adapters/cosmos_billing.py`: the documents the console
and audits read); the unit tests run it on `FakeShapedRecords`. The same cases run against each
on our Cosmos emulator through the real SDK (and the fake), so the state machine sees the same
port whichever store it runs on.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from fakes import FakeFencedDocuments, FakeShapedRecords
from servers import CosmosServer

from exactly_once import CosmosStore
from exactly_once._records import RecordStatus, lease_is_live
from exactly_once.exceptions import RecordChangedError, RecordExistsError
from exactly_once.store import Record, RecordStore
from orders.adapters.cosmos_billing import ChargeRecordShape, billing_stores


@pytest.fixture
async def inbox(python_cosmos: CosmosServer) -> AsyncIterator[ContainerProxy]:
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        database = await client.create_database_if_not_exists("recordcontract")
        yield await database.create_container_if_not_exists(
            id="inbox", partition_key=PartitionKey(path="/orderId")
        )


@pytest.fixture(params=["core-cosmos", "billing-fake", "billing-cosmos"])
def store(request: pytest.FixtureRequest, inbox: ContainerProxy) -> RecordStore:
    if request.param == "billing-fake":
        return FakeShapedRecords(FakeFencedDocuments(), ChargeRecordShape())
    if request.param == "core-cosmos":
        return CosmosStore(inbox, partition_key_field="orderId")
    return CosmosStore(inbox, partition_key_field="orderId", shape=ChargeRecordShape())


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


async def test_a_charge_record_billing_wrote_before_the_core_reads_and_stays_in_its_shape(
    inbox: ContainerProxy,
) -> None:
    """A record as billing wrote it before it ran on the core (service/billing_records.py, on
    the same documents): read back as the core's record, taken over and completed, it keeps
    every field the console, the audits and operators read."""
    order_id = f"order-{uuid.uuid4().hex[:10]}"
    written_before: dict[str, Any] = {
        "id": f"billing:{order_id}:OrderAccepted",
        "orderId": order_id,
        "type": "billing",
        "consumer": "billing",
        "messageId": f"{order_id}:OrderAccepted",
        "status": "inProgress",
        "owner": "billing-0123456789ab",
        "leaseSeconds": 60.0,
        "amount": "12.5",
        "currency": "EUR",
        "paymentKey": f"billing:{order_id}",
        "paymentId": None,
        "attempts": 1,
        "ttl": 2_000_000,
    }
    await inbox.create_item(body=written_before)
    charges = billing_stores(inbox).charges

    found = (await charges.read(written_before["id"], order_id)).record
    assert found is not None
    assert (found.status, found.owner, found.downstream_key, found.request_hash) == (
        RecordStatus.IN_PROGRESS,
        "billing-0123456789ab",
        f"billing:{order_id}",
        "",
    )
    assert found.data == {
        "messageId": f"{order_id}:OrderAccepted",
        "amount": "12.5",
        "currency": "EUR",
    }
    taken = await charges.take_over(found, "billing-new/1", 60.0)
    await charges.complete(taken, "pay-1")

    stored = await inbox.read_item(item=written_before["id"], partition_key=order_id)
    kept = {key: value for key, value in stored.items() if not key.startswith("_")}
    assert kept == {
        **written_before,
        "status": "completed",
        "owner": "billing-new/1",
        "paymentId": "pay-1",
        "attempts": 2,
    }
