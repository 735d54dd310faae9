"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from azure.servicebus.aio import ServiceBusClient

from orders.entrypoints.localstack import QueueOptions
from servicebus_emulator import RunningEmulator, start_in_background

# The demo's entities with a duplicate-detection window wide enough that every send of a test
# falls inside it, however slow the machine: what a forgery sent first needs.
WIDE_WINDOW = QueueOptions(duplicate_window_seconds=300)


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


@pytest.fixture
def wide_window_emulator() -> Iterator[RunningEmulator]:
    """Our Service Bus emulator with the demo's entities (`WIDE_WINDOW`)."""
    running = start_in_background(config=WIDE_WINDOW.config())
    yield running
    running.stop()


@pytest.fixture
async def wide_window_client(
    wide_window_emulator: RunningEmulator,
) -> AsyncIterator[ServiceBusClient]:
    """An SDK client of `wide_window_emulator`, closed after the test."""
    async with ServiceBusClient.from_connection_string(
        wide_window_emulator.connection_string
    ) as opened:
        yield opened
