"""The console's message counts by peeking, through the real SDK on our emulator: active,
scheduled and dead-lettered are told apart, a subscription is counted like a queue, and a count
stops at its limit (what the console shows as "limit+")."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from orders.adapters.servicebus_counts import ServiceBusEntityCounter
from orders.service.subscribers import Source
from servicebus_emulator import RunningEmulator, start_in_background

QUEUE, TOPIC, SUBSCRIPTION = "orders", "order-events", "billing"
PROPERTIES: dict[str, Any] = {
    "DefaultMessageTimeToLive": "PT1H",
    "LockDuration": "PT30S",
    "MaxDeliveryCount": 3,
    "RequiresSession": False,
}


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    config = {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [{"Name": QUEUE, "Properties": PROPERTIES}],
                    "Topics": [
                        {
                            "Name": TOPIC,
                            "Properties": {"DefaultMessageTimeToLive": "PT1H"},
                            "Subscriptions": [{"Name": SUBSCRIPTION, "Properties": PROPERTIES}],
                        }
                    ],
                }
            ],
            "Logging": {"Type": "Console"},
        }
    }
    running = start_in_background(config=config)
    yield running
    running.stop()


async def test_active_scheduled_and_dead_lettered_are_counted_apart(
    emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(QUEUE) as sender:
            await sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(4)])
            later = datetime.now(UTC) + timedelta(hours=1)
            await sender.schedule_messages(
                [ServiceBusMessage("s1"), ServiceBusMessage("s2")], later
            )
        async with client.get_queue_receiver(QUEUE) as receiver:
            [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.dead_letter_message(message, reason="Test")
        counter = ServiceBusEntityCounter(client)

        counts = await counter.count(Source(queue=QUEUE), limit=100)
        capped = await counter.count(Source(queue=QUEUE), limit=2)
        subscription = await counter.count(Source(topic=TOPIC, subscription=SUBSCRIPTION), 100)

    assert (counts.active, counts.scheduled, counts.dead_lettered) == (3, 2, 1)
    assert not counts.capped(counts.active)
    # Peeking stops at the limit: two messages of five were looked at, both active.
    assert (capped.active, capped.scheduled, capped.dead_lettered) == (2, 0, 1)
    assert capped.capped(capped.active)
    assert (subscription.active, subscription.scheduled, subscription.dead_lettered) == (0, 0, 0)
