"""Shared fixtures: an emulator per test on a free port, with short lock / window settings."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servicebus_emulator import RunningEmulator, start_in_background


def queue_config(*queues: dict[str, Any]) -> dict[str, Any]:
    """An official-format config holding the given queue entries."""
    return {
        "UserConfig": {
            "Namespaces": [{"Name": "sbemulatorns", "Queues": list(queues), "Topics": []}],
            "Logging": {"Type": "Console"},
        }
    }


def queue_entry(name: str, **properties: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "DeadLetteringOnMessageExpiration": False,
        "DefaultMessageTimeToLive": "PT1H",
        "DuplicateDetectionHistoryTimeWindow": "PT2S",
        "LockDuration": "PT2S",
        "MaxDeliveryCount": 3,
        "RequiresDuplicateDetection": True,
        "RequiresSession": False,
    }
    defaults.update(properties)
    return {"Name": name, "Properties": defaults}


@pytest.fixture
def queue_name() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_emulator() -> Iterator[Callable[..., RunningEmulator]]:
    """Start emulators with custom queue properties; all are stopped at teardown."""
    started: list[RunningEmulator] = []

    def make(queue: str, **properties: Any) -> RunningEmulator:
        emu = start_in_background(config=queue_config(queue_entry(queue, **properties)))
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.stop()


@pytest.fixture
def emulator(make_emulator: Callable[..., RunningEmulator], queue_name: str) -> RunningEmulator:
    """An emulator with one queue (`queue_name`): lock 2 s, dedup window 2 s, 3 deliveries."""
    return make_emulator(queue_name)
