"""Load the official Service Bus emulator `Config.json` and refuse what we do not support."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .filters import (
    Action,
    FilterError,
    MessageView,
    compile_correlation_filter,
    compile_sql_action,
    compile_sql_filter,
)
from .forwarding import Entity, ForwardingError, check_forwarding

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
_TOPIC_PROPERTIES = {
    "DefaultMessageTimeToLive",
    "DuplicateDetectionHistoryTimeWindow",
    "RequiresDuplicateDetection",
}
_SUBSCRIPTION_PROPERTIES = {
    "DeadLetteringOnMessageExpiration",
    "DefaultMessageTimeToLive",
    "ForwardDeadLetteredMessagesTo",
    "ForwardTo",
    "LockDuration",
    "MaxDeliveryCount",
    "RequiresSession",
}
_RULE_PROPERTIES = {"FilterType", "CorrelationFilter", "SqlFilter", "Action"}
DEFAULT_RULE_NAME = "$Default"
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
    requires_session: bool = False
    forward_to: str | None = None  # auto-forwarding targets: a queue's or a topic's name
    forward_dead_lettered_to: str | None = None


@dataclass(frozen=True, slots=True)
class RuleSettings:
    """A subscription rule: its filter and, optionally, its SQL action."""

    name: str
    matches: Callable[[MessageView], bool]
    action: Action | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class SubscriptionSettings:
    """A subscription: a queue fed by its topic (`queue.name` is `topic/Subscriptions/name`)."""

    name: str
    queue: QueueSettings
    rules: tuple[RuleSettings, ...]


@dataclass(frozen=True, slots=True)
class TopicSettings:
    name: str
    default_ttl_ms: int = 3_600_000
    requires_duplicate_detection: bool = False
    duplicate_window_ms: int = 20_000
    subscriptions: tuple[SubscriptionSettings, ...] = ()


@dataclass(frozen=True, slots=True)
class NamespaceSettings:
    queues: list[QueueSettings]
    topics: list[TopicSettings]


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
    """Read the configuration and return the queues it defines (see `load_namespace`)."""
    return load_namespace(config_path, config).queues


def load_namespace(
    config_path: str | Path | None = None, config: dict[str, Any] | None = None
) -> NamespaceSettings:
    """Read the configuration and return the queues and topics it defines.

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


def parse_config(data: Any) -> NamespaceSettings:
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
    if len(queues) + len(topics) > 50:
        raise ConfigError("at most 50 queues and topics per namespace")
    parsed_topics: list[TopicSettings] = []
    for raw in topics:
        topic = _parse_topic(_obj(raw, "a topic"))
        if topic.name.lower() in seen:
            raise ConfigError(f"entity {topic.name!r} is defined twice")
        seen.add(topic.name.lower())
        parsed_topics.append(topic)
    try:
        check_forwarding(_forwarding_graph(result, parsed_topics))
    except ForwardingError as exc:
        raise ConfigError(str(exc)) from exc
    return NamespaceSettings(result, parsed_topics)


def _forwarding_graph(queues: list[QueueSettings], topics: list[TopicSettings]) -> list[Entity]:
    def entity(queue: QueueSettings, kind: str) -> Entity:
        return Entity(
            queue.name,
            kind,
            queue.requires_session,
            queue.forward_to,
            queue.forward_dead_lettered_to,
        )

    graph = [entity(q, "queue") for q in queues]
    for topic in topics:
        subscriptions = [entity(s.queue, "subscription") for s in topic.subscriptions]
        graph.append(
            Entity(topic.name, "topic", subscriptions=tuple(s.name for s in subscriptions))
        )
        graph += subscriptions
    return graph


