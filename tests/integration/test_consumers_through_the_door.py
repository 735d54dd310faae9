"""Issue 45, item 4: every consumer of the orders app walks through the core's door, the one the
guide gives a user. A spy on `ExactlyOnceConsumer` records which consumer's door decided each
message and through which entry: `with_message_actions` for the Functions triggers (called as the
host calls them, with the SDK's own message type), `decide_message` for `orders worker`'s loop
(the core's `run_worker` / `run_session_worker`, on our Service Bus emulator through the real SDK;
the status queue with sessions, as STATUS_SESSIONS runs it; the stores on our Cosmos emulator).
In Functions each consumer's core is a recorder: what is checked there is the path, not the
consumers' effects (their own tests hold those)."""

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
from servers import CosmosServer

import function_app
from exactly_once import ExactlyOnceConsumer
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.worker import WorkerOptions
from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints.functions import function_subscriber_runtimes
from orders.entrypoints.localstack import QueueOptions
from orders.entrypoints.worker import run_subscriber
from orders.service.registry import CONSUMERS, ConsumerSpec
from orders.service.runtimes import SubscriberRuntime
from orders.service.subscribers import Source
from orders.settings import Settings
from servicebus_emulator import RunningEmulator, start_in_background

Entry = tuple[str, str]  # (the door's consumer, the door's entry)


class RecordingCore:
    """A consumer's core that completes every message and remembers its MessageId."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        self.seen.append(message.message_id)
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


async def test_each_worker_decides_through_the_consumers_door(
    emulator: RunningEmulator, python_cosmos: CosmosServer, door_entries: list[Entry]
) -> None:
    """`orders worker`'s own entry (`run_subscriber`) for each consumer, over our emulators: a
    body that is no JSON is dead-lettered `InvalidJson` on its first delivery, as before, and
    it was the consumer's door that decided it."""
    settings = Settings.from_env(
        {
            "COSMOS_ENDPOINT": python_cosmos.endpoint,
            "COSMOS_KEY": python_cosmos.key,
            "COSMOS_DATABASE": f"door-{uuid.uuid4().hex[:8]}",
            "ServiceBusConnection": emulator.connection_string,
            "STATUS_SESSIONS": "true",
            "PAYMENTS_URL": "http://127.0.0.1:9",  # never called: nothing gets to a charge
        }
    )
    await prepare_local_cosmos(settings)
    options = WorkerOptions(concurrency=1, receive_wait_seconds=0.2, shutdown_grace_seconds=5)
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        for spec in CONSUMERS:
            message_id = f"{spec.name}-{uuid.uuid4().hex[:8]}"
            journal = Journal()
            source = spec.source(settings)
            await send_to(client, source, message_id)
            stop = asyncio.Event()
            worker = asyncio.create_task(
                run_subscriber(settings, spec, options, stop, after_decision=journal.record)
            )
            try:
                await asyncio.wait_for(journal.seen.wait(), 30)
            finally:
                stop.set()
                await asyncio.wait_for(worker, 30)

            assert (spec.name, "decide_message") in door_entries, door_entries
            # (A subscription also gets the other one's message: rejected alike.)
            assert {d.dead_letter_reason for d in journal.decided} == {"InvalidJson"}


class Journal:
    """The worker's decisions, as `orders worker --decisions` sees them."""

    def __init__(self) -> None:
        self.decided: list[Decision] = []
        self.seen = asyncio.Event()

    def record(self, decision: Decision) -> None:
        self.decided.append(decision)
        self.seen.set()


async def send_to(client: ServiceBusClient, source: Source, message_id: str) -> None:
    """A body that is no JSON, to a queue (in a session of its own) or to the topic."""
    message = ServiceBusMessage(b"<xml/>", message_id=message_id, session_id=message_id)
    if source.queue is not None:
        async with client.get_queue_sender(source.queue) as sender:
            await sender.send_messages(message)
    else:
        assert source.topic is not None
        async with client.get_topic_sender(source.topic) as sender:
            await sender.send_messages(message)
