"""The official Config.json format: our file validates, unsupported features are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sb_support import (
    correlation_rule,
    queue_config,
    queue_entry,
    sql_rule,
    subscription_entry,
    topic_config,
    topic_entry,
)

from servicebus_emulator import ConfigError, RunningEmulator, load_config, start_in_background
from servicebus_emulator.config import load_namespace, parse_duration_ms

REPO = Path(__file__).resolve().parents[2]
PROJECT_CONFIG = REPO / "emulators" / "servicebus" / "config.json"
# The official schema, copied from upstream (tests/data/reference/SOURCES.md).
SCHEMA = REPO / "tests" / "data" / "reference" / "servicebus-emulator" / "Config-schema.json"


def test_project_config_matches_the_official_schema() -> None:
    import jsonschema

    # The official name patterns use `[\w-\.]`, valid in .NET (a literal '-') but a bad range
    # for Python's `re`: escape the hyphen so both engines read the same character class.
    text = SCHEMA.read_text(encoding="utf-8").replace(r"[\\w-\\.", r"[\\w\\-\\.")
    schema = json.loads(text)
    validator = jsonschema.Draft7Validator(schema)
    validator.validate(json.loads(PROJECT_CONFIG.read_text(encoding="utf-8")))
    bad = json.loads(PROJECT_CONFIG.read_text(encoding="utf-8"))
    bad["UserConfig"]["Namespaces"][0]["Name"] = "not-the-emulator-namespace"
    assert not validator.is_valid(bad)  # the validator really checks
    (topic,) = json.loads(PROJECT_CONFIG.read_text(encoding="utf-8"))["UserConfig"]["Namespaces"][
        0
    ]["Topics"]
    assert {
        r["Properties"]["FilterType"] for s in topic["Subscriptions"] for r in s.get("Rules", [])
    } == {
        "Sql",
        "Correlation",
    }
    bad = json.loads(PROJECT_CONFIG.read_text(encoding="utf-8"))
    bad["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"][1]["Rules"][0]["Properties"][
        "FilterType"
    ] = "Boolean"
    assert not validator.is_valid(bad)  # rules are checked too
    queues = json.loads(PROJECT_CONFIG.read_text(encoding="utf-8"))["UserConfig"]["Namespaces"][0][
        "Queues"
    ]
    (session_queue,) = [q for q in queues if q["Properties"]["RequiresSession"]]
    bad = json.loads(PROJECT_CONFIG.read_text(encoding="utf-8"))
    bad["UserConfig"]["Namespaces"][0]["Queues"][queues.index(session_queue)]["Properties"][
        "RequiresSession"
    ] = "yes"
    assert not validator.is_valid(bad)  # and the session queue's settings


def test_topic_configs_our_tests_build_match_the_official_schema() -> None:
    import jsonschema

    text = SCHEMA.read_text(encoding="utf-8").replace(r"[\\w-\\.", r"[\\w\\-\\.")
    validator = jsonschema.Draft7Validator(json.loads(text))
    action_on_correlation = correlation_rule("c", CorrelationId="x", Properties={"n": 1})
    action_on_correlation["Properties"]["Action"] = {"SqlExpression": "SET tagged = 1"}
    config = topic_config(
        topic_entry(
            "t",
            subscription_entry("plain"),
            subscription_entry("sql", sql_rule("s", "a = 1", "SET b = 2; REMOVE c")),
            subscription_entry("corr", action_on_correlation),
        ),
        queues=(queue_entry("q"),),
    )
    validator.validate(config)
    load_namespace(config=config)  # and this emulator accepts it


def test_project_config_loads_with_its_settings() -> None:
    orders, status, status_sessions = load_config(PROJECT_CONFIG)
    assert orders.name == "orders"
    assert orders.requires_duplicate_detection
    assert orders.duplicate_window_ms == 60_000
    assert orders.lock_duration_ms == 60_000
    assert orders.max_delivery_count == 10
    assert orders.default_ttl_ms == 3_600_000
    assert orders.dead_lettering_on_expiration
    assert not orders.requires_session
    # Status updates: versions alone (the default), or one session per order; duplicates
    # dropped either way.
    assert status.name == "order-status" and not status.requires_session
    assert status_sessions.name == "order-status-sessions" and status_sessions.requires_session
    for queue in (status, status_sessions):
        assert queue.requires_duplicate_detection
        assert queue.duplicate_window_ms == 60_000 and queue.max_delivery_count == 10


def test_project_config_declares_a_topic_with_rules() -> None:
    namespace = load_namespace(PROJECT_CONFIG)
    assert [q.name for q in namespace.queues] == ["orders", "order-status", "order-status-sessions"]
    (topic,) = namespace.topics
    assert topic.name == "order-events" and topic.requires_duplicate_detection
    rules = {s.name: [r.name for r in s.rules] for s in topic.subscriptions}
    assert rules == {
        "audit": ["$Default"],
        "large-orders": ["many-lines"],
        "eur-orders": ["eur"],
        # The consumers' subscriptions keep other subscriptions' delayed retries out.
        "billing": ["own-delayed-retries"],
        "shipping": ["own-delayed-retries"],
    }
    (large,) = [s for s in topic.subscriptions if s.name == "large-orders"]
    assert large.rules[0].action is not None
    assert large.queue.name == "order-events/Subscriptions/large-orders"
    assert large.queue.max_delivery_count == 10 and large.queue.lock_duration_ms == 60_000


def test_project_topic_routes_through_its_rules(project_emulator: RunningEmulator) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    big = ServiceBusMessage(
        "{}", subject="OrderPlaced", application_properties={"lineCount": 12, "currency": "USD"}
    )
    eur = ServiceBusMessage(
        "{}", subject="OrderPlaced", application_properties={"lineCount": 1, "currency": "EUR"}
    )
    with ServiceBusClient.from_connection_string(project_emulator.connection_string) as client:
        with client.get_topic_sender("order-events") as sender:
            sender.send_messages([big, eur])
        got: dict[str, list[Any]] = {}
        for name in ("audit", "large-orders", "eur-orders", "billing", "shipping"):
            with client.get_subscription_receiver("order-events", name) as receiver:
                peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
                got[name] = [(m.application_properties or {})[b"currency"] for m in peeked]
                if name == "large-orders":
                    assert (peeked[0].application_properties or {})[b"priority"] == b"high"
    assert got == {
        "audit": [b"USD", b"EUR"],
        "large-orders": [b"USD"],
        "eur-orders": [b"EUR"],
        "billing": [b"USD", b"EUR"],
        "shipping": [b"USD", b"EUR"],
    }


def test_project_status_queue_keeps_one_order_per_session(
    project_emulator: RunningEmulator,
) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from azure.servicebus.exceptions import ServiceBusError

    with ServiceBusClient.from_connection_string(project_emulator.connection_string) as client:
        with client.get_queue_sender("order-status-sessions") as sender:
            sender.send_messages(ServiceBusMessage("paid", session_id="o-1", message_id="s-1"))
            sender.send_messages(ServiceBusMessage("paid", session_id="o-1", message_id="s-1"))
            sender.send_messages(ServiceBusMessage("shipped", session_id="o-1", message_id="s-2"))
            with pytest.raises(ServiceBusError, match="SessionId"):
                sender.send_messages(ServiceBusMessage("no order"))
        with client.get_queue_receiver("order-status-sessions", session_id="o-1") as receiver:
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
    assert [str(m) for m in peeked] == ["paid", "shipped"]  # the duplicate was dropped


def test_defaults_follow_the_official_schema() -> None:
    (queue,) = load_config(config=queue_config({"Name": "plain"}))
    assert (
        queue.lock_duration_ms,
        queue.max_delivery_count,
        queue.duplicate_window_ms,
        queue.default_ttl_ms,
    ) == (60_000, 3, 20_000, 3_600_000)
    assert not queue.requires_duplicate_detection


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1M", 60_000),
        ("PT5S", 5_000),
        ("PT1H", 3_600_000),
        ("P1DT1S", 86_401_000),
        ("PT0.5S", 500),
        ("PT1H30M", 5_400_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text, "x") == ms


def _topic() -> dict[str, Any]:
    return {"Name": "t", "Subscriptions": []}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c["UserConfig"]["Namespaces"][0]["Topics"].append(_topic()), "Subscriptions"),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"].update(
                RequiresSession="yes"
            ),
            "RequiresSession must be true or false",
        ),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"].update(
                ForwardTo="other"
            ),
            "ForwardTo",
        ),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"].update(
                ForwardDeadLetteredMessagesTo="other"
            ),
            "ForwardDeadLetteredMessagesTo",
        ),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"].update(
                EnablePartitioning=True
            ),
            "EnablePartitioning",
        ),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"].update(
                LockDuration="soon"
            ),
            "LockDuration",
        ),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"].update(
                MaxDeliveryCount=0
            ),
            "MaxDeliveryCount",
        ),
        (lambda c: c["UserConfig"]["Namespaces"][0].update(Name="other"), "sbemulatorns"),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"].append(queue_entry("Q1")),
            "defined twice",
        ),
        (lambda c: c["UserConfig"].pop("Logging"), "Logging"),
        (
            lambda c: c["UserConfig"]["Namespaces"][0]["Queues"][0].update(Name="bad name!"),
            "invalid queue name",
        ),
    ],
    ids=[
        "topics",
        "sessions",
        "forward-to",
        "forward-dlq",
        "unknown-property",
        "bad-duration",
        "max-delivery-0",
        "namespace-name",
        "duplicate-queue",
        "no-logging",
        "bad-name",
    ],
)
def test_unsupported_or_invalid_config_is_refused(mutate: Any, message: str) -> None:
    config = queue_config(queue_entry("q1"))
    mutate(config)
    with pytest.raises(ConfigError, match=message):
        load_config(config=config)
    with pytest.raises(ConfigError, match=message):
        start_in_background(config=config)


def test_short_durations_are_accepted_for_tests() -> None:
    (queue,) = load_config(
        config=queue_config(
            queue_entry("q", LockDuration="PT1S", DuplicateDetectionHistoryTimeWindow="PT1S")
        )
    )
    assert queue.lock_duration_ms == 1000 and queue.duplicate_window_ms == 1000


def test_unreadable_config_file(tmp_path: Path) -> None:
    broken = tmp_path / "config.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")
