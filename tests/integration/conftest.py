"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from azure.servicebus.aio import ServiceBusClient

from orders.entrypoints.localstack import QueueOptions
from servicebus_emulator import RunningEmulator, start_in_background

# The local stack's entities, with a duplicate-detection window wide enough that every send of
# a test falls inside it, however slow the machine.
EVENTS_OPTIONS = QueueOptions(duplicate_window_seconds=300)


@pytest.fixture
async def events_client() -> AsyncIterator[ServiceBusClient]:
    """A client of our Service Bus emulator with the local stack's entities (`EVENTS_OPTIONS`):
    the events topic (`EVENTS_OPTIONS.events_topic`) and its subscriptions among them."""
    running = start_in_background(config=EVENTS_OPTIONS.config())
    try:
        async with ServiceBusClient.from_connection_string(running.connection_string) as opened:
            yield opened
    finally:
        running.stop()


@pytest.fixture
def orders_queue_emulator() -> Iterator[RunningEmulator]:
    """Our Service Bus emulator with one plain queue, `orders` (no duplicate detection: a
    resubmitted copy keeps its MessageId and is taken at once)."""
    properties = {"LockDuration": "PT30S", "MaxDeliveryCount": 3, "RequiresSession": False}
    running = start_in_background(
        config={
            "UserConfig": {
                "Namespaces": [
                    {
                        "Name": "sbemulatorns",
                        "Queues": [{"Name": "orders", "Properties": properties}],
                        "Topics": [],
                    }
                ],
                "Logging": {"Type": "Console"},
            }
        }
    )
    yield running
    running.stop()
