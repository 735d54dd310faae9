"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servicebus_emulator import RunningEmulator, start_in_background


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
