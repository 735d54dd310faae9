"""Topics and subscriptions through the `azure.servicebus.aio` client: fan-out with separate
locks and delivery counts, per-subscription dead-letter queues, duplicate detection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from sb_receive import receive_one_async
from sb_support import subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, start_in_background

TOPIC = "events"


@pytest.fixture
def topic_emulator() -> Iterator[RunningEmulator]:
    config = topic_config(
        topic_entry(TOPIC, subscription_entry("a", MaxDeliveryCount=1), subscription_entry("b"))
    )
    with start_in_background(config=config) as emu:
        yield emu


async def test_aio_fan_out_locks_counts_and_dead_letter_queues(
    topic_emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(topic_emulator.connection_string) as client:
        async with client.get_topic_sender(TOPIC) as sender:
            await sender.send_messages(ServiceBusMessage("x", message_id="m1"))
            await sender.send_messages(ServiceBusMessage("again", message_id="m1"))  # duplicate
        async with (
            client.get_subscription_receiver(TOPIC, "a") as ra,
            client.get_subscription_receiver(TOPIC, "b") as rb,
        ):
            in_a = await receive_one_async(ra)
            in_b = await receive_one_async(rb)
            assert (str(in_a), str(in_b)) == ("x", "x")
            assert in_a.lock_token != in_b.lock_token
            await ra.abandon_message(in_a)  # MaxDeliveryCount 1 in a: dead-lettered there
            await rb.abandon_message(in_b)  # MaxDeliveryCount 3 in b: redelivered
            again_b = await receive_one_async(rb)
            assert again_b.delivery_count == 1 and str(again_b) == "x"
            await rb.dead_letter_message(again_b, reason="by-hand", error_description="d")
        for subscription, reason in (("a", "MaxDeliveryCountExceeded"), ("b", "by-hand")):
            async with client.get_subscription_receiver(
                TOPIC, subscription, sub_queue=ServiceBusSubQueue.DEAD_LETTER
            ) as dlq:
                dead = await receive_one_async(dlq)
                assert (str(dead), dead.dead_letter_reason) == ("x", reason)
                await dlq.complete_message(dead)
                assert await dlq.peek_messages(10, sequence_number=1) == []
            async with client.get_subscription_receiver(TOPIC, subscription) as receiver:
                assert await receiver.peek_messages(10, sequence_number=1) == []
