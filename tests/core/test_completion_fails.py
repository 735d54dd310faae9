"""A completion the store fails never runs the effect again: `IdempotencyKeys` and
`@idempotent` over `CosmosStore` on our Cosmos DB emulator, its fault switches failing the
completion write (the record's replace) and nothing else.

Once: the write is retried in place and the caller sees the normal answer. For good: the effect
has run once, the HTTP client gets a 503 problem with `Retry-After` (the function's caller a
`CompletionFailedError`), the record stays in progress (a retry is refused as in progress, never
run), and once the store is back the background write records the answer: the retry gets the
replay. Only when nothing could record it before its lease ended does a retry take it over, as
after a crash.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from core_support import lease_ended, unique
from idempotency_app import Endpoint, app_for
from servers import CosmosServer, clear_faults, fail_replaces

from exactly_once import CosmosStore, InProgressElsewhereError, TransientStoreError, idempotent
from exactly_once._claims import pending_completions
from exactly_once._idempotency_key import HEADER, IdempotencyKeys
from exactly_once._problems import PROBLEM_JSON, REPLAYED_HEADER
from exactly_once.keys import key_record_id
from exactly_once.options import CompletionRetries
from exactly_once.store import CompletionFailedError, RecordStatus

# 408 (a timeout) is not retried by the SDK on a write: one fault is one failed attempt of ours.
# A 503 the SDK retries itself (half a second each time) before we see it: the outage of
# `test_a_completion_failing_for_good_is_503_then_the_replay_never_a_second_run`; the others
# fail faster with timeouts (tests/integration/test_api_on_cosmos.py has the orders API's 503).
TIMEOUT, UNAVAILABLE, FOR_GOOD = 408, 503, 1_000_000
# Short pauses: the in-place attempts and the background writes are quick to watch.
QUICK = CompletionRetries(attempts=3, first_pause=0.05, max_pause=0.2, background_seconds=30)
LEASE_SECONDS = 30.0  # long enough that no retry in these tests meets an ended lease by chance


@pytest.fixture
async def keys_app(
    store: CosmosStore,
) -> AsyncIterator[tuple[httpx.AsyncClient, Endpoint]]:
    endpoint = Endpoint()
    keys = IdempotencyKeys(store, scope="charges", lease_seconds=LEASE_SECONDS, completion=QUICK)
    transport = httpx.ASGITransport(app=app_for(keys, endpoint), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client, endpoint


@pytest.fixture
async def faults_cleared(python_cosmos: CosmosServer) -> AsyncIterator[CosmosServer]:
    """The emulator, its fault rules removed after the test whatever happened."""
    yield python_cosmos
    await clear_faults(python_cosmos)


async def until(
    check: Callable[[], Awaitable[httpx.Response]], *, within: float = 10.0
) -> httpx.Response:
    """Send the retry until it is answered with something else than 409 (a poll with a
    deadline: the background write lands within its pause once the store is back)."""
    deadline = time.monotonic() + within
    while True:
        response = await check()
        if response.status_code != 409 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.05)  # a retry's pause, bounded by the deadline


# --- IdempotencyKeys ------------------------------------------------------------------------


async def test_a_completion_failing_once_is_retried_in_place_and_answered(
    faults_cleared: CosmosServer, keys_app: tuple[httpx.AsyncClient, Endpoint]
) -> None:
    client, endpoint = keys_app
    key = unique("key")
    await fail_replaces(faults_cleared, key_record_id("charges", key), status=TIMEOUT, count=1)

    first = await client.post("/things", json={"amount": 5}, headers={HEADER: key})
    again = await client.post("/things", json={"amount": 5}, headers={HEADER: key})

    assert (first.status_code, first.json()) == (201, {"run": 1})
    assert (again.status_code, again.json(), again.headers[REPLAYED_HEADER]) == (
        201,
        {"run": 1},
        "true",
    )
    assert endpoint.runs == 1


async def test_a_completion_failing_for_good_is_503_then_the_replay_never_a_second_run(
    faults_cleared: CosmosServer,
    store: CosmosStore,
    keys_app: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = keys_app
    key = unique("key")
    record_id = key_record_id("charges", key)
    await fail_replaces(faults_cleared, record_id, status=UNAVAILABLE, count=FOR_GOOD)

    async def send() -> httpx.Response:
        return await client.post("/things", json={"amount": 5}, headers={HEADER: key})

    failed = await send()
    while_down = await send()

    # The request ran once and says so: retry with the same key, in a few seconds.
    assert failed.status_code == 503
    assert failed.headers["content-type"] == PROBLEM_JSON
    assert failed.json()["type"] == "urn:exactly-once:problem:response-not-recorded"
    assert 1 <= int(failed.headers["retry-after"]) <= 5
    # Not released: the retry meets the record in progress and is refused, never run.
    assert while_down.status_code == 409 and "retry-after" in while_down.headers
    kept = (await store.read(record_id, record_id)).record
    assert kept is not None and kept.status is RecordStatus.IN_PROGRESS

    await clear_faults(faults_cleared)
    replayed = await until(send)

    assert (replayed.status_code, replayed.json(), replayed.headers[REPLAYED_HEADER]) == (
        201,
        {"run": 1},
        "true",
    )
    assert endpoint.runs == 1


async def test_with_nothing_recorded_before_the_lease_ends_a_retry_takes_over(
    faults_cleared: CosmosServer, store: CosmosStore
) -> None:
    """The limit of the promise, as after a crash: a store down for longer than the lease (no
    background write here) leaves an in-progress record whose lease ended; the retry takes it
    over and runs again, told so by `claim.took_over`."""
    endpoint = Endpoint()
    no_background = CompletionRetries(attempts=2, first_pause=0.05, background_seconds=0)
    keys = IdempotencyKeys(store, scope="charges", lease_seconds=1, completion=no_background)
    transport = httpx.ASGITransport(app=app_for(keys, endpoint), raise_app_exceptions=False)
    key = unique("key")
    record_id = key_record_id("charges", key)
    await fail_replaces(faults_cleared, record_id, status=TIMEOUT, count=FOR_GOOD)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        failed = await client.post("/things", json={}, headers={HEADER: key})
        await clear_faults(faults_cleared)
        kept = (await store.read(record_id, record_id)).record
        assert kept is not None
        await lease_ended(store, kept)
        taken = await client.post("/things", json={}, headers={HEADER: key})

    assert failed.status_code == 503
    assert (taken.status_code, taken.json()) == (201, {"run": 2})
    assert endpoint.took_over == [False, True]


# --- @idempotent ----------------------------------------------------------------------------


class Credits:
    """`credit(event_id)`, an `@idempotent` function over `store` whose runs are counted."""

    def __init__(self, store: CosmosStore, *, max_wait_seconds: float = 0) -> None:
        self.runs: list[str] = []

        @idempotent(
            store=store,
            scope="credits",
            key=lambda event_id: event_id,
            completion=QUICK,
            lease_seconds=LEASE_SECONDS,
            max_wait_seconds=max_wait_seconds,
        )
        async def credit(event_id: str) -> int:
            self.runs.append(event_id)
            return len(self.runs)

        self.credit = credit


async def test_a_function_whose_completion_fails_once_runs_once_and_returns(
    faults_cleared: CosmosServer, store: CosmosStore
) -> None:
    credits = Credits(store)
    event_id = unique("event")
    await fail_replaces(faults_cleared, key_record_id("credits", event_id), status=TIMEOUT, count=1)

    assert (await credits.credit(event_id), await credits.credit(event_id)) == (1, 1)
    assert credits.runs == [event_id]


async def test_a_function_whose_completion_fails_for_good_raises_then_replays(
    faults_cleared: CosmosServer, store: CosmosStore
) -> None:
    credits = Credits(store, max_wait_seconds=0)
    event_id = unique("event")
    record_id = key_record_id("credits", event_id)
    await fail_replaces(faults_cleared, record_id, status=TIMEOUT, count=FOR_GOOD)

    with pytest.raises(CompletionFailedError) as failed:
        await credits.credit(event_id)
    with pytest.raises(InProgressElsewhereError):  # kept, not released: never run again
        await credits.credit(event_id)
    await clear_faults(faults_cleared)
    assert await asyncio.wait_for(asyncio.gather(*pending_completions()), 10) == [True]

    assert isinstance(failed.value, TransientStoreError)
    assert failed.value.existing.key == record_id
    assert await credits.credit(event_id) == 1  # the replay
    assert credits.runs == [event_id]


async def test_a_call_waiting_for_a_failed_completion_gets_the_replay(
    faults_cleared: CosmosServer, store: CosmosStore
) -> None:
    """A later call with the key waits (`max_wait_seconds`) while the background write is
    still trying, and returns the recorded value once it lands."""
    credits = Credits(store, max_wait_seconds=10)
    event_id = unique("event")
    await fail_replaces(
        faults_cleared, key_record_id("credits", event_id), status=TIMEOUT, count=FOR_GOOD
    )
    with pytest.raises(CompletionFailedError):
        await credits.credit(event_id)
    waiting = asyncio.create_task(credits.credit(event_id))
    await clear_faults(faults_cleared)

    assert await asyncio.wait_for(waiting, 15) == 1
    assert credits.runs == [event_id]
