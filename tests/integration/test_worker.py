"""The worker's loop (the core's, over the app's consumers' door) against our Service Bus
emulator through the real SDK (store faked)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import AutoLockRenewer, ServiceBusClient

from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.worker import Handle, Worker, WorkerOptions
from orders.adapters.servicebus_consumers import built, door_consumer
from orders.adapters.servicebus_worker import door_handle
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints.localstack import QueueOptions
from orders.service.ports import MessageHandler
from servicebus_emulator import RunningEmulator, start_in_background

QUEUE = "orders"


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    running = start_in_background(config=QueueOptions(name=QUEUE, lock_seconds=30).config())
    yield running
    running.stop()


class CompletingHandler:
    """Completes every message."""

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, key=message.message_id)


class FailingHook:
    """A bug around the consumer: the worker's `after_decision` hook raises."""

    def __init__(self) -> None:
        self.calls = 0
        self.retried = asyncio.Event()

    def __call__(self, decision: Decision) -> None:
        self.calls += 1
        if self.calls >= 2:
            self.retried.set()
        raise RuntimeError("boom")


def through_the_door(
    handler: MessageHandler, after_decision: FailingHook | None = None
) -> Handle[Decision]:
    return door_handle(door_consumer(QUEUE, built(handler)), after_decision)


class GatedHandler:
    """Completes every message, but only once `release` is set; records what it saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.seen: list[str | None] = []

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        self.seen.append(message.message_id)
        self.started.set()
        await self.release.wait()
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, key=message.message_id)


class OneSlowHandler:
    """Completes every message at once, except `slow_id`, held until `release` is set."""

    def __init__(self, slow_id: str) -> None:
        self.slow_id = slow_id
        self.release = asyncio.Event()
        self.slow_started = asyncio.Event()
        self.completed: list[str | None] = []
        self.others_done = asyncio.Event()
        self.expected_others = 0

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        if message.message_id == self.slow_id:
            self.slow_started.set()
            await self.release.wait()
        self.completed.append(message.message_id)
        if len(self.completed) == self.expected_others:
            self.others_done.set()
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, key=message.message_id)


async def send(client: ServiceBusClient, count: int) -> list[str]:
    ids = [f"w-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    async with client.get_queue_sender(QUEUE) as sender:
        await sender.send_messages([ServiceBusMessage("{}", message_id=i) for i in ids])
    return ids


async def remaining(client: ServiceBusClient) -> list[tuple[str | None, int | None]]:
    async with client.get_queue_receiver(QUEUE) as peeker:
        peeked = await peeker.peek_messages(max_message_count=50, sequence_number=1)
    return [(m.message_id, m.delivery_count) for m in peeked]


async def run_until_stopped(
    client: ServiceBusClient, handler: MessageHandler, options: WorkerOptions, stop: asyncio.Event
) -> None:
    async with client.get_queue_receiver(QUEUE) as receiver, AutoLockRenewer() as renewer:
        await Worker(through_the_door(handler), receiver, renewer, options).run(stop)


async def test_stop_lets_in_flight_messages_finish(emulator: RunningEmulator) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        ids = await send(client, 1)
        handler, stop = GatedHandler(), asyncio.Event()
        worker = asyncio.create_task(
            run_until_stopped(client, handler, WorkerOptions(concurrency=1), stop)
        )
        await asyncio.wait_for(handler.started.wait(), 10)

        stop.set()  # while the message is in flight
        handler.release.set()
        await asyncio.wait_for(worker, 20)

        assert handler.seen == ids
        assert await remaining(client) == []  # completed, not abandoned


async def test_messages_that_outlive_the_grace_period_are_abandoned(
    emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        [message_id] = await send(client, 1)
        handler, stop = GatedHandler(), asyncio.Event()
        options = WorkerOptions(concurrency=1, shutdown_grace_seconds=0.2)
        worker = asyncio.create_task(run_until_stopped(client, handler, options, stop))
        await asyncio.wait_for(handler.started.wait(), 10)

        stop.set()  # the handler never finishes
        await asyncio.wait_for(worker, 20)

        # Handed back at once (not after the 30 s lock), one delivery attempt spent.
        assert await remaining(client) == [(message_id, 1)]


async def test_a_hook_that_raises_gets_its_message_abandoned_at_once(
    emulator: RunningEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        [message_id] = await send(client, 1)
        hook, stop = FailingHook(), asyncio.Event()
        handle = through_the_door(CompletingHandler(), hook)
        async with client.get_queue_receiver(QUEUE) as receiver, AutoLockRenewer() as renewer:
            worker = Worker(handle, receiver, renewer, WorkerOptions(concurrency=1))
            running = asyncio.create_task(worker.run(stop))

            # Redelivered within seconds: abandoned, not left to its 30 s lock.
            await asyncio.wait_for(hook.retried.wait(), 10)
            stop.set()
            await asyncio.wait_for(running, 20)

        assert worker.stats.settled >= 2 and worker.stats.settlement_failures == 0
        # The line names where it was received and the message (its key: no consumer decided).
        assert any(
            record.getMessage()
            == f"handling failed; abandoning it: consumer={QUEUE} key={message_id}"
            for record in caplog.records
        )


@pytest.mark.slow
async def test_a_slow_message_never_holds_the_other_slots(emulator: RunningEmulator) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        [slow_id] = await send(client, 1)
        handler, stop = OneSlowHandler(slow_id), asyncio.Event()
        worker = asyncio.create_task(
            run_until_stopped(client, handler, WorkerOptions(concurrency=2), stop)
        )
        await asyncio.wait_for(handler.slow_started.wait(), 10)

        # Sent while the slow one holds a slot: many times the other slot's worth, received
        # and completed one after another without waiting for the slow one.
        handler.expected_others = 7
        others = await send(client, handler.expected_others)
        await asyncio.wait_for(handler.others_done.wait(), 20)
        assert set(handler.completed) == set(others)
        assert len(handler.completed) == len(others)
        assert not handler.release.is_set()

        handler.release.set()
        stop.set()
        await asyncio.wait_for(worker, 20)

        assert handler.completed[-1] == slow_id
        assert await remaining(client) == []
