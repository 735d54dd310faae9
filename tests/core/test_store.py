"""`CosmosStore` against our Cosmos DB emulator through the real SDK: the record-store port's
contract (the create is the lock, every later write If-Match) and the document port's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from core_support import lease_ended, unique

from cosmos_emulator import start_in_background
from exactly_once import CosmosStore, Outcome, StoreError, TransientStoreError, exactly_once
from exactly_once._claims import Claims
from exactly_once._records import lease_is_live
from exactly_once.cosmos import (
    ErrorKinds,
    if_match,
    if_match_write,
    is_refusal_status,
    is_transient_status,
    point_read,
    read_with_clock,
    store_error_for,
    store_errors,
)
from exactly_once.decisions import Settlement
from exactly_once.store import (
    DocumentExistsError,
    Record,
    RecordChangedError,
    RecordExistsError,
    RecordStatus,
    StoreRefusedError,
)


def new_record(owner: str = "owner-a", lease_seconds: float = 30.0) -> Record:
    key = unique("record")
    return Record(
        key=key,
        partition=unique("partition"),
        request_hash="hash-1",
        status=RecordStatus.IN_PROGRESS,
        owner=owner,
        lease_seconds=lease_seconds,
        downstream_key="downstream-1",
        data={"amount": "12.50", "currency": "EUR"},
    )


async def test_a_claim_is_stamped_and_a_second_claim_carries_the_first(
    store: CosmosStore,
) -> None:
    wanted = new_record()

    claimed = await store.claim(wanted)
    with pytest.raises(RecordExistsError) as taken:
        await store.claim(new_record_like(wanted, owner="owner-b"))

    assert claimed.stamp is not None and claimed.stamp.etag
    assert taken.value.existing == claimed
    assert taken.value.database_now_ms >= claimed.stamp.written_at_s * 1000
    assert lease_is_live(taken.value.existing, taken.value.database_now_ms)


def new_record_like(record: Record, *, owner: str) -> Record:
    return Record(
        key=record.key,
        partition=record.partition,
        request_hash=record.request_hash,
        status=RecordStatus.IN_PROGRESS,
        owner=owner,
    )


async def test_read_finds_nothing_for_a_missing_key(store: CosmosStore) -> None:
    found = await store.read(unique("missing"), unique("partition"))

    assert found.record is None


async def test_take_over_moves_the_record_once_and_fences_the_old_owner(
    store: CosmosStore,
) -> None:
    claimed = await store.claim(new_record(lease_seconds=0))

    taken = await store.take_over(claimed, "owner-b", 5.0)
    with pytest.raises(RecordChangedError):
        await store.take_over(claimed, "owner-c", 5.0)  # the old stamp no longer matches
    with pytest.raises(RecordChangedError):
        await store.complete(claimed, "late answer")  # nor may the old owner complete

    assert (taken.owner, taken.attempts, taken.lease_seconds) == ("owner-b", 2, 5.0)
    assert taken.stamp != claimed.stamp
    assert (await store.read(claimed.key, claimed.partition)).record == taken


async def test_complete_records_the_result_and_status(store: CosmosStore) -> None:
    claimed = await store.claim(new_record())

    done = await store.complete(claimed, {"paymentId": "p-1", "amounts": [1, 2.5]})
    failed_key = await store.claim(new_record())
    failed = await store.complete(failed_key, {"reason": "No"}, RecordStatus.FAILED)

    assert (done.status, done.result) == (
        RecordStatus.COMPLETED,
        {"paymentId": "p-1", "amounts": [1, 2.5]},
    )
    assert failed.status is RecordStatus.FAILED
    assert (await store.read(done.key, done.partition)).record == done


async def test_release_deletes_only_the_version_it_owns(store: CosmosStore) -> None:
    claimed = await store.claim(new_record(lease_seconds=0))
    taken = await store.take_over(claimed, "owner-b", 30.0)

    await store.release(claimed)  # stale: someone else owns it now
    assert (await store.read(taken.key, taken.partition)).record == taken
    await store.release(taken)
    await store.release(taken)  # already gone: nothing to do

    assert (await store.read(taken.key, taken.partition)).record is None


async def test_a_lease_ends_by_the_database_clock(store: CosmosStore) -> None:
    claimed = await store.claim(new_record(lease_seconds=0))

    ended = await lease_ended(store, claimed)

    assert ended == claimed  # nothing was written: only the database's time moved


async def test_a_document_that_is_not_a_record_is_refused(
    store: CosmosStore, container: ContainerProxy
) -> None:
    wanted = new_record()
    await container.create_item({"id": wanted.key, "pk": wanted.partition, "type": "order"})

    with pytest.raises(StoreError, match="not an exactly-once record"):
        await store.claim(wanted)


async def test_create_all_writes_all_or_nothing(store: CosmosStore) -> None:
    partition = unique("partition")
    await store.create_all(partition, [{"id": "b", "n": 1}])

    with pytest.raises(DocumentExistsError) as exists:
        await store.create_all(partition, [{"id": "a"}, {"id": "b"}, {"id": "c"}])

    assert (exists.value.document_id, exists.value.index) == ("b", 1)
    assert await store.get("a", partition) is None
    assert await store.get("c", partition) is None
    stored = await store.get("b", partition)
    assert stored is not None and stored.body == {"id": "b", "n": 1, "pk": partition}


async def test_replace_needs_the_current_etag(store: CosmosStore) -> None:
    partition = unique("partition")
    await store.create_all(partition, [{"id": "doc", "n": 1}])
    first = await store.get("doc", partition)
    assert first is not None

    await store.replace({"id": "doc", "n": 2}, partition, etag=first.etag)
    with pytest.raises(RecordChangedError):
        await store.replace({"id": "doc", "n": 3}, partition, etag=first.etag)

    now = await store.get("doc", partition)
    assert now is not None and now.body["n"] == 2


async def test_an_unreachable_store_is_transient_and_the_message_is_abandoned() -> None:
    emulator = start_in_background(host="127.0.0.1", port=0)
    try:
        async with CosmosClient(emulator.url, credential=emulator.key) as client:
            database = await client.create_database_if_not_exists("outage")
            container = await database.create_container_if_not_exists(
                id="records", partition_key=PartitionKey(path="/pk")
            )
            store = CosmosStore(container)
            consumer = exactly_once(consumer="outage", parse=json.loads, store=store)(
                lambda body, effects: effects.inbox("p", [{"id": "doc"}])
            )
            emulator.stop()  # the store goes away under a warm client

            with pytest.raises(TransientStoreError):
                await store.read("k", "p")
            decision = await consumer.decide(b"{}", "m-1")
    finally:
        emulator.stop()

    assert (decision.outcome, decision.settlement) == (
        Outcome.TRANSIENT_FAILURE,
        Settlement.ABANDON,
    )


class FlatShape:
    """A shape of a user's own: flat fields under names another reader already knows."""

    record_type = "myClaim"

    def fields(self, record: Record) -> dict[str, Any]:
        return {
            "hash": record.request_hash,
            "state": record.status.value,
            "by": record.owner,
            "leaseSeconds": record.lease_seconds,
            "attempts": record.attempts,
            "answer": record.result,
        }

    def record(self, document: Mapping[str, Any], key: str, partition: str) -> Record:
        return Record(
            key=key,
            partition=partition,
            request_hash=str(document["hash"]),
            status=RecordStatus(document["state"]),
            owner=str(document["by"]),
            lease_seconds=float(document["leaseSeconds"]),
            attempts=int(document["attempts"]),
            result=document.get("answer"),
        )


