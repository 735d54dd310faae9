"""The operators' dead-letter tools on a topic's subscription, through the real SDK on our
emulator: list and purge work there, resubmit refuses (a copy to the topic would reach every
subscription) and leaves the dead letter in place."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters
from orders.domain.dead_letters import Selection
from orders.exceptions import ResubmitUnsupportedError
from orders.service.worker_options import Source
from servicebus_emulator import RunningEmulator, start_in_background

TOPIC, BILLING, SHIPPING = "order-events", "billing", "shipping"


def subscription(name: str) -> dict[str, Any]:
    return {
        "Name": name,
        "Properties": {
            "DeadLetteringOnMessageExpiration": False,
            "DefaultMessageTimeToLive": "PT1H",
            "LockDuration": "PT30S",
            "MaxDeliveryCount": 3,
            "RequiresSession": False,
        },
    }


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    topic = {
        "Name": TOPIC,
        "Properties": {
            "DefaultMessageTimeToLive": "PT1H",
            "DuplicateDetectionHistoryTimeWindow": "PT20S",
            "RequiresDuplicateDetection": True,
        },
        "Subscriptions": [subscription(BILLING), subscription(SHIPPING)],
    }
    config = {
        "UserConfig": {
            "Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [topic]}],
            "Logging": {"Type": "Console"},
        }
    }
    running = start_in_background(config=config)
    yield running
    running.stop()


async def test_a_subscriptions_dead_letters_are_listed_and_purged_never_resubmitted(
    emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_topic_sender(TOPIC) as sender:
            await sender.send_messages(ServiceBusMessage(b"{}", message_id="evt-1"))
        async with client.get_subscription_receiver(TOPIC, BILLING) as receiver:
            [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.dead_letter_message(message, reason="PaymentRefused")
        billing = ServiceBusDeadLetters(client, Source(topic=TOPIC, subscription=BILLING))
        shipping = ServiceBusDeadLetters(client, Source(topic=TOPIC, subscription=SHIPPING))

        [listed] = await billing.browse(10)
        with pytest.raises(ResubmitUnsupportedError, match="every subscription"):
            await billing.resubmit(
                Selection(everything=True), lambda dead: None, by="ops", now=datetime.now(UTC)
            )
        still = await billing.browse(10)
        purged = await billing.purge(Selection(reason="PaymentRefused"))

        assert listed.message_id == "evt-1" and listed.reason == "PaymentRefused"
        assert [dead.message_id for dead in still] == ["evt-1"]
        assert purged.done == [listed.sequence_number]
        assert await billing.browse(10) == []
        assert await shipping.browse(10) == []  # the other subscription's DLQ was never touched
