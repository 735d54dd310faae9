"""Budgets that fit the host (`exactly_once._budgets`): a backoff that cannot fit the host's
lock-renewal horizon is refused when the consumer or the worker is built, and a busy session
keeps its lock past the renewal horizon, on our Service Bus emulator through the real SDK."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient

from exactly_once import (
    Backoff,
    BudgetError,
    ConsumerOptions,
    Decision,
    Effects,
    Outcome,
    exactly_once,
)
from exactly_once._budgets import timespan_seconds
from exactly_once.retries import LockRenewal
from exactly_once.worker import WorkerOptions, WorkerStats, run_session_worker
from servicebus_emulator import RunningEmulator, start_in_background

SESSIONS = "busy-sessions"
LOCK_SECONDS = 2
# Shortened: the session's lock would be renewed for 3 s only, were it counted from its start.
RENEWAL_SECONDS = 3.0
SHORT = Backoff(first_delay_seconds=0.01, max_delay_seconds=0.01, budget_seconds=0.1)


async def effect(message: bytes, effects: Effects) -> Outcome:
    return Outcome.PROCESSED


def test_a_consumer_whose_backoff_cannot_fit_the_host_is_refused_naming_both_numbers() -> None:
    build = exactly_once(
        consumer="invoices",
        parse=bytes,
        options=ConsumerOptions(backoff=Backoff(budget_seconds=270)),
    )
    with pytest.raises(BudgetError) as refused:
        build(effect)
    # 270 s of backoff + the default 60 s attempt, against the Functions host's 300 s.
    message = str(refused.value)
    assert "consumer 'invoices'" in message
    assert "330 s" in message and "270 s" in message and "60 s" in message
    assert "300 s" in message
    assert isinstance(refused.value, ValueError)


def test_the_attempt_bound_counts_and_a_longer_renewal_admits_the_budget() -> None:
    with pytest.raises(BudgetError, match="longest attempt of 200 s"):
        exactly_once(
            consumer="slow",
            parse=bytes,
            options=ConsumerOptions(lock_renewal=LockRenewal(attempt_seconds=200)),
        )(effect)
    admitted = exactly_once(
        consumer="slow",
        parse=bytes,
        options=ConsumerOptions(
            backoff=Backoff(budget_seconds=270), lock_renewal=LockRenewal(renewal_seconds=600)
        ),
    )(effect)
    assert admitted.consumer == "slow"


def test_a_worker_refuses_a_budget_its_renewal_cannot_cover_twice() -> None:
    # A received message may wait for a slot as long as another is held, then be held itself.
    with pytest.raises(BudgetError) as refused:
        WorkerOptions(max_lock_renewal_seconds=300)
    message = str(refused.value)
    assert "WorkerOptions" in message and "360 s" in message and "300 s" in message
    WorkerOptions(max_lock_renewal_seconds=300, attempt_seconds=20)  # 2 x (120 + 20) fits
    assert WorkerOptions().max_lock_renewal_seconds == 600


def test_the_horizon_is_read_from_host_json(tmp_path: Path) -> None:
    host = tmp_path / "host.json"
    host.write_text(
        json.dumps({"extensions": {"serviceBus": {"maxAutoLockRenewalDuration": "00:02:30"}}})
    )
    assert LockRenewal.from_host_json(host).renewal_seconds == 150
    host.write_text(json.dumps({"version": "2.0"}))
    assert LockRenewal.from_host_json(host).renewal_seconds == 300  # the host's default
    assert timespan_seconds("1.00:00:01.5") == 86_401.5
    with pytest.raises(ValueError, match="timespan"):
        timespan_seconds("PT5M")


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    """A session-enabled queue with a short lock."""
    queue: dict[str, Any] = {
        "Name": SESSIONS,
        "Properties": {
            "DefaultMessageTimeToLive": "PT1H",
            "LockDuration": f"PT{LOCK_SECONDS}S",
            "MaxDeliveryCount": 10,
            "RequiresSession": True,
        },
    }
    namespace = {"Name": "sbemulatorns", "Queues": [queue], "Topics": []}
    running = start_in_background(
        config={"UserConfig": {"Namespaces": [namespace], "Logging": {"Type": "Console"}}}
    )
    yield running
    running.stop()


@pytest.mark.slow
async def test_a_busy_session_keeps_its_lock_past_the_renewal_horizon(
    emulator: RunningEmulator,
) -> None:
    session = f"order-{uuid.uuid4().hex[:6]}"
    count = 12
    handled: list[tuple[int, int | None]] = []
    started = time.monotonic()

    async def handle(message: ServiceBusReceivedMessage) -> Decision:
        # Each message takes a while: the session stays busy for about 2.5 x the horizon.
        await asyncio.sleep(0.6)  # the work being timed, not a synchronisation
        handled.append((int(b"".join(message.body)), message.delivery_count))
        return Decision.complete(Outcome.PROCESSED)

    options = WorkerOptions(
        concurrency=1,
        max_lock_renewal_seconds=RENEWAL_SECONDS,
        backoff=SHORT,
        attempt_seconds=1.0,
        receive_wait_seconds=0.5,
        session_idle_seconds=0.5,
    )
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(SESSIONS) as sender:
            await sender.send_messages(
                [ServiceBusMessage(str(n), session_id=session) for n in range(count)]
            )
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_session_worker(
                client, queue_name=SESSIONS, handle=handle, options=options, stop=stop
            )
        )
        deadline = time.monotonic() + 60
        while len(handled) < count and not worker.done():
            assert time.monotonic() < deadline, f"handled {handled}"
            await asyncio.sleep(0.1)  # polling the handler's record, bounded by the deadline
        busy_for = time.monotonic() - started
        stop.set()
        stats = await asyncio.wait_for(worker, 30)

    assert busy_for > 2 * RENEWAL_SECONDS
    # Every message once, in order, on its first delivery: the lock never lapsed.
    assert handled == [(n, 0) for n in range(count)]
    assert stats == WorkerStats(received=count, settled=count, settlement_failures=0)
