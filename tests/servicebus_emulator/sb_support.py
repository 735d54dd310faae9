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


def topic_config(
    *topics: dict[str, Any], queues: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    """An official-format config holding the given topic entries (and queue entries)."""
    config = queue_config(*queues)
    config["UserConfig"]["Namespaces"][0]["Topics"] = list(topics)
    return config


def subscription_entry(name: str, *rules: dict[str, Any], **properties: Any) -> dict[str, Any]:
    """A subscription with short locks (2 s) and the given rules (none: the $Default rule)."""
    defaults: dict[str, Any] = {
        "DeadLetteringOnMessageExpiration": False,
        "DefaultMessageTimeToLive": "PT1H",
        "LockDuration": "PT2S",
        "MaxDeliveryCount": 3,
        "RequiresSession": False,
    }
    defaults.update(properties)
    entry: dict[str, Any] = {"Name": name, "Properties": defaults}
    if rules:
        entry["Rules"] = list(rules)
    return entry


def sql_rule(name: str, expression: str, action: str | None = None) -> dict[str, Any]:
    properties: dict[str, Any] = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}
    if action is not None:
        properties["Action"] = {"SqlExpression": action}
    return {"Name": name, "Properties": properties}


def correlation_rule(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Properties": {"FilterType": "Correlation", "CorrelationFilter": fields},
    }


def topic_entry(name: str, *subscriptions: dict[str, Any], **properties: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "DefaultMessageTimeToLive": "PT1H",
        "DuplicateDetectionHistoryTimeWindow": "PT2S",
        "RequiresDuplicateDetection": True,
    }
    defaults.update(properties)
    return {"Name": name, "Properties": defaults, "Subscriptions": list(subscriptions)}
