"""`Claims.finish_or_keep` over a fake record store: the decisions of a completion that the store
fails, apart from any emulator. A transient failure is retried in place; attempts run out: the
claim is kept in progress (never released) and written in the background; a write that landed
though its answer was lost counts as landed; a takeover fences every later write out; the
background gives up at its deadline and leaves the record in progress."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes import FakeIdempotencyStore

from exactly_once import TransientStoreError
from exactly_once._claims import Claims, pending_completions
from exactly_once._records import JsonInput
from exactly_once.options import CompletionRetries
from exactly_once.store import CompletionFailedError, Record, RecordStatus

OWNER = "http-first"


class Pauses:
    """The pauses a `Claims` asks for, recorded, each yielding to the loop without waiting."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await asyncio.sleep(0)


def claims_over(store: FakeIdempotencyStore, pauses: Pauses, **retries: Any) -> Claims:
    completion = CompletionRetries(**({"first_pause": 0.1, "max_pause": 0.4} | retries))
    return Claims(store, owner=OWNER, sleep=pauses, completion=completion)


async def claimed(store: FakeIdempotencyStore, key: str = "k-1") -> Record:
    wanted = Record(
        key=key,
        partition=key,
        request_hash="hash",
        status=RecordStatus.IN_PROGRESS,
        owner=OWNER,
        lease_seconds=30,
    )
    return await store.claim(wanted)


def stored(store: FakeIdempotencyStore, key: str = "k-1") -> Record:
    record = store.record(key)
    assert record is not None
    return record


async def test_a_transient_failure_is_retried_in_place() -> None:
    store, pauses = FakeIdempotencyStore(), Pauses()
    owned = await claimed(store)
    store.fail_next("complete", TransientStoreError("503"))

    assert await claims_over(store, pauses).finish_or_keep(owned, {"answer": 1}) is True
    assert stored(store).status is RecordStatus.COMPLETED
    assert store.calls.count("complete") == 2
    assert pauses.asked == [0.1]


async def test_attempts_run_out_the_claim_is_kept_and_written_in_the_background() -> None:
    store, pauses = FakeIdempotencyStore(), Pauses()
    owned = await claimed(store)
    for _ in range(4):  # three in place, the first in the background
        store.fail_next("complete", TransientStoreError("503"))

    with pytest.raises(CompletionFailedError) as failed:
        await claims_over(store, pauses, attempts=3).finish_or_keep(owned, {"answer": 1})
    assert failed.value.existing == owned and failed.value.attempts == 3
    assert stored(store).status is RecordStatus.IN_PROGRESS  # kept
    assert "release" not in store.calls
    [background] = pending_completions()

    assert await background is True
    assert (stored(store).status, stored(store).result) == (RecordStatus.COMPLETED, {"answer": 1})
    # In place 0.1 then 0.2; the background waits `max_pause` between its writes.
    assert pauses.asked == [0.1, 0.2, 0.4, 0.4]


class LostAnswers(FakeIdempotencyStore):
    """Writes the completion, then fails as a timeout would: the write landed, its answer did
    not reach the caller."""

    def __init__(self) -> None:
        super().__init__()
        self.lose_next = 0

    async def complete(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> Record:
        written = await super().complete(owned, result, status)
        if self.lose_next:
            self.lose_next -= 1
            raise TransientStoreError("timeout after the write")
        return written


async def test_a_write_that_landed_though_its_answer_was_lost_counts_as_landed() -> None:
    store, pauses = LostAnswers(), Pauses()
    owned = await claimed(store)
    store.lose_next = 1

    # The second attempt meets a moved ETag: our own first write, read back and recognised.
    assert await claims_over(store, pauses).finish_or_keep(owned, {"answer": 1}) is True
    assert store.calls[-2:] == ["complete", "read"]


async def test_a_takeover_fences_the_completion_out() -> None:
    store, pauses = FakeIdempotencyStore(), Pauses()
    owned = await claimed(store)
    store.fail_next("complete", TransientStoreError("503"))

    async def a_retry_takes_it_over() -> None:
        await store.take_over(owned, "http-second", 30)

    store.before_next("complete", a_retry_takes_it_over)

    assert await claims_over(store, pauses).finish_or_keep(owned, {"answer": 1}) is False
    assert (stored(store).owner, stored(store).status) == ("http-second", RecordStatus.IN_PROGRESS)


class DownForCompletions(FakeIdempotencyStore):
    """Every completion fails as an outage would."""

    async def complete(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> Record:
        self.calls.append("complete")
        raise TransientStoreError("503")


async def test_the_background_gives_up_at_its_deadline_and_leaves_the_record_in_progress() -> None:
    store, pauses = DownForCompletions(), Pauses()
    owned = await claimed(store)
    claims = claims_over(
        store, pauses, attempts=1, first_pause=0.0, max_pause=0.001, background_seconds=0.05
    )

    with pytest.raises(CompletionFailedError):
        await claims.finish_or_keep(owned, {"answer": 1})
    [background] = pending_completions()

    assert await asyncio.wait_for(background, 10) is False
    assert stored(store).status is RecordStatus.IN_PROGRESS
    assert "release" not in store.calls


async def test_no_background_write_when_it_is_turned_off() -> None:
    store, pauses = FakeIdempotencyStore(), Pauses()
    owned = await claimed(store)
    store.fail_next("complete", TransientStoreError("503"))

    with pytest.raises(CompletionFailedError):
        await claims_over(store, pauses, attempts=1, background_seconds=0).finish_or_keep(
            owned, {"answer": 1}
        )

    assert pending_completions() == frozenset()
    assert stored(store).status is RecordStatus.IN_PROGRESS


@pytest.mark.parametrize(
    "settings",
    [
        {"attempts": 0},
        {"first_pause": -1},
        {"first_pause": 2, "max_pause": 1},
        {"background_seconds": -1},
        {"first_pause": 0, "max_pause": 0, "background_seconds": 1},
    ],
)
def test_settings_that_cannot_retry_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"CompletionRetries|background_seconds"):
        CompletionRetries(**settings)