async def test_a_shape_of_your_own_lays_out_the_records_fields(
    container: ContainerProxy,
) -> None:
    store = CosmosStore(container, shape=FlatShape())
    claims = Claims(store, owner="owner-a", max_wait_seconds=0)
    wanted = replace(new_record(), downstream_key=None, data=None, expires_after_seconds=60)

    owned = await claims.own(wanted)
    assert await claims.finish(owned, {"answer": 42})
    again = await Claims(store, owner="owner-b").own(replace(wanted, owner="owner-b"))

    stored = await container.read_item(wanted.key, partition_key=wanted.partition)
    assert {key: stored[key] for key in ("type", "hash", "state", "by", "answer", "ttl")} == {
        "type": "myClaim",
        "hash": "hash-1",
        "state": "completed",
        "by": "owner-a",
        "answer": {"answer": 42},
        "ttl": 60,
    }
    assert "requestHash" not in stored and "result" not in stored
    assert again.status is RecordStatus.COMPLETED and again.result == {"answer": 42}
    assert again.expires_after_seconds == 60 and again.stamp is not None


async def test_a_shape_refuses_a_document_that_is_not_its_record(
    container: ContainerProxy, store: CosmosStore
) -> None:
    core_record = await store.claim(new_record())

    with pytest.raises(StoreError):
        await CosmosStore(container, shape=FlatShape()).read(core_record.key, core_record.partition)


