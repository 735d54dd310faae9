"""Issue 45, item 4: every consumer of the orders app walks through the core's door, the one the
guide gives a user. A spy on `ExactlyOnceConsumer` records which consumer's door decided each
message and through which entry: `with_message_actions` for the Functions triggers (called as the
host calls them, with the SDK's own message type), `decide_message` for `orders worker`'s loop
(the core's `run_worker` / `run_session_worker`, on our Service Bus emulator through the real SDK;
the status queue with sessions, as STATUS_SESSIONS runs it; the stores on our Cosmos emulator).
In Functions each consumer's core is a recorder: what is checked there is the path, not the
consumers' effects (their own tests hold those).

A consumer a user adds as docs/new-consumer.md shows (written with `@exactly_once`, its registry
entry building it) is a door of its own: in both hosts exactly one door, its own, decides each
delivery, none put around it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from fakes import FakeMessageActions
from new_consumer_doc import accepted_event, documented_notifications
from sdk_messages import received_message
from servers import CosmosServer

import function_app
from exactly_once import ExactlyOnceConsumer
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.delayed_retries import CopyScheduler, DelayedRetries
from exactly_once.worker import WorkerOptions
from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.bootstrap import build_subscriber_runtime
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints.functions import (
    LaterRetries,
    function_later_retries,
    function_subscriber_runtimes,
    process_event_message,
)
from orders.entrypoints.lazy_runtime import Lazy
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


class DoorSpy:
    """Every entry into any `ExactlyOnceConsumer`: the host entries (`with_message_actions`,
    `decide_message`) and the bare `decide` a door nested in another would be called by."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.doors: list[tuple[ExactlyOnceConsumer[Any], str, dict[str, Any]]] = []

    def entered(self, door: ExactlyOnceConsumer[Any], entry: str, kwargs: dict[str, Any]) -> None:
        self.entries.append((door.consumer, entry))
        self.doors.append((door, entry, kwargs))

    def deciding(self) -> list[ExactlyOnceConsumer[Any]]:
        """The doors that decided (each decision is one `decide_message` or `decide`)."""
        return [door for door, entry, _ in self.doors if entry in ("decide_message", "decide")]


@pytest.fixture
def door_spy(monkeypatch: pytest.MonkeyPatch) -> DoorSpy:
    spy = DoorSpy()
    for entry in ("with_message_actions", "decide_message", "decide"):
        original = getattr(ExactlyOnceConsumer, entry)

        def spied(original: Any = original, entry: str = entry) -> Any:
            async def call(self: ExactlyOnceConsumer[Any], *args: Any, **kwargs: Any) -> Decision:
                spy.entered(self, entry, kwargs)
                return cast(Decision, await original(self, *args, **kwargs))

            return call

        monkeypatch.setattr(ExactlyOnceConsumer, entry, spied())
    return spy


@pytest.fixture
def door_entries(door_spy: DoorSpy) -> list[Entry]:
    """Each call of the door's host entries, by the consumer whose door it is."""
    return door_spy.entries


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
    settings = await emulators_settings(emulator, python_cosmos)
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        for spec in CONSUMERS:
            message_id = f"{spec.name}-{uuid.uuid4().hex[:8]}"
            await send_to(client, spec.source(settings), message_id)
            journal = await worker_until_a_decision(settings, spec)

            assert (spec.name, "decide_message") in door_entries, door_entries
            # (A subscription also gets the other one's message: rejected alike.)
            assert {d.dead_letter_reason for d in journal.decided} == {"InvalidJson"}


async def emulators_settings(emulator: RunningEmulator, python_cosmos: CosmosServer) -> Settings:
    """The app's settings on our two emulators, in a database of their own (prepared)."""
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
    return settings


# The worked example's registry entry, as docs/new-consumer.md writes it, except that it competes
# on the orders queue: the test's emulator has no subscription of that name.
ADDED = ConsumerSpec(
    "notifications",
    lambda wiring: documented_notifications(wiring.inbox_store(), wiring.settings.record_retention),
    function_name="notify_customer",
    description="Notifications: one record per accepted order, in the inbox.",
    queue_setting="ORDERS_QUEUE",
)


def added_in_functions(
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    client: ServiceBusClient,
    *,
    failed_builds: int = 0,
) -> tuple[Lazy[SubscriberRuntime], LaterRetries]:
    """The added entry's runtime and delayed retries as the Functions app holds them (built on
    first use, as the host builds them), its first `failed_builds` builds failing."""
    entity = str(ADDED.source(settings))
    later = LaterRetries(CopyScheduler(client, entity), DelayedRetries(), entity)
    failures = [ConnectionError("the store is not there yet")] * failed_builds

    async def later_retries() -> LaterRetries:
        return later

    async def runtime() -> SubscriberRuntime:
        if failures:
            raise failures.pop()
        return await build_subscriber_runtime(settings, ADDED)

    runtimes: Lazy[SubscriberRuntime] = Lazy(runtime, "notifications consumer")
    monkeypatch.setitem(function_subscriber_runtimes, ADDED.name, runtimes)
    monkeypatch.setitem(function_later_retries, ADDED.name, Lazy(later_retries, "retries"))
    return runtimes, later


