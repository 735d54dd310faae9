"""Config builders shared by the emulator tests (a module name no other test area uses)."""

from __future__ import annotations

from typing import Any


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
