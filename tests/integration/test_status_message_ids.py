"""A status update's MessageId on the real broker (our Service Bus emulator, through the SDK): a
forgery sent first under the id another sender can guess (`<orderId>:status:<version>`) does
not shadow the real update (issue 46), as events got their nonce in issue 37. The status
consumer runs over a fake store: what is under test is what the broker delivers, and that the
real update, once delivered, is the one applied."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient
from fakes import LAYOUT, FakeDocumentStore

from exactly_once.decisions import Outcome, Settlement
from orders.adapters.servicebus import to_received_order_message
from orders.adapters.servicebus_publisher import ServiceBusStatusPublisher
from orders.domain.status import OrderStatus, OrderStatusChanged
from orders.entrypoints.localstack import QueueOptions
from orders.service.status import StatusConsumer

STATUS_QUEUE = QueueOptions().status_queue


async def received_on_status_queue(client: ServiceBusClient) -> list[ServiceBusReceivedMessage]:
    """Everything the status queue holds now: the sends were acknowledged before this."""
    async with client.get_queue_receiver(STATUS_QUEUE) as receiver:
        found: list[ServiceBusReceivedMessage] = []
        while batch := await receiver.receive_messages(max_message_count=50, max_wait_time=2):
            for message in batch:
                await receiver.complete_message(message)
            found.extend(batch)
        return found


def paid(order_id: str) -> OrderStatusChanged:
    return OrderStatusChanged.of(order_id, OrderStatus.PAID, changed_at=datetime.now(UTC))


async def test_a_forged_status_update_sent_first_under_the_guessable_id_does_not_shadow_it(
    wide_window_client: ServiceBusClient,
) -> None:
    client = wide_window_client
    order_id = f"forged-{uuid.uuid4().hex[:10]}"
    real = paid(order_id)
    guessable = f"{order_id}:status:2"  # what the MessageId used to be
    # Given a hostile sender's message under the id it can guess, one the consumer refuses
    # (its body names another version, so the MessageId does not name the update)
    forged_body = {**json.loads(real.body()), "version": 4, "status": "delivered"}
    async with client.get_queue_sender(STATUS_QUEUE) as hostile:
        await hostile.send_messages(
            ServiceBusMessage(json.dumps(forged_body), message_id=guessable)
        )

    # When billing publishes the real update inside the duplicate-detection window
    status = ServiceBusStatusPublisher(client, STATUS_QUEUE, sessions=False)
    await status.publish_status(real)
    await status.close()

    # Then the broker delivers both, and the status consumer applies the real one
    delivered = await received_on_status_queue(client)
    ids = [str(m.message_id) for m in delivered]
    assert len(ids) == 2 and ids[0] == guessable and ids[1].startswith(f"{guessable}:"), ids
    store = FakeDocumentStore()
    consumer = StatusConsumer(store, LAYOUT)
    decisions = [await consumer.handle(to_received_order_message(m)) for m in delivered]
    assert [(d.dead_letter_reason, d.settlement) for d in decisions] == [
        ("MessageIdMismatch", Settlement.DEAD_LETTER),
        (None, Settlement.COMPLETE),
    ]
    found = await store.get(LAYOUT.status_document_id(order_id), order_id)
    assert found is not None and LAYOUT.stored_status(found.body).status is OrderStatus.PAID


async def test_a_re_sent_update_reaches_the_consumer_as_a_stale_duplicate(
    wide_window_client: ServiceBusClient,
) -> None:
    client = wide_window_client
    """A re-send is another message to the broker now (its nonce is fresh); the version makes
    it a duplicate where it matters, at the consumer: completed, nothing written."""
    order_id = f"resent-{uuid.uuid4().hex[:10]}"
    status = ServiceBusStatusPublisher(client, STATUS_QUEUE, sessions=False)
    await status.publish_status(paid(order_id))
    await status.publish_status(paid(order_id))  # billing's redelivered event announces again
    await status.close()

    delivered = await received_on_status_queue(client)
    store = FakeDocumentStore()
    consumer = StatusConsumer(store, LAYOUT)
    decisions = [await consumer.handle(to_received_order_message(m)) for m in delivered]

    assert len({m.message_id for m in delivered}) == 2
    assert [(d.outcome, d.settlement) for d in decisions] == [
        (Outcome.PROCESSED, Settlement.COMPLETE),
        (Outcome.STALE, Settlement.COMPLETE),
    ]
