"""Load the official Service Bus emulator `Config.json` and refuse what we do not support."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAMESPACE_NAME = "sbemulatorns"
_NAME = re.compile(r"^[A-Za-z0-9]$|^[A-Za-z0-9][\w\-./]*[A-Za-z0-9]$")
_DURATION = re.compile(
    r"^P(?!$)(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)
_QUEUE_PROPERTIES = {
    "DeadLetteringOnMessageExpiration",
    "DefaultMessageTimeToLive",
    "DuplicateDetectionHistoryTimeWindow",
    "ForwardDeadLetteredMessagesTo",
    "ForwardTo",
    "LockDuration",
    "MaxDeliveryCount",
    "RequiresDuplicateDetection",
    "RequiresSession",
}
_LOGGING_TYPES = {"File", "Console", "File,Console", "Console,File"}

# Used when neither a file nor a dict is given: the project's single `orders` queue.
DEFAULT_CONFIG: dict[str, Any] = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": NAMESPACE_NAME,
                "Queues": [
                    {
                        "Name": "orders",
                        "Properties": {
                            "DeadLetteringOnMessageExpiration": True,
                            "DefaultMessageTimeToLive": "PT1H",
                            "DuplicateDetectionHistoryTimeWindow": "PT1M",
                            "LockDuration": "PT1M",
                            "MaxDeliveryCount": 10,
                            "RequiresDuplicateDetection": True,
                            "RequiresSession": False,
                        },
                    }
                ],
                "Topics": [],
            }
        ],
        "Logging": {"Type": "Console"},
    }
}


class ConfigError(ValueError):
    """The configuration is invalid or asks for something this emulator does not support."""


@dataclass(frozen=True, slots=True)
class QueueSettings:
    name: str
    lock_duration_ms: int = 60_000
    max_delivery_count: int = 3
    default_ttl_ms: int = 3_600_000
    dead_lettering_on_expiration: bool = False
    requires_duplicate_detection: bool = False
    duplicate_window_ms: int = 20_000


def parse_duration_ms(text: str, what: str) -> int:
    """ISO 8601 duration (as the official schema allows it) in milliseconds."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if not match:
        raise ConfigError(f"{what}: {text!r} is not an ISO 8601 duration such as PT1M")
    years, months, days, hours, minutes, seconds = match.groups()
    if years or months:
        raise ConfigError(f"{what}: years and months are not supported in {text!r}")
    total = (
        int(days or 0) * 86_400.0
        + int(hours or 0) * 3_600.0
        + int(minutes or 0) * 60.0
        + float(seconds or 0)
    )
    ms = round(total * 1000)
    if ms <= 0:
        raise ConfigError(f"{what}: {text!r} must be longer than zero")
    return ms


def load_config(
    config_path: str | Path | None = None, config: dict[str, Any] | None = None
) -> list[QueueSettings]:
    """Read the configuration and return the queues it defines.

    Exactly one of `config_path` and `config` may be given; with neither, DEFAULT_CONFIG.
    """
    if config_path is not None and config is not None:
        raise ConfigError("give either a config file or a config dict, not both")
    if config_path is not None:
        try:
            data = json.loads(Path(config_path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_path}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config file {config_path} is not valid JSON: {exc}") from exc
    else:
        data = config if config is not None else DEFAULT_CONFIG
    return parse_config(data)


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a JSON object")
    return value


def parse_config(data: Any) -> list[QueueSettings]:
    user = _obj(_obj(data, "the config").get("UserConfig"), "UserConfig")
    logging_cfg = _obj(user.get("Logging"), "UserConfig.Logging")
    if logging_cfg.get("Type") not in _LOGGING_TYPES:
        raise ConfigError(f"UserConfig.Logging.Type must be one of {sorted(_LOGGING_TYPES)}")
    namespaces = user.get("Namespaces")
    if not isinstance(namespaces, list) or len(namespaces) != 1:
        raise ConfigError("UserConfig.Namespaces must hold exactly one namespace")
    namespace = _obj(namespaces[0], "the namespace")
    if namespace.get("Name") != NAMESPACE_NAME:
        raise ConfigError(f"the namespace must be named {NAMESPACE_NAME!r}")
    topics = namespace.get("Topics")
    if not isinstance(topics, list):
        raise ConfigError("Namespaces[0].Topics is required (use [] for none)")
    if topics:
        raise ConfigError(
            "Topics and subscriptions are not supported by this emulator; "
            "remove them or use the official emulator"
        )
    queues = namespace.get("Queues")
    if not isinstance(queues, list):
        raise ConfigError("Namespaces[0].Queues is required")
    if len(queues) > 50:
        raise ConfigError("at most 50 queues per namespace")
    result: list[QueueSettings] = []
    seen: set[str] = set()
    for raw in queues:
        queue = _parse_queue(_obj(raw, "a queue"))
        if queue.name.lower() in seen:
            raise ConfigError(f"queue {queue.name!r} is defined twice")
        seen.add(queue.name.lower())
        result.append(queue)
    return result


def _parse_queue(raw: dict[str, Any]) -> QueueSettings:
    name = raw.get("Name")
    if not isinstance(name, str) or not _NAME.match(name) or "$" in name:
        raise ConfigError(f"invalid queue name {name!r}")
    unknown_keys = set(raw) - {"Name", "Properties"}
    if unknown_keys:
        raise ConfigError(f"queue {name!r}: unknown keys {sorted(unknown_keys)}")
    props = _obj(raw.get("Properties", {}), f"queue {name!r} Properties")
    unknown = set(props) - _QUEUE_PROPERTIES
    if unknown:
        raise ConfigError(f"queue {name!r}: unsupported properties {sorted(unknown)}")
    what = f"queue {name!r}"
    if props.get("RequiresSession", False) is not False:
        raise ConfigError(f"{what}: RequiresSession true (sessions) is not supported")
    for key in ("ForwardTo", "ForwardDeadLetteredMessagesTo"):
        if props.get(key, "") not in ("", None):
            raise ConfigError(f"{what}: {key} (auto-forwarding) is not supported")
    for key in ("DeadLetteringOnMessageExpiration", "RequiresDuplicateDetection"):
        if not isinstance(props.get(key, False), bool):
            raise ConfigError(f"{what}: {key} must be true or false")
    max_delivery = props.get("MaxDeliveryCount", 3)
    if not isinstance(max_delivery, int) or isinstance(max_delivery, bool) or max_delivery < 1:
        raise ConfigError(f"{what}: MaxDeliveryCount must be an integer >= 1")
    return QueueSettings(
        name=name,
        lock_duration_ms=parse_duration_ms(
            props.get("LockDuration", "PT1M"), f"{what} LockDuration"
        ),
        max_delivery_count=max_delivery,
        default_ttl_ms=parse_duration_ms(
            props.get("DefaultMessageTimeToLive", "PT1H"), f"{what} DefaultMessageTimeToLive"
        ),
        dead_lettering_on_expiration=props.get("DeadLetteringOnMessageExpiration", False),
        requires_duplicate_detection=props.get("RequiresDuplicateDetection", False),
        duplicate_window_ms=parse_duration_ms(
            props.get("DuplicateDetectionHistoryTimeWindow", "PT20S"),
            f"{what} DuplicateDetectionHistoryTimeWindow",
        ),
    )
