"""`@idempotent` on `CosmosStore` over our Cosmos DB emulator: a completed call replays its
stored return value rebuilt as its type, a call in flight is waited for (bounded) or refused,
another payload under the key is a mismatch, a failure releases the claim, and a crashed
call's claim is taken over once its lease ends by the database's clock."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import date
from typing import Any

import pytest
from azure.cosmos.aio import ContainerProxy
from core_support import lease_ended, unique
from pydantic import BaseModel

from exactly_once import CosmosStore, InProgressElsewhereError, PayloadMismatchError, idempotent
from exactly_once.keys import key_record_id
from exactly_once.store import Record, RecordRead


class Receipt(BaseModel):
    event_id: str
    amount: int


@dataclasses.dataclass(frozen=True)
class Report:
    day: date
    rows: int


class Event(BaseModel):
    id: str
    amount: int
    attempt: int = 1


class Calls:
    """Counts a function's runs, and can hold one until released."""

    def __init__(self) -> None:
        self.runs = 0
        self.started = asyncio.Event()
        self.go = asyncio.Event()
        self.go.set()

    async def run(self) -> int:
        self.runs += 1
        self.started.set()
        await self.go.wait()
        return self.runs


class ReadSignallingStore(CosmosStore):
    """The real store, telling the test when a claim read the record it found taken (so a
    second call is known to be waiting, without a sleep)."""

    def __init__(self, container: ContainerProxy) -> None:
        super().__init__(container)
        self.read_seen = asyncio.Event()

    async def read(self, key: str, partition: str) -> RecordRead:
        found = await super().read(key, partition)
        self.read_seen.set()
        return found


class CrashingStore(CosmosStore):
    """The real store whose owner dies before it can release its claim."""

    async def release(self, owned: Record) -> None:
        return None


async def stored_document(container: ContainerProxy, scope: str, key: str) -> dict[str, Any]:
    record_id = key_record_id(scope, key)
    document: dict[str, Any] = await container.read_item(record_id, partition_key=record_id)
    return document


async def test_a_completed_call_replays_a_pydantic_model_without_running_again(
    store: CosmosStore, container: ContainerProxy
) -> None:
    calls = Calls()

    @idempotent(store=store, scope="credits", key=lambda event: event.id, expires_after_seconds=600)
    async def credit(event: Event) -> Receipt:
        await calls.run()
        return Receipt(event_id=event.id, amount=event.amount)

    event = Event(id=unique("evt"), amount=5)
    first = await credit(event)
    again = await credit(event)

    assert again == first == Receipt(event_id=event.id, amount=5)
    assert isinstance(again, Receipt)
    assert calls.runs == 1
    document = await stored_document(container, "credits", event.id)
    assert document["status"] == "completed"
    assert document["ttl"] == 600  # the record expires; nothing else of ours does


async def test_a_dataclass_and_plain_json_are_rebuilt_as_their_types(store: CosmosStore) -> None:
    calls = Calls()

    @idempotent(store=store, scope="reports", key=lambda day: f"report:{day.isoformat()}")
    async def report(day: date) -> Report:
        return Report(day, await calls.run())

    @idempotent(store=store, scope="totals", key=lambda name: name, output=dict[str, list[int]])
    async def totals(name: str):  # type: ignore[no-untyped-def]  # `output=` names the type
        return {name: [await calls.run()]}

    day = date(2026, 12, 4)  # each test has a container of its own
    key = unique("totals")
    firsts = (await report(day), await totals(key))
    replays = (await report(day), await totals(key))

    assert replays == firsts
    assert isinstance(replays[0], Report) and isinstance(replays[0].day, date)
    assert calls.runs == 2


async def test_the_same_key_with_another_payload_is_a_mismatch(store: CosmosStore) -> None:
    calls = Calls()

    @idempotent(store=store, scope="credits", key=lambda event: event.id)
    async def credit(event: Event) -> int:
        return await calls.run()

    event = Event(id=unique("evt"), amount=5)
    await credit(event)

    with pytest.raises(PayloadMismatchError):
        await credit(Event(id=event.id, amount=6))
    with pytest.raises(PayloadMismatchError):  # the default payload is every argument
        await credit(Event(id=event.id, amount=5, attempt=2))
    assert calls.runs == 1


async def test_a_payload_projection_decides_what_a_mismatch_compares(store: CosmosStore) -> None:
    calls = Calls()

    @idempotent(
        store=store,
        scope="credits",
        key=lambda event: event.id,
        payload=lambda event: event.model_dump(exclude={"attempt"}),
    )
    async def credit(event: Event) -> int:
        return await calls.run()

    event = Event(id=unique("evt"), amount=5)
    first = await credit(event)
    redelivered = await credit(Event(id=event.id, amount=5, attempt=3))

    assert redelivered == first == 1
    with pytest.raises(PayloadMismatchError):
        await credit(Event(id=event.id, amount=7, attempt=3))
    assert calls.runs == 1


