"""A holder of a send right on the events topic tries to shadow an order's events (issue 37):
it publishes a forged `OrderAccepted` or `OrderCancelled` under the MessageId it can guess
(`<orderId>:outbox:<EventType>`) before the real event exists. The forgery is dead-lettered, and
the real event, published later inside the duplicate-detection window, must still be delivered
and acted on: the order charged and shipped, the cancelled charge refunded.

Real processes: both emulators, the payment stand-in, `orders worker`, `orders dispatcher` and
the subscribers; the hostile sender is the azure-servicebus SDK with the stack's connection."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from e2e_support import wait_for_decision
from poison_corpus import valid_cancel_event_document, valid_event_document, valid_order_document

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.domain.load_plan import CancelPoint, PlannedCancel
from orders.domain.ownership import OWNER_PROPERTY, app_scope
from orders.entrypoints.localstack import LocalStack, QueueOptions, local_stack
from orders.entrypoints.runs import send_cancels
from orders.service.cancels import CancelAnswer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# A window far longer than the test, so the real event is published inside it whatever the
# load: the case the forgery needs. Short locks so a redelivery plays out in seconds.
WIDE_WINDOW = QueueOptions(duplicate_window_seconds=240, lock_seconds=3, max_delivery_count=10)
# How long the real event's effect may take to show; on the old MessageIds it never does.
WITHIN = 90.0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    with local_stack(WIDE_WINDOW, tmp_path) as running:
        asyncio.run(prepare_local_cosmos(running.settings()))
        yield running
    assert not [p.name for p in running.processes if p.running], "processes left running"


def publish_forgery(stack: LocalStack, body: dict[str, Any], guessed_message_id: str) -> None:
    with (
        ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client,
        client.get_topic_sender(stack.queue.events_topic) as sender,
    ):
        sender.send_messages(ServiceBusMessage(json.dumps(body), message_id=guessed_message_id))


def send_order(stack: LocalStack, order: dict[str, Any]) -> None:
    """The order as a producer sends it, owned by the stack's API callers' scope (the scope
    `send_cancels` cancels in): an order with no owner is one no API caller may cancel."""
    owner: dict[str | bytes, Any] = {OWNER_PROPERTY: app_scope(stack.settings().idempotency_scope)}
    with (
        ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client,
        client.get_queue_sender(stack.queue.name) as sender,
    ):
        sender.send_messages(
            ServiceBusMessage(
                json.dumps(order), message_id=order["orderId"], application_properties=owner
            )
        )


def stand_in(stack: LocalStack, what: str, order_id: str) -> list[dict[str, Any]]:
    """The stand-in's payments or refunds of one order."""
    answer = httpx.get(f"{stack.payments_url}/{what}", params={"orderId": order_id}, timeout=10)
    answer.raise_for_status()
    return list(answer.json()[what])


def test_a_forged_order_accepted_sent_first_does_not_keep_the_order_from_being_charged_and_shipped(
    stack: LocalStack,
) -> None:
    order_id = f"fa{uuid.uuid4().hex[:8]}"
    forged = {**valid_event_document(order_id), "totalAmount": "0.01"}
    stack.start_payments()
    billing = stack.start_subscriber("billing")
    shipping = stack.start_subscriber("shipping")

    # Before the order exists: refused by both subscribers, as it should be.
    publish_forgery(stack, forged, f"{order_id}:outbox:OrderAccepted")
    for subscriber in (billing, shipping):
        wait_for_decision(subscriber, WITHIN, order_id=order_id, dead_letter_reason="UnknownOrder")
    # Then the real order, and the real OrderAccepted its outbox entry publishes.
    stack.start_worker()
    stack.start_dispatcher()
    send_order(stack, valid_order_document(order_id))

    wait_for_decision(billing, WITHIN, order_id=order_id, outcome="processed")
    wait_for_decision(shipping, WITHIN, order_id=order_id, outcome="processed")
    [payment] = stand_in(stack, "payments", order_id)
    assert payment["amount"] == "2.5"  # the stored order's total, not the forgery's


def test_a_forged_order_cancelled_sent_first_does_not_keep_the_cancel_from_being_refunded(
    stack: LocalStack,
) -> None:
    order_id = f"fc{uuid.uuid4().hex[:8]}"
    stack.start_payments()
    stack.start_worker()
    stack.start_dispatcher()
    billing = stack.start_subscriber("billing")  # no shipping: the order stays cancellable
    send_order(stack, valid_order_document(order_id))
    wait_for_decision(billing, WITHIN, order_id=order_id, outcome="processed")

    # The order is charged and open: a cancel event for it is refused, as it should be.
    publish_forgery(
        stack, valid_cancel_event_document(order_id), f"{order_id}:outbox:OrderCancelled"
    )
    wait_for_decision(billing, WITHIN, order_id=order_id, dead_letter_reason="EventMismatch")
    # Then the owner cancels it for real: its OrderCancelled must reach billing and refund.
    cancel = PlannedCancel(order_id, CancelPoint.AFTER_CHARGE, (f"k-{order_id}",))
    answered = asyncio.run(send_cancels(stack.settings(), (cancel,)))

    assert answered.answers == {order_id: [CancelAnswer.CANCELLED]}
    wait_for_decision(billing, WITHIN, order_id=order_id, outcome="refunded")
    [payment] = stand_in(stack, "payments", order_id)
    [refund] = stand_in(stack, "refunds", order_id)
    assert (refund["paymentId"], refund["amount"]) == (payment["paymentId"], payment["amount"])
