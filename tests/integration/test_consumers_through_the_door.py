"""Issue 45, item 4: every consumer of the orders app walks through the core's door, the one the
guide gives a user. A spy on `ExactlyOnceConsumer` records which consumer's door decided each
message and through which entry: `with_message_actions` for the Functions triggers (called as the
host calls them, with the SDK's own message type), `decide_message` for `orders worker`'s loop
(the core's `run_worker` / `run_session_worker`, on our Service Bus emulator through the real SDK;
the status queue with sessions, as STATUS_SESSIONS runs it). Each consumer's core is a recorder
here: what is checked is the path, not the consumers' effects (their own tests hold those)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from fakes import FakeMessageActions
from sdk_messages import received_message

import function_app
from exactly_once import ExactlyOnceConsumer, WorkerOptions
from exactly_once.decisions import Decision, Outcome, Settlement
from orders.adapters.servicebus_worker import run_session_worker_on, run_worker_on
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints.functions import function_subscriber_runtimes
from orders.entrypoints.localstack import DEFAULTS, QueueOptions
from orders.service.registry import CONSUMERS, ConsumerSpec
from orders.service.runtimes import SubscriberRuntime
from orders.service.subscribers import Source
from servicebus_emulator import RunningEmulator, start_in_background

Entry = tuple[str, str]  # (the door's consumer, the door's entry)


class RecordingCore:
    """A consumer's core that completes every message and remembers its MessageId; `decided`
    is set once it saw `expected` (a subscription also gets the other one's messages)."""

    def __init__(self, expected: str | None = None) -> None:
        self.expected = expected
        self.seen: list[str | None] = []
        self.decided = asyncio.Event()

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        self.seen.append(message.message_id)
        if message.message_id == self.expected:
            self.decided.set()
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, key=message.message_id)


@pytest.fixture
def door_entries(monkeypatch: pytest.MonkeyPatch) -> list[Entry]:
    """Each call of the door's two host entries, by the consumer whose door it is."""
    entries: list[Entry] = []
    with_message_actions = ExactlyOnceConsumer.with_message_actions
    decide_message = ExactlyOnceConsumer.decide_message

    async def spied_actions(self: ExactlyOnceConsumer[Any], *args: Any, **kwargs: Any) -> Decision:
        entries.append((self.consumer, "with_message_actions"))
        return await with_message_actions(self, *args, **kwargs)

    async def spied_decide(self: ExactlyOnceConsumer[Any], *args: Any, **kwargs: Any) -> Decision:
        entries.append((self.consumer, "decide_message"))
        return await decide_message(self, *args, **kwargs)

    monkeypatch.setattr(ExactlyOnceConsumer, "with_message_actions", spied_actions)
    monkeypatch.setattr(ExactlyOnceConsumer, "decide_message", spied_decide)
    return entries


@pytest.mark.parametrize("spec", CONSUMERS, ids=[spec.name for spec in CONSUMERS])
async def test_each_functions_trigger_decides_through_the_consumers_door(
    spec: ConsumerSpec, door_entries: list[Entry]
) -> None:
    core = RecordingCore()
    lazy = function_subscriber_runtimes[spec.name]
    lazy.use(SubscriberRuntime(Source(queue="unused"), core))
    message_id = f"{spec.name}-{uuid.uuid4().hex[:8]}"
    actions = FakeMessageActions()
    try:
        trigger = function_app.consumer_triggers[spec.name]
        await trigger(
            received_message=received_message(message_id, data=b"{}"), message_actions=actions
        )
    finally:
        lazy.use(None)

    assert (spec.name, "with_message_actions") in door_entries
    assert core.seen == [message_id]
    assert [name for name, _, _ in actions.calls] == ["complete"]


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    running = start_in_background(config=QueueOptions(status_sessions=True).config())
    yield running
    running.stop()


def worker_source(spec: ConsumerSpec) -> Source:
    return spec.source(DEFAULTS)


async def test_each_worker_decides_through_the_consumers_door(
    emulator: RunningEmulator, door_entries: list[Entry]
) -> None:
    options = WorkerOptions(concurrency=1, receive_wait_seconds=0.2, shutdown_grace_seconds=5)
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        for spec in CONSUMERS:
            message_id = f"{spec.name}-{uuid.uuid4().hex[:8]}"
            source, core, stop = worker_source(spec), RecordingCore(message_id), asyncio.Event()
            entity = source.queue or source.topic
            assert entity is not None
            async with (
                client.get_queue_sender(entity)
                if source.queue
                else client.get_topic_sender(entity) as sender
            ):
                await sender.send_messages(
                    ServiceBusMessage(b"{}", message_id=message_id, session_id=message_id)
                )
            run = run_session_worker_on if spec.sessions else run_worker_on
            worker = asyncio.create_task(
                run(client, source, core, options, stop, consumer=spec.name)
            )
            try:
                await asyncio.wait_for(core.decided.wait(), 20)
            finally:
                stop.set()
                await asyncio.wait_for(worker, 30)

            assert (spec.name, "decide_message") in door_entries, door_entries
            assert message_id in core.seen
