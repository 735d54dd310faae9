"""The Functions consumers' delayed retries (issue 43) over our Service Bus emulator through
the real SDK: a failure the in-place backoff did not fix comes back later as a copy scheduled
on the consumer's own entity through the app's shared Service Bus client, and the trigger
completes the delivery it copied; after the configured retries it is dead-lettered
`RetriesExhausted`. The Functions host cannot run here: the trigger is called as the host
calls it, with the messages the broker delivered and a fake of the host's message actions.

A "10-minute" store brownout at seconds, by settings: ORDERS_DELAYED_RETRIES=2,
ORDERS_DELAYED_RETRY_SECONDS=0.2 and an in-place budget of 0.2 s. The order store is faked
(down or up); the broker is the emulator.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient
from fakes import LAYOUT, FakeMessageActions, FakeOrderStore, order_payload
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from poison_corpus import core_hostile_retry_properties

import function_app
from exactly_once import Backoff
from exactly_once.decisions import Decision
from exactly_once.delayed_retries import (
    ORIGINAL_MESSAGE_ID_PROPERTY,
    RETRY_PROPERTY,
    SUBSCRIPTION_PROPERTY,
    copy_message_id,
)
from exactly_once.exceptions import TransientStoreError
from exactly_once.retries import Retrier
from exactly_once.telemetry import Telemetry
from orders.adapters import process_clients
from orders.bootstrap import SubscriberRuntime
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints import functions
from orders.entrypoints.functions import (
    function_later_retries,
    function_subscriber_runtimes,
    use_function_consumer,
)
from orders.entrypoints.localstack import QueueOptions
from orders.service.consumer import OrderConsumer
from orders.service.registry import BILLING, ORDERS, SHIPPING
from orders.service.subscribers import Source
from servicebus_emulator import RunningEmulator, start_in_background

QUEUE = "orders"
TOPIC = QueueOptions().events_topic
RETRIES = 2
SPANS = InMemorySpanExporter()


class BrownoutStore(FakeOrderStore):
    """The order store, refusing every write (a 503) while `down`."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    async def create_all(self, partition: str, documents: Sequence[Any]) -> None:
        if self.down:
            self.create_calls += 1
            raise TransientStoreError("503 Service Unavailable")
        await super().create_all(partition, documents)


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    running = start_in_background(config=QueueOptions(name=QUEUE, lock_seconds=30).config())
    yield running
    running.stop()


