"""Subscription rules through the SDK (sync and aio): SQL filters, correlation filters, rule
actions and the $Default rule; what the emulator refuses in a rule, at start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from sb_support import (
    correlation_rule,
    sql_rule,
    subscription_entry,
    topic_config,
    topic_entry,
)

from servicebus_emulator import ConfigError, RunningEmulator, start_in_background

TOPIC = "rules"


def _messages() -> list[ServiceBusMessage]:
    return [
        ServiceBusMessage(
            "1",
            message_id="m1",
            subject="order.created",
            correlation_id="c1",
            content_type="application/json",
            to="x",
            reply_to="r",
            application_properties={"color": "red", "qty": 5, "price": 2.5, "vip": True},
        ),
        ServiceBusMessage(
            "2",
            message_id="m2",
            subject="order.cancelled",
            session_id="s2",
            reply_to_session_id="rs2",
            application_properties={"color": "blue", "qty": 12},
        ),
        ServiceBusMessage("3", message_id="m3", application_properties={"qty": 0}),
        ServiceBusMessage(
            "4", message_id="m4", application_properties={"color": "Red", "name": "50%off"}
        ),
    ]


ALL = {"m1", "m2", "m3", "m4"}
# subscription -> (rule, message ids it must receive)
SQL_CASES: dict[str, tuple[str, set[str]]] = {
    "eq": ("color = 'red'", {"m1"}),  # case-sensitive: m4's 'Red' does not match
    "ne": ("color <> 'red'", {"m2", "m4"}),  # m3 has no color: unknown, not selected
    "ne2": ("color != 'blue'", {"m1", "m4"}),
    "range": ("qty > 4 AND qty <= 12", {"m1", "m2"}),
    "arith": ("qty * 2 + 1 = 11", {"m1"}),
    "mod": ("qty % 5 = 0 AND qty - 1 < 4", {"m3"}),
    "not": ("NOT (qty > 4)", {"m3"}),  # m4 has no qty: NOT unknown is unknown
    "or": ("sys.MessageId = 'm2' OR sys.CorrelationId = 'c1'", {"m1", "m2"}),
    "in": ("color IN ('red', 'blue')", {"m1", "m2"}),
    "notin": ("color NOT IN ('red')", {"m2", "m4"}),
    "like": ("sys.Label LIKE 'order.%'", {"m1", "m2"}),
    "notlike": ("sys.Label NOT LIKE '%created'", {"m2"}),
    "underscore": ("sys.MessageId LIKE 'm_'", ALL),
    "escape": ("name LIKE '50!%%' ESCAPE '!'", {"m4"}),
    "isnull": ("color IS NULL", {"m3"}),
    "notnull": ("color IS NOT NULL", {"m1", "m2", "m4"}),
    "exists": ("EXISTS(qty)", {"m1", "m2", "m3"}),
    "notexists": ("NOT EXISTS(qty)", {"m4"}),
    "sys": (
        "sys.ContentType = 'application/json' AND sys.To = 'x' AND sys.ReplyTo = 'r'",
        {"m1"},
    ),
    "session": ("sys.SessionId = 's2' AND sys.ReplyToSessionId = 'rs2'", {"m2"}),
    "nosession": ("sys.SessionId IS NULL", {"m1", "m3", "m4"}),
    "bool": ("vip = TRUE", {"m1"}),
    "float": ("price >= 2.5", {"m1"}),
    "scoped": ("user.color = 'blue'", {"m2"}),
    "delimited": ("[color] = 'blue' and sys.[Label] = 'order.cancelled'", {"m2"}),
    "true": ("1=1", ALL),
    "false": ("1=0", set()),
}
CORRELATION_CASES: dict[str, tuple[dict[str, Any], set[str]]] = {
    "c-correlation": ({"CorrelationId": "c1"}, {"m1"}),
    "c-label": ({"Label": "order.cancelled"}, {"m2"}),
    "c-message": ({"MessageId": "m3"}, {"m3"}),
    "c-content": ({"ContentType": "application/json"}, {"m1"}),
    "c-to-reply": ({"To": "x", "ReplyTo": "r"}, {"m1"}),
    "c-session": ({"SessionId": "s2", "ReplyToSessionId": "rs2"}, {"m2"}),
    "c-props": ({"Properties": {"color": "red", "qty": 5}}, {"m1"}),
    "c-props-int": ({"Properties": {"qty": 12}}, {"m2"}),
    "c-all-must-match": ({"CorrelationId": "c1", "Properties": {"qty": 6}}, set()),
    "c-case": ({"Properties": {"color": "RED"}}, set()),
}


def _config() -> dict[str, Any]:
    subscriptions = [subscription_entry("default")]  # no rules: the $Default TrueFilter
    subscriptions += [
        subscription_entry(name, sql_rule("r", expression))
        for name, (expression, _) in SQL_CASES.items()
    ]
    subscriptions += [
        subscription_entry(name, correlation_rule("r", **fields))
        for name, (fields, _) in CORRELATION_CASES.items()
    ]
    subscriptions.append(
        subscription_entry(
            "actions",
            sql_rule("plain-red", "color = 'red'"),
            sql_rule("plain-any", "EXISTS(color)"),
            sql_rule("annotate", "qty > 4", "SET color = 'green'; SET qty = qty + 1; REMOVE vip"),
        )
    )
    subscriptions.append(
        subscription_entry(
            "corr-action",
            {
                "Name": "tag",
                "Properties": {
                    "FilterType": "Correlation",
                    "CorrelationFilter": {"MessageId": "m3"},
                    "Action": {"SqlExpression": "SET tagged = 'yes'"},
                },
            },
        )
    )
    return topic_config(topic_entry(TOPIC, *subscriptions, RequiresDuplicateDetection=False))


EXPECTED = {"default": ALL} | {
    name: ids for name, (_, ids) in (SQL_CASES | CORRELATION_CASES).items()
}


@pytest.fixture
def rules_emulator() -> Iterator[RunningEmulator]:
    with start_in_background(config=_config()) as emu:
        yield emu


def _peek_sync(emu: RunningEmulator, subscription: str) -> list[tuple[str, dict[str, Any]]]:
    with (
        ServiceBusClient.from_connection_string(emu.connection_string) as client,
        client.get_subscription_receiver(TOPIC, subscription) as receiver,
    ):
        peeked = receiver.peek_messages(max_message_count=50, sequence_number=1)
        return [(str(m.message_id), _props(m.application_properties)) for m in peeked]


def _props(raw: Any) -> dict[str, Any]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in (raw or {}).items()
    }


def _check_actions(copies: list[tuple[str, dict[str, Any]]]) -> None:
    # Rules without an action give one copy (m1, m2, m4 match one or both plain rules);
    # the rule with an action gives its own copy of m1 and m2, annotated, with RuleName.
    plain = sorted(mid for mid, props in copies if "RuleName" not in props)
    annotated = {mid: props for mid, props in copies if "RuleName" in props}
    assert plain == ["m1", "m2", "m4"]
    assert set(annotated) == {"m1", "m2"}
    assert annotated["m1"] == {"RuleName": "annotate", "color": "green", "qty": 6, "price": 2.5}
    assert annotated["m2"] == {"RuleName": "annotate", "color": "green", "qty": 13}
    (original,) = [props for mid, props in copies if mid == "m1" and "RuleName" not in props]
    assert original == {"color": "red", "qty": 5, "price": 2.5, "vip": True}


def test_filters_and_actions_sync(rules_emulator: RunningEmulator) -> None:
    with (
        ServiceBusClient.from_connection_string(rules_emulator.connection_string) as client,
        client.get_topic_sender(TOPIC) as sender,
    ):
        sender.send_messages(_messages())
    names = [*EXPECTED, "actions", "corr-action"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = dict(
            zip(names, pool.map(lambda n: _peek_sync(rules_emulator, n), names), strict=True)
        )
    got = {name: {mid for mid, _ in results[name]} for name in EXPECTED}
    assert got == EXPECTED
    _check_actions(results["actions"])
    assert results["corr-action"] == [("m3", {"qty": 0, "RuleName": "tag", "tagged": "yes"})]


async def test_filters_and_actions_aio(rules_emulator: RunningEmulator) -> None:
    async with AsyncServiceBusClient.from_connection_string(
        rules_emulator.connection_string
    ) as client:
        async with client.get_topic_sender(TOPIC) as sender:
            await sender.send_messages(_messages())

        async def take_all(name: str) -> list[tuple[str, dict[str, Any]]]:
            """Receive (PeekLock) and complete everything the subscription holds."""
            out: list[tuple[str, dict[str, Any]]] = []
            async with client.get_subscription_receiver(TOPIC, name) as receiver:
                expected = len(await receiver.peek_messages(50, sequence_number=1))
                while len(out) < expected:
                    batch = await receiver.receive_messages(max_message_count=50, max_wait_time=5)
                    assert batch, f"{name}: messages announced by peek did not arrive"
                    for msg in batch:
                        out.append((str(msg.message_id), _props(msg.application_properties)))
                        await receiver.complete_message(msg)
            return out

        names = [*EXPECTED, "actions", "corr-action"]
        results = dict(zip(names, await asyncio.gather(*(take_all(n) for n in names)), strict=True))
    got = {name: {mid for mid, _ in results[name]} for name in EXPECTED}
    assert got == EXPECTED
    _check_actions(results["actions"])
    assert results["corr-action"] == [("m3", {"qty": 0, "RuleName": "tag", "tagged": "yes"})]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (sql_rule("r", "newid() = 'x'"), "function newid"),
        (sql_rule("r", "sys.SequenceNumber > 3"), "sys.SequenceNumber is not supported"),
        (sql_rule("r", "sys.Nonsense = 1"), "unknown system property"),
        (sql_rule("r", "color = "), "expected a value"),
        (sql_rule("r", "color = 'red' extra"), "unexpected input"),
        (sql_rule("r", "color ~ 'red'"), "unexpected character"),
        (sql_rule("r", ""), "non-empty"),
        (sql_rule("r", "1=1", "SET sys.Label = 'x'"), "SET on system property"),
        (sql_rule("r", "1=1", "DELETE x"), "expected SET or REMOVE"),
        ({"Name": "r", "Properties": {"FilterType": "Boolean"}}, "FilterType"),
        ({"Name": "r", "Properties": {"FilterType": "Sql"}}, "SqlFilter"),
        (correlation_rule("r"), "at least one field"),
        (correlation_rule("r", Subject="x"), "unknown CorrelationFilter field"),
        (sql_rule("r", "(" * 2000 + "1=1" + ")" * 2000), "nested too deeply"),
    ],
    ids=[
        "function",
        "untracked-system-property",
        "unknown-system-property",
        "syntax",
        "trailing",
        "character",
        "empty",
        "action-on-system-property",
        "action-syntax",
        "boolean-filter-type",
        "missing-sql-filter",
        "empty-correlation",
        "correlation-field",
        "nesting",
    ],
)
def test_unsupported_rules_are_refused_at_start(rule: dict[str, Any], message: str) -> None:
    config = topic_config(topic_entry("t", subscription_entry("s", rule)))
    with pytest.raises(ConfigError, match=message):
        start_in_background(config=config)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda t: t["Subscriptions"][0]["Properties"].update(RequiresSession=1),
            "RequiresSession must be true or false",
        ),
        (lambda t: t["Subscriptions"][0]["Properties"].update(ForwardTo="q"), "ForwardTo"),
        (lambda t: t["Properties"].update(EnablePartitioning=True), "EnablePartitioning"),
        (lambda t: t.update(Subscriptions=[]), "at least one subscription"),
        (lambda t: t["Subscriptions"].append(subscription_entry("S")), "defined twice"),
        (lambda t: t.update(Name="bad name!"), "invalid topic name"),
    ],
    ids=["sessions", "forwarding", "unknown-property", "no-subscriptions", "twice", "name"],
)
def test_unsupported_topic_settings_are_refused(mutate: Any, message: str) -> None:
    topic = topic_entry("t", subscription_entry("s"))
    mutate(topic)
    with pytest.raises(ConfigError, match=message):
        start_in_background(config=topic_config(topic))


def test_a_hostile_like_value_costs_linear_time() -> None:
    """A pattern a backtracking regex would take hours over, against a 200 KB message value:
    the send (which routes the message) is acknowledged promptly and nothing matches."""
    rule = sql_rule("r", "v LIKE '%a%a%a%a%a%b'")
    config = topic_config(
        topic_entry("t", subscription_entry("s", rule), subscription_entry("all"))
    )
    with (
        start_in_background(config=config) as emu,
        ServiceBusClient.from_connection_string(emu.connection_string) as client,
    ):
        with client.get_topic_sender("t") as sender:
            started = time.monotonic()
            sender.send_messages(
                ServiceBusMessage("x", application_properties={"v": "a" * 200_000})
            )
            assert time.monotonic() - started < 5
        with client.get_subscription_receiver("t", "s") as receiver:
            assert receiver.peek_messages(5, sequence_number=1) == []
        with client.get_subscription_receiver("t", "all") as receiver:
            assert len(receiver.peek_messages(5, sequence_number=1)) == 1