def _forwarding(props: dict[str, Any], what: str) -> tuple[str | None, str | None]:
    """`ForwardTo` and `ForwardDeadLetteredMessagesTo`: an entity name, or "" for none."""
    targets: list[str | None] = []
    for key in ("ForwardTo", "ForwardDeadLetteredMessagesTo"):
        value = props.get(key, "")
        if value is None or value == "":
            targets.append(None)
        elif isinstance(value, str) and _NAME.match(value) and "$" not in value:
            targets.append(value)
        else:
            raise ConfigError(f"{what}: {key} must be a queue or topic name, not {value!r}")
    return targets[0], targets[1]


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
    requires_session = _flag(props, "RequiresSession", what)
    forward_to, forward_dead_lettered_to = _forwarding(props, what)
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
        requires_session=requires_session,
        forward_to=forward_to,
        forward_dead_lettered_to=forward_dead_lettered_to,
    )


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or "$" in name:
        raise ConfigError(f"invalid {what} name {name!r}")
    return name


def _flag(props: dict[str, Any], key: str, what: str) -> bool:
    value = props.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{what}: {key} must be true or false")
    return value


def _parse_topic(raw: dict[str, Any]) -> TopicSettings:
    name = _check_name(raw.get("Name"), "topic")
    what = f"topic {name!r}"
    if "/" in name:
        raise ConfigError(f"invalid topic name {name!r}: '/' is not supported in topic names")
    unknown_keys = set(raw) - {"Name", "Properties", "Subscriptions"}
    if unknown_keys:
        raise ConfigError(f"{what}: unknown keys {sorted(unknown_keys)}")
    props = _obj(raw.get("Properties", {}), f"{what} Properties")
    unknown = set(props) - _TOPIC_PROPERTIES
    if unknown:
        raise ConfigError(f"{what}: unsupported properties {sorted(unknown)}")
    default_ttl_ms = parse_duration_ms(
        props.get("DefaultMessageTimeToLive", "PT1H"), f"{what} DefaultMessageTimeToLive"
    )
    subscriptions = raw.get("Subscriptions")
    if not isinstance(subscriptions, list) or not subscriptions:
        raise ConfigError(f"{what}: Subscriptions must list at least one subscription")
    if len(subscriptions) > 50:
        raise ConfigError(f"{what}: at most 50 subscriptions per topic")
    parsed: list[SubscriptionSettings] = []
    seen: set[str] = set()
    for entry in subscriptions:
        subscription = _parse_subscription(name, default_ttl_ms, _obj(entry, "a subscription"))
        if subscription.name.lower() in seen:
            raise ConfigError(f"{what}: subscription {subscription.name!r} is defined twice")
        seen.add(subscription.name.lower())
        parsed.append(subscription)
    return TopicSettings(
        name=name,
        default_ttl_ms=default_ttl_ms,
        requires_duplicate_detection=_flag(props, "RequiresDuplicateDetection", what),
        duplicate_window_ms=parse_duration_ms(
            props.get("DuplicateDetectionHistoryTimeWindow", "PT20S"),
            f"{what} DuplicateDetectionHistoryTimeWindow",
        ),
        subscriptions=tuple(parsed),
    )


