"""An event's MessageId on the real broker (our Service Bus emulator, through the SDK): the
dispatcher's retries of one outbox entry are one message to the topic's duplicate detection,
and a forgery sent first under the id another sender could guess does not shadow the event
(issue 37). The stores are fakes: what is under test is what the broker is sent."""

from __future__ import annotations

import json
import uuid
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient
from fakes import LAYOUT, FakeLeaseStore, NoChangesFeed, new_write

from orders.adapters.servicebus_publisher import ServiceBusEventPublisher
from orders.entrypoints.localstack import QueueOptions
from orders.service.dispatcher import OutboxDispatcher

TOPIC = QueueOptions().events_topic  # the wide_window_client fixture's


class UnmarkedFeed(NoChangesFeed):
    """A feed whose mark never lands: as after a crash between publish and mark, the next
    dispatch is handed the same outbox entry again."""

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        return None


def outbox_entry(order_id: str) -> dict[str, Any]:
    [entry] = [d for d in new_write(order_id) if d["type"] == "outbox"]
    return entry


async def received_on(
    client: ServiceBusClient, subscription: str
) -> list[ServiceBusReceivedMessage]:
    """Everything the subscription holds now: the sends were acknowledged before this."""
    async with client.get_subscription_receiver(TOPIC, subscription) as receiver:
        found: list[ServiceBusReceivedMessage] = []
        while batch := await receiver.receive_messages(max_message_count=50, max_wait_time=2):
            for message in batch:
                await receiver.complete_message(message)
            found.extend(batch)
        return found


async def test_a_retried_dispatch_of_one_outbox_entry_reaches_the_subscription_once(
    wide_window_client: ServiceBusClient,
) -> None:
    entry = outbox_entry(f"retry-{uuid.uuid4().hex[:10]}")
    events = ServiceBusEventPublisher(wide_window_client, TOPIC)
    dispatcher = OutboxDispatcher(UnmarkedFeed(), events, FakeLeaseStore(), LAYOUT)

    for _ in range(3):  # the first publish and two retries of the same entry
        assert await dispatcher.dispatch([entry]) == 1
    await events.close()

    delivered = await received_on(wide_window_client, "shipping")
    assert [m.message_id for m in delivered] == [entry["messageId"]]
    assert json.loads(b"".join(delivered[0].body))["eventId"] == entry["id"]


async def test_a_forgery_sent_first_under_the_guessable_id_does_not_shadow_the_event(
    wide_window_client: ServiceBusClient,
) -> None:
    order_id = f"forged-{uuid.uuid4().hex[:10]}"
    entry = outbox_entry(order_id)
    guessable = f"{order_id}:outbox:OrderAccepted"  # what the MessageId used to be
    forged_body = {**entry["event"], "totalAmount": "0"}
    async with wide_window_client.get_topic_sender(TOPIC) as hostile:
        await hostile.send_messages(
            ServiceBusMessage(json.dumps(forged_body), message_id=guessable)
        )
    events = ServiceBusEventPublisher(wide_window_client, TOPIC)
    dispatcher = OutboxDispatcher(UnmarkedFeed(), events, FakeLeaseStore(), LAYOUT)

    assert await dispatcher.dispatch([entry]) == 1
    await events.close()

    delivered = await received_on(wide_window_client, "billing")
    assert [m.message_id for m in delivered] == [guessable, entry["messageId"]]
    real = json.loads(b"".join(delivered[1].body))
    assert real == entry["event"]