async def test_a_failed_call_releases_its_claim_and_the_next_call_runs(
    store: CosmosStore, container: ContainerProxy
) -> None:
    calls = Calls()
    failures = [RuntimeError("the provider is down")]

    @idempotent(store=store, scope="jobs", key=lambda name: name)
    async def job(name: str) -> int:
        runs = await calls.run()
        if failures:
            raise failures.pop()
        return runs

    name = unique("job")
    with pytest.raises(RuntimeError, match="the provider is down"):
        await job(name)

    assert await job(name) == 2
    assert await job(name) == 2  # now a replay
    assert (await stored_document(container, "jobs", name))["attempts"] == 1  # claimed afresh


async def test_a_call_in_flight_is_waited_for_then_replayed(container: ContainerProxy) -> None:
    store = ReadSignallingStore(container)
    calls = Calls()

    @idempotent(store=store, scope="jobs", key=lambda name: name, max_wait_seconds=30)
    async def job(name: str) -> int:
        return await calls.run()

    name = unique("job")
    calls.go.clear()
    first = asyncio.create_task(job(name))
    await asyncio.wait_for(calls.started.wait(), 10)
    second = asyncio.create_task(job(name))
    await asyncio.wait_for(store.read_seen.wait(), 10)  # the second found the claim taken
    calls.go.set()

    assert list(await asyncio.wait_for(asyncio.gather(first, second), 30)) == [1, 1]
    assert calls.runs == 1


async def test_a_call_in_flight_past_the_bound_is_refused(store: CosmosStore) -> None:
    calls = Calls()

    @idempotent(store=store, scope="jobs", key=lambda name: name, max_wait_seconds=0)
    async def job(name: str) -> int:
        return await calls.run()

    name = unique("job")
    calls.go.clear()
    first = asyncio.create_task(job(name))
    await asyncio.wait_for(calls.started.wait(), 10)

    with pytest.raises(InProgressElsewhereError):
        await job(name)
    calls.go.set()
    assert await first == 1
    assert calls.runs == 1


async def test_a_crashed_calls_claim_is_taken_over_once_its_lease_ends(
    store: CosmosStore, container: ContainerProxy
) -> None:
    calls = Calls()
    name = unique("job")

    def job_on(on: CosmosStore) -> Any:
        @idempotent(store=on, scope="jobs", key=lambda n: n, lease_seconds=1, max_wait_seconds=0)
        async def job(n: str) -> int:
            runs = await calls.run()
            if on is not store:
                raise SystemExit("the process dies before it releases")
            return runs

        return job

    with pytest.raises(SystemExit):
        await job_on(CrashingStore(container))(name)
    job = job_on(store)
    with pytest.raises(InProgressElsewhereError):  # its lease is still live
        await job(name)
    record_id = key_record_id("jobs", name)
    found = await store.read(record_id, record_id)
    assert found.record is not None
    await lease_ended(store, found.record)

    assert await job(name) == 2
    assert (await stored_document(container, "jobs", name))["attempts"] == 2  # taken over


async def test_bad_keys_and_unusable_functions_are_clear_errors(store: CosmosStore) -> None:
    @idempotent(store=store, scope="jobs", key=lambda name: name)
    async def job(name: str) -> int:
        return 1

    with pytest.raises(ValueError, match="non-empty string"):
        await job("")

    def sync_job() -> int:
        return 1

    with pytest.raises(TypeError, match="async function"):
        idempotent(store=store, scope="jobs", key=str)(sync_job)  # type: ignore[arg-type]

    async def unannotated():  # type: ignore[no-untyped-def]
        return 1

    with pytest.raises(TypeError, match="return annotation"):
        idempotent(store=store, scope="jobs", key=str)(unannotated)
    with pytest.raises(ValueError, match="shorter than the lease"):
        idempotent(store=store, scope="jobs", key=str, lease_seconds=60, expires_after_seconds=10)

    @idempotent(store=store, scope="jobs", key=lambda thing: "k")
    async def takes_an_object(thing: object) -> int:
        return 1

    with pytest.raises(TypeError, match="pass payload="):
        await takes_an_object(object())


async def test_the_same_key_in_two_scopes_is_two_records(store: CosmosStore) -> None:
    calls = Calls()

    def job_in(scope: str) -> Any:
        @idempotent(store=store, scope=scope, key=lambda name: name)
        async def job(name: str) -> int:
            return await calls.run()

        return job

    name = unique("job")
    assert [await job_in("ours")(name), await job_in("theirs")(name)] == [1, 2]
    assert await job_in("ours")(name) == 1  # a new function object, the same scope: a replay