def _parse_subscription(topic: str, topic_ttl_ms: int, raw: dict[str, Any]) -> SubscriptionSettings:
    name = _check_name(raw.get("Name"), "subscription")
    what = f"subscription {topic}/{name}"
    if "/" in name:
        raise ConfigError(f"invalid subscription name {name!r}: '/' is not allowed")
    unknown_keys = set(raw) - {"Name", "Properties", "Rules"}
    if unknown_keys:
        raise ConfigError(f"{what}: unknown keys {sorted(unknown_keys)}")
    props = _obj(raw.get("Properties", {}), f"{what} Properties")
    unknown = set(props) - _SUBSCRIPTION_PROPERTIES
    if unknown:
        raise ConfigError(f"{what}: unsupported properties {sorted(unknown)}")
    requires_session = _flag(props, "RequiresSession", what)
    forward_to, forward_dead_lettered_to = _forwarding(props, what)
    max_delivery = props.get("MaxDeliveryCount", 3)
    if not isinstance(max_delivery, int) or isinstance(max_delivery, bool) or max_delivery < 1:
        raise ConfigError(f"{what}: MaxDeliveryCount must be an integer >= 1")
    own_ttl = parse_duration_ms(
        props.get("DefaultMessageTimeToLive", "PT1H"), f"{what} DefaultMessageTimeToLive"
    )
    queue = QueueSettings(
        name=f"{topic}/Subscriptions/{name}",
        lock_duration_ms=parse_duration_ms(
            props.get("LockDuration", "PT1M"), f"{what} LockDuration"
        ),
        max_delivery_count=max_delivery,
        # A message lives no longer than its topic's and its subscription's default allow.
        default_ttl_ms=min(own_ttl, topic_ttl_ms),
        dead_lettering_on_expiration=_flag(props, "DeadLetteringOnMessageExpiration", what),
        requires_duplicate_detection=False,  # the topic detects duplicates
        requires_session=requires_session,
        forward_to=forward_to,
        forward_dead_lettered_to=forward_dead_lettered_to,
    )
    raw_rules = raw.get("Rules", [])
    if not isinstance(raw_rules, list):
        raise ConfigError(f"{what}: Rules must be a list")
    if len(raw_rules) > 1000:
        raise ConfigError(f"{what}: at most 1000 rules")
    rules: list[RuleSettings] = []
    seen: set[str] = set()
    for entry in raw_rules:
        rule = _parse_rule(what, _obj(entry, f"{what}: a rule"))
        if rule.name.lower() in seen:
            raise ConfigError(f"{what}: rule {rule.name!r} is defined twice")
        seen.add(rule.name.lower())
        rules.append(rule)
    if not rules:  # Service Bus gives every new subscription a TrueFilter named $Default
        rules.append(RuleSettings(DEFAULT_RULE_NAME, lambda _message: True, None, "1=1"))
    return SubscriptionSettings(name=name, queue=queue, rules=tuple(rules))


def _parse_rule(where: str, raw: dict[str, Any]) -> RuleSettings:
    name = _check_name(raw.get("Name"), f"{where}: rule")
    what = f"{where} rule {name!r}"
    unknown_keys = set(raw) - {"Name", "Properties"}
    if unknown_keys:
        raise ConfigError(f"{what}: unknown keys {sorted(unknown_keys)}")
    if "Properties" not in raw:
        raise ConfigError(f"{what}: Properties (with FilterType) is required")
    props = _obj(raw["Properties"], f"{what} Properties")
    unknown = set(props) - _RULE_PROPERTIES
    if unknown:
        raise ConfigError(f"{what}: unsupported properties {sorted(unknown)}")
    filter_type = props.get("FilterType")
    try:
        if filter_type == "Sql":
            sql = _obj(props.get("SqlFilter"), f"{what} SqlFilter")
            if "CorrelationFilter" in props:
                raise ConfigError(f"{what}: a Sql rule cannot also have a CorrelationFilter")
            expression = sql.get("SqlExpression")
            matches = compile_sql_filter(expression)
            description = str(expression)
        elif filter_type == "Correlation":
            correlation = _obj(props.get("CorrelationFilter"), f"{what} CorrelationFilter")
            if "SqlFilter" in props:
                raise ConfigError(f"{what}: a Correlation rule cannot also have a SqlFilter")
            matches = compile_correlation_filter(correlation)
            description = json.dumps(correlation, sort_keys=True)
        else:
            raise ConfigError(f"{what}: FilterType must be 'Sql' or 'Correlation'")
        action = None
        if "Action" in props:
            action_spec = _obj(props["Action"], f"{what} Action")
            action = compile_sql_action(action_spec.get("SqlExpression"))
    except FilterError as exc:
        raise ConfigError(f"{what}: {exc}") from exc
    return RuleSettings(name, matches, action, description)
