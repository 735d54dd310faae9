"""Abandon as the JavaScript SDK sends it: `modified` without delivery-failed. Service Bus counts
it as a delivery attempt like the Python SDK's abandon (`modified` with delivery-failed), so
MaxDeliveryCount dead-letters the message; `released` leaves the count alone."""

from __future__ import annotations

from typing import Any

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
    ServiceBusSubQueue,
)
from sb_receive import receive_one

from servicebus_emulator import RunningEmulator


def _settle_on_link(
    receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, outcome: str, **fields: bool
) -> None:
    # The SDK's own receiver link and codec, with the fields the JavaScript SDK sends.
    handler: Any = receiver._handler
    handler.settle_messages(
        message._delivery_id, message._delivery_tag, outcome, await_outcome=True, **fields
    )


def test_modified_without_delivery_failed_counts_a_delivery_and_reaches_the_dlq(
    emulator: RunningEmulator, queue_name: str
) -> None:
    # The fixture's queue dead-letters on the third failed delivery.
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(ServiceBusMessage("fails"))
        with client.get_queue_receiver(queue_name) as receiver:
            message = receive_one(receiver)
            _settle_on_link(receiver, message, "released")
            counts = []
            for _ in range(3):
                message = receive_one(receiver)
                counts.append(message.delivery_count)
                _settle_on_link(
                    receiver, message, "modified", delivery_failed=False, undeliverable_here=False
                )
        with client.get_queue_receiver(
            queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dead_letters:
            dead = receive_one(dead_letters)
            dead_letters.complete_message(dead)
    assert counts == [0, 1, 2]  # the release before them did not count
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