class AppFailure(Exception):
    """An application's own failure (as the orders app's StoreError)."""


class AppTransient(AppFailure):
    """An application's own transient failure."""


class AppRefused(AppFailure):
    """An application's own refusal of the request itself."""


class AppLeaseLost(Exception):
    """An application's own lost-race signal."""


APP_ERRORS = ErrorKinds(failure=AppFailure, transient=AppTransient, changed=AppLeaseLost)


async def test_the_one_translation_raises_an_applications_own_exceptions(
    container: ContainerProxy,
) -> None:
    partition = unique("partition")
    created = await container.create_item({"id": "doc", "pk": partition, "n": 1})
    await container.replace_item("doc", {"id": "doc", "pk": partition, "n": 2})

    with pytest.raises(AppLeaseLost), if_match_write("moved", APP_ERRORS):
        await container.replace_item(
            "doc", {"id": "doc", "pk": partition, "n": 3}, **if_match(created["_etag"])
        )
    with pytest.raises(AppFailure), store_errors(APP_ERRORS):
        await container.create_item({"pk": partition})  # no id: a 400, never worth a retry
    assert await point_read(container, "missing", partition, APP_ERRORS) is None
    found = await read_with_clock(container, "doc", partition, APP_ERRORS)
    assert found is not None
    stored, now_ms = found
    assert stored["n"] == 2 and now_ms >= stored["_ts"] * 1000
    assert await read_with_clock(container, "missing", partition, APP_ERRORS) is None


def test_transient_statuses_are_the_retryable_ones() -> None:
    assert [is_transient_status(s) for s in (408, 410, 429, 449, 500, 503)] == [True] * 6
    assert [is_transient_status(s) for s in (None, 400, 403, 404, 409, 412)] == [False] * 6
    assert isinstance(store_error_for(429, "throttled", APP_ERRORS), AppTransient)
    assert type(store_error_for(400, "bad", APP_ERRORS)) is AppFailure


def test_a_refusal_of_the_request_itself_is_its_own_error_and_the_deployments_are_not() -> None:
    refusals = (400, 413, 414, 422)
    assert [is_refusal_status(s) for s in refusals] == [True] * len(refusals)
    # The credential, its role, a missing container, the conflicts and the transient ones.
    others = (None, 401, 403, 404, 409, 412, 408, 429, 449, 500, 503)
    assert [is_refusal_status(s) for s in others] == [False] * len(others)
    assert type(store_error_for(400, "an id with /")) is StoreRefusedError
    assert type(store_error_for(413, "too large")) is StoreRefusedError
    assert type(store_error_for(403, "forbidden")) is StoreError
    refusing = ErrorKinds(failure=AppFailure, transient=AppTransient, refused=AppRefused)
    assert type(store_error_for(413, "too large", refusing)) is AppRefused
