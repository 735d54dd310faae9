"""Auto-forwarding through the `azure.servicebus.aio` client: a queue forwarding to a topic,
and a subscription forwarding its dead letters to a queue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusError
from sb_receive import receive_one_async
from sb_support import queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, start_in_background


@pytest.fixture
def forwarding_emulator() -> Iterator[RunningEmulator]:
    # inbox -> events (topic) -> subscription "work"; work's dead letters -> errors (queue)
    config = topic_config(
        topic_entry(
            "events",
            subscription_entry("work", ForwardDeadLetteredMessagesTo="errors", MaxDeliveryCount=1),
        ),
        queues=(queue_entry("inbox", ForwardTo="events"), queue_entry("errors")),
    )
    with start_in_background(config=config) as emu:
        yield emu


async def test_aio_forwarding_through_a_topic_and_dead_letter_forwarding(
    forwarding_emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(
        forwarding_emulator.connection_string
    ) as client:
        async with client.get_queue_sender("inbox") as sender:
            await sender.send_messages(
                ServiceBusMessage("order", message_id="o-1", application_properties={"n": 1})
            )
        with pytest.raises(ServiceBusError, match="auto-forwarding"):
            async with client.get_queue_receiver("inbox") as refused:
                await refused.receive_messages(max_message_count=1, max_wait_time=1)
        async with client.get_subscription_receiver("events", "work") as receiver:
            received = await receive_one_async(receiver)
            assert received.message_id == "o-1" and received.enqueued_sequence_number == 1
            await receiver.abandon_message(received)  # MaxDeliveryCount 1: dead-lettered
        async with client.get_queue_receiver("errors") as receiver:
            dead = await receive_one_async(receiver)
            await receiver.complete_message(dead)
    assert str(dead) == "order" and dead.message_id == "o-1"
    assert (dead.application_properties or {})[b"n"] == 1
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert dead.dead_letter_source == "events/Subscriptions/work"
    assert dead.enqueued_sequence_number == 1  # its number where it was first enqueued