@pytest.fixture
async def store(
    emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[BrownoutStore]:
    """The Functions host's app settings (the emulator's Service Bus, delayed retries shortened
    by settings), the order consumer over a store that is down, a backoff of 0.2 s."""
    for name, value in {
        "ServiceBusConnection": emulator.connection_string,
        "COSMOS_ENDPOINT": "http://127.0.0.1:9",  # never reached: the order store is faked
        "ORDERS_QUEUE": QUEUE,
        "ORDERS_DELAYED_RETRIES": str(RETRIES),
        "ORDERS_DELAYED_RETRY_SECONDS": "0.2",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(process_clients, "_shared_clients", None)
    backoff = Backoff(first_delay_seconds=0.02, max_delay_seconds=0.05, budget_seconds=0.2)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(SPANS))
    SPANS.clear()
    telemetry = Telemetry(tracer_provider=tracer_provider)
    monkeypatch.setattr(functions, "function_retrier", Retrier(backoff, telemetry=telemetry))
    fake = BrownoutStore()
    use_function_consumer(OrderConsumer(fake, LAYOUT))
    try:
        yield fake
    finally:
        use_function_consumer(None)
        await function_later_retries[ORDERS].close()
        await process_clients.shared_process_clients().close()


async def send_order(emulator: RunningEmulator, order_id: str) -> None:
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        await sender.send_messages(
            ServiceBusMessage(json.dumps(order_payload(order_id)), message_id=order_id)
        )


async def next_delivery(emulator: RunningEmulator) -> ServiceBusReceivedMessage:
    """The next message the broker delivers on the queue (taken off it: the fake actions
    settle nothing), within 15 s."""
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(
            QUEUE, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver,
    ):
        [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=15)
        return message


async def trigger(message: ServiceBusReceivedMessage) -> list[tuple[str, Any, dict[str, Any]]]:
    actions = FakeMessageActions()
    await function_app.consumer_triggers[ORDERS](received_message=message, message_actions=actions)
    return actions.calls


def retry_of(message: ServiceBusReceivedMessage) -> tuple[str | None, object, object]:
    properties = {
        (name.decode() if isinstance(name, bytes) else name): value
        for name, value in (message.application_properties or {}).items()
    }
    original = properties.get(ORIGINAL_MESSAGE_ID_PROPERTY)
    if isinstance(original, bytes):
        original = original.decode()
    return message.message_id, original, properties.get(RETRY_PROPERTY)


async def test_a_brownout_past_the_backoff_comes_back_as_copies_and_is_stored_once(
    emulator: RunningEmulator, store: BrownoutStore
) -> None:
    order_id = "o-brownout-1"
    await send_order(emulator, order_id)

    # The store is down through the first delivery and the first copy: each is completed once
    # its copy is scheduled, never abandoned (no delivery spent).
    first = await next_delivery(emulator)
    assert [name for name, _, _ in await trigger(first)] == ["complete"]
    copy_1 = await next_delivery(emulator)
    assert retry_of(copy_1) == (copy_message_id(order_id, 1), order_id, 1)
    assert [name for name, _, _ in await trigger(copy_1)] == ["complete"]
    copy_2 = await next_delivery(emulator)
    assert retry_of(copy_2) == (copy_message_id(order_id, 2), order_id, 2)

    # The brownout ends before the last copy: it is stored under the original's MessageId.
    store.down = False
    assert [name for name, _, _ in await trigger(copy_2)] == ["complete"]
    assert store.order_ids() == [order_id]
    # Each delivery's span says what was settled: two completed as delayed retries (not
    # processed: error.type names why), then the copy that stored it.
    assert [
        (
            (span.attributes or {}).get("exactly_once.settlement"),
            (span.attributes or {}).get("messaging.servicebus.disposition_status"),
            (span.attributes or {}).get("error.type"),
        )
        for span in SPANS.get_finished_spans()
    ] == [
        ("retry_later", "complete", "transient_failure"),
        ("retry_later", "complete", "transient_failure"),
        ("complete", "complete", None),
    ]


async def test_a_store_that_never_comes_back_is_dead_lettered_after_the_delayed_retries(
    emulator: RunningEmulator, store: BrownoutStore
) -> None:
    order_id = "o-brownout-2"
    await send_order(emulator, order_id)
    delivery = await next_delivery(emulator)
    for _ in range(RETRIES):
        assert [name for name, _, _ in await trigger(delivery)] == ["complete"]
        delivery = await next_delivery(emulator)

    [(name, _, reason)] = await trigger(delivery)

    assert name == "deadletter"
    assert reason["deadletter_reason"] == "RetriesExhausted"
    assert "transient_failure after 2 delayed retries" in reason["deadletter_error_description"]
    assert store.order_ids() == []


async def test_forged_retry_properties_are_dead_lettered_by_the_trigger_and_never_stored(
    emulator: RunningEmulator, store: BrownoutStore
) -> None:
    """The poison corpus's forged delayed-retry properties, through the Functions trigger as
    the worker takes them: `InvalidRetryProperties` on the first delivery, the order consumer
    never run."""
    store.down = False
    cases = core_hostile_retry_properties()
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        for number, (_, properties) in enumerate(cases):
            order_id = f"o-forged-{number}"
            await sender.send_messages(
                ServiceBusMessage(
                    json.dumps(order_payload(order_id)),
                    message_id=order_id,
                    application_properties=dict(properties),
                )
            )

    reasons = []
    for _ in cases:
        [(name, _, reason)] = await trigger(await next_delivery(emulator))
        reasons.append((name, reason.get("deadletter_reason")))

    assert reasons == [("deadletter", "InvalidRetryProperties")] * len(cases)
    assert store.order_ids() == [] and store.create_calls == 0


class Recording:
    """A consumer that records what it was given (none of it should reach it here)."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        self.seen.append(message.message_id)
        return Decision.complete()


async def test_a_copy_for_a_sibling_subscription_is_completed_by_the_trigger_unrun(
    emulator: RunningEmulator, store: BrownoutStore
) -> None:
    """A delayed retry's copy scheduled on the topic for shipping that reaches billing's
    trigger anyway (its subscription's filter is what keeps it out): completed as `not_ours`,
    billing's consumer never run."""
    billing = Recording()
    function_subscriber_runtimes[BILLING].use(
        SubscriberRuntime(Source(topic=TOPIC, subscription=BILLING), billing)
    )
    copy = ServiceBusMessage(
        b"{}",
        message_id=copy_message_id("e-1", 1),
        application_properties={
            ORIGINAL_MESSAGE_ID_PROPERTY: "e-1",
            RETRY_PROPERTY: 1,
            SUBSCRIPTION_PROPERTY: SHIPPING,
        },
    )
    try:
        async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
            async with client.get_topic_sender(TOPIC) as sender:
                await sender.send_messages(copy)
            async with client.get_subscription_receiver(
                TOPIC, SHIPPING, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
            ) as receiver:
                [delivered] = await receiver.receive_messages(max_message_count=1, max_wait_time=15)
        actions = FakeMessageActions()
        await function_app.consumer_triggers[BILLING](
            received_message=delivered, message_actions=actions
        )
    finally:
        function_subscriber_runtimes[BILLING].use(None)
        await function_later_retries[BILLING].close()

    assert [name for name, _, _ in actions.calls] == ["complete"]
    assert billing.seen == []