async def test_a_consumer_added_as_the_guide_says_is_decided_by_its_own_door_in_functions(
    emulator: RunningEmulator,
    python_cosmos: CosmosServer,
    door_spy: DoorSpy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trigger body of a registered consumer (`process_event_message`), its runtime built
    as the Functions host builds it: the user's `ExactlyOnceConsumer` is the one door entered,
    through `with_message_actions` with the consumer's own scheduler and entity, and it decides
    the delivery once."""
    settings = await emulators_settings(emulator, python_cosmos)
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        runtimes, later = added_in_functions(monkeypatch, settings, client)
        event = accepted_event(f"o-{uuid.uuid4().hex[:8]}")
        actions = FakeMessageActions()
        try:
            decision = await process_event_message(
                ADDED.name, received_message(event.event_id, data=event.body()), actions
            )
        finally:
            await runtimes.close()

    entered = list({id(door): door for door, _, _ in door_spy.doors}.values())
    assert len(entered) == 1, f"doors entered: {door_spy.entries}"
    assert entered[0].consumer == "notifications"
    assert [entry for _, entry, _ in door_spy.doors] == ["with_message_actions", "decide_message"]
    assert door_spy.doors[0][2] == {"destination": later.source, "scheduler": later.scheduler}
    assert (decision.outcome, decision.settlement) == (Outcome.PROCESSED, Settlement.COMPLETE)
    assert [name for name, _, _ in actions.calls] == ["complete"]


async def test_an_added_consumer_built_during_a_backoff_is_handed_to_its_own_door(
    emulator: RunningEmulator,
    python_cosmos: CosmosServer,
    door_spy: DoorSpy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Until the added consumer can be built there is no door of its own: the app's door backs
    the build off as for any consumer; built meanwhile, the delivery is given back (`not_ours`,
    not retried in place, nothing decided), and the redelivery is its own door's alone."""
    settings = await emulators_settings(emulator, python_cosmos)
    event = accepted_event(f"o-{uuid.uuid4().hex[:8]}")
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        runtimes, _ = added_in_functions(monkeypatch, settings, client, failed_builds=2)
        first, again = FakeMessageActions(), FakeMessageActions()
        try:
            handed_back = await process_event_message(
                ADDED.name, received_message(event.event_id, data=event.body()), first
            )
            door_spy.doors.clear()
            decided = await process_event_message(
                ADDED.name,
                received_message(event.event_id, data=event.body(), delivery_count=1),
                again,
            )
            built = runtimes.built
        finally:
            await runtimes.close()

    assert (handed_back.outcome, handed_back.settlement) == (Outcome.NOT_OURS, Settlement.ABANDON)
    assert [name for name, _, _ in first.calls] == ["abandon"]
    assert len({id(door) for door, _, _ in door_spy.doors}) == 1, door_spy.entries
    assert built is not None and door_spy.doors[0][0] is built.handler  # the user's own
    assert (decided.outcome, decided.settlement) == (Outcome.PROCESSED, Settlement.COMPLETE)
    assert [name for name, _, _ in again.calls] == ["complete"]


async def test_a_consumer_added_as_the_guide_says_is_decided_by_its_own_door_in_the_worker(
    emulator: RunningEmulator, python_cosmos: CosmosServer, door_spy: DoorSpy
) -> None:
    """`orders worker`'s entry (`run_subscriber`) for the added entry, on our emulators: one
    door, the user's own, decides each delivery (once), and its decision is the worker's."""
    settings = await emulators_settings(emulator, python_cosmos)
    event = accepted_event(f"o-{uuid.uuid4().hex[:8]}")
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        await send_to(client, ADDED.source(settings), event.event_id, event.body())
    journal = await worker_until_a_decision(settings, ADDED)

    (decided,) = journal.decided
    assert (decided.outcome, decided.settlement) == (Outcome.PROCESSED, Settlement.COMPLETE)
    assert len(door_spy.deciding()) == 1, f"doors entered: {door_spy.entries}"
    assert [entry for _, entry, _ in door_spy.doors] == ["decide_message"]


async def worker_until_a_decision(settings: Settings, spec: ConsumerSpec) -> Journal:
    """`orders worker`'s entry for `spec` (`run_subscriber`), stopped after its first decision."""
    options = WorkerOptions(concurrency=1, receive_wait_seconds=0.2, shutdown_grace_seconds=5)
    journal = Journal()
    stop = asyncio.Event()
    worker = asyncio.create_task(
        run_subscriber(settings, spec, options, stop, after_decision=journal.record)
    )
    try:
        await asyncio.wait_for(journal.seen.wait(), 30)
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
    return journal


class Journal:
    """The worker's decisions, as `orders worker --decisions` sees them."""

    def __init__(self) -> None:
        self.decided: list[Decision] = []
        self.seen = asyncio.Event()

    def record(self, decision: Decision) -> None:
        self.decided.append(decision)
        self.seen.set()


async def send_to(
    client: ServiceBusClient, source: Source, message_id: str, body: bytes = b"<xml/>"
) -> None:
    """`body` (by default one that is no JSON), to a queue (in a session of its own) or to the
    topic."""
    message = ServiceBusMessage(body, message_id=message_id, session_id=message_id)
    if source.queue is not None:
        async with client.get_queue_sender(source.queue) as sender:
            await sender.send_messages(message)
    else:
        assert source.topic is not None
        async with client.get_topic_sender(source.topic) as sender:
            await sender.send_messages(message)
