"""What "can never be published" means, decided by what fails: an event the broker refuses
for good (larger than the topic takes: the real SDK refuses it against the size our emulator
advertises) is parked after the bounded attempts, while the documents beside it are published;
a transient failure is never parked, the batch is read again. The stores are fakes."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from azure.servicebus.aio import ServiceBusClient
from fakes import LAYOUT, FakeLeaseStore, NoChangesFeed, new_write

from orders.adapters.servicebus_publisher import ServiceBusEventPublisher
from orders.domain.events import OrderAccepted, OrderEvent
from orders.entrypoints.localstack import QueueOptions
from orders.exceptions import TransientPublishError
from orders.service.dispatcher import OutboxDispatcher, ParkReason
from orders.service.ports import PendingEvent

TOPIC = QueueOptions().events_topic  # the wide_window_client fixture's


class ParkingFeed(NoChangesFeed):
    """The outbox's writes, recorded: marks and parks (`dispatch` is handed the documents)."""

    def __init__(self) -> None:
        self.marked: list[str] = []
        self.parked: dict[str, dict[str, Any]] = {}

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        self.marked.append(document["id"])

    async def park(self, document: dict[str, Any], parked: Mapping[str, Any]) -> None:
        self.parked[document["id"]] = dict(parked)


class OversizedLayout:
    """The app's layout, but the event of `poison_id` is bigger than any message the topic
    takes (built around the model's own bounds: the app's events cannot be that big today)."""

    def __init__(self, poison_id: str) -> None:
        self._poison_id = poison_id

    def pending_event(self, document: Mapping[str, Any]) -> PendingEvent | None:
        pending = LAYOUT.pending_event(document)
        if pending is None or document["id"] != self._poison_id:
            return pending
        event: OrderEvent = OrderAccepted.model_construct(
            **{**dict(pending.event), "customer_id": "c" * 300_000}
        )
        return PendingEvent(event, pending.message_id, pending.trace_context)

    def outbox_document(
        self, event: OrderEvent, trace_context: dict[str, str] | None = None
    ) -> dict[str, Any]:
        return LAYOUT.outbox_document(event, trace_context)


def outbox_entry(order_id: str) -> dict[str, Any]:
    [entry] = [d for d in new_write(order_id) if d["type"] == "outbox"]
    return entry


async def subscription_message_ids(client: ServiceBusClient) -> list[str]:
    async with client.get_subscription_receiver(TOPIC, "shipping") as receiver:
        peeked = await receiver.peek_messages(max_message_count=50, sequence_number=1)
        return [str(message.message_id) for message in peeked]


async def test_an_event_the_broker_refuses_for_good_is_parked_and_the_rest_published(
    wide_window_client: ServiceBusClient,
) -> None:
    run = uuid.uuid4().hex[:8]
    poison, first, last = (outbox_entry(f"{run}-{name}") for name in ("big", "a", "b"))
    feed = ParkingFeed()
    events = ServiceBusEventPublisher(wide_window_client, TOPIC)
    dispatcher = OutboxDispatcher(
        feed,
        events,
        FakeLeaseStore(),
        OversizedLayout(poison["id"]),
        parking=feed,
        refused_retry_seconds=0.01,
    )

    published = await dispatcher.dispatch([first, poison, last])
    await events.close()

    assert published == 2
    assert feed.marked == [first["id"], last["id"]]
    parked = feed.parked[poison["id"]]
    assert (parked["reason"], parked["attempts"]) == (ParkReason.REFUSED, 3)
    assert "refused the message" in parked["description"]
    assert dispatcher.stats.parked == 1
    assert await subscription_message_ids(wide_window_client) == [
        first["messageId"],
        last["messageId"],
    ]


class Unavailable:
    """A topic that is unreachable: every publish is a transient failure."""

    def __init__(self) -> None:
        self.attempts = 0

    async def publish_event(
        self, event: OrderEvent, trace_context: dict[str, str], *, message_id: str
    ) -> None:
        self.attempts += 1
        raise TransientPublishError("Service Bus send failed: ServiceBusConnectionError()")


async def test_a_transient_failure_is_never_parked_the_batch_is_read_again() -> None:
    feed, events = ParkingFeed(), Unavailable()
    dispatcher = OutboxDispatcher(feed, events, FakeLeaseStore(), LAYOUT, parking=feed)

    for _ in range(5):
        with pytest.raises(TransientPublishError):
            await dispatcher.dispatch([outbox_entry(f"down-{uuid.uuid4().hex[:6]}")])

    assert events.attempts == 5  # one attempt per dispatch: the trigger's retry policy waits
    assert feed.parked == {} and feed.marked == []


async def test_without_parking_a_poison_raises_as_it_always_did() -> None:
    entry = outbox_entry(f"old-{uuid.uuid4().hex[:6]}")
    entry["event"]["eventType"] = "OrderTeleported"
    dispatcher = OutboxDispatcher(ParkingFeed(), Unavailable(), FakeLeaseStore(), LAYOUT)

    with pytest.raises(ValueError, match="OrderTeleported"):
        await dispatcher.dispatch([entry])
