"""The decisions of delayed retries (`exactly_once.delayed_retries`), without a broker: what a
message's properties say (total over hostile values), what a spent delivery becomes, and how
`settle` and a settler without a scheduler carry it out. Over the emulator through the SDK:
tests/core/test_delayed_retries.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fakes import FakeMessageActions, RecordingSettler
from poison_corpus import core_hostile_retry_properties
from sdk_messages import received_message

from exactly_once import Decision, DelayedRetries, Outcome
from exactly_once._attempts import one_delivery
from exactly_once.decisions import DeadLetterReason, Settlement, settle
from exactly_once.delayed_retries import (
    MAX_MESSAGE_ID_CHARS,
    ORIGINAL_MESSAGE_ID_PROPERTY,
    RETRY_PROPERTY,
    SUBSCRIPTION_PROPERTY,
    Redelivery,
    copy_message_id,
    later,
    redelivery_of,
    subscription_filter,
)
from exactly_once.servicebus import MessageActionsSettler


def test_a_message_without_the_properties_is_an_original() -> None:
    assert redelivery_of({"tenant": "contoso"}, "m-1") == Redelivery("m-1", 0, None)


def test_a_copy_names_its_original_its_retry_and_its_subscription_as_the_sdk_hands_them() -> None:
    # The SDK hands AMQP strings over as UTF-8 bytes.
    properties = {
        ORIGINAL_MESSAGE_ID_PROPERTY: b"m-1",
        RETRY_PROPERTY: 2,
        SUBSCRIPTION_PROPERTY: b"billing",
    }
    found = redelivery_of(properties, "retry-2-abc")
    assert found == Redelivery("m-1", 2, "billing")
    assert isinstance(found, Redelivery)
    assert found.is_for("billing") and found.is_for(None) and not found.is_for("audit")


@pytest.mark.parametrize(
    "properties",
    [
        *[properties for _, properties in core_hostile_retry_properties()],
        # What the SDK cannot send, but a raw AMQP sender can.
        {ORIGINAL_MESSAGE_ID_PROPERTY: b"\xff\xfe", RETRY_PROPERTY: 1},
        {ORIGINAL_MESSAGE_ID_PROPERTY: "m-1", RETRY_PROPERTY: 2**80},
        {ORIGINAL_MESSAGE_ID_PROPERTY: ["m-1"], RETRY_PROPERTY: {"n": 1}},
    ],
    ids=[name for name, _ in core_hostile_retry_properties()] + ["not-utf8", "huge", "nested"],
)
def test_malformed_properties_are_a_dead_letter_with_a_reason_of_their_own(
    properties: dict[str, Any],
) -> None:
    found = redelivery_of(properties, "m-2")
    assert isinstance(found, Decision)
    assert found.settlement is Settlement.DEAD_LETTER and found.outcome is Outcome.REJECTED
    assert found.dead_letter_reason == DeadLetterReason.INVALID_RETRY_PROPERTIES
    assert "ExactlyOnce" in (found.dead_letter_description or "")


def test_a_copys_message_id_is_deterministic_bounded_and_its_own() -> None:
    longest = "m" * MAX_MESSAGE_ID_CHARS
    assert copy_message_id(longest, 3) == copy_message_id(longest, 3)
    assert len(copy_message_id(longest, 100)) <= MAX_MESSAGE_ID_CHARS
    ids = {copy_message_id(original, retry) for original in ("a", "b") for retry in (1, 2)}
    assert len(ids) == 4 and not ids & {"a", "b"}


def test_the_policy_is_bounded_and_its_delays_grow() -> None:
    policy = DelayedRetries()
    assert (policy.retries, [policy.delay(n) for n in (1, 2, 3)]) == (3, [60.0, 120.0, 180.0])
    for wrong in ({"retries": -1}, {"retries": 101}, {"delay_seconds": 0}):
        with pytest.raises(ValueError):
            DelayedRetries(**wrong)


def transient() -> Decision:
    return Decision.abandon(Outcome.TRANSIENT_FAILURE, "ConnectionError: down").about("k", "h")


def test_a_spent_delivery_is_retried_later_while_retries_last_then_dead_lettered() -> None:
    policy = DelayedRetries(retries=3, delay_seconds=10)
    first = later(transient(), Redelivery("m-1"), policy, attempts=4)
    assert first == Decision.retry_later(
        Outcome.TRANSIENT_FAILURE, "ConnectionError: down", retry=1, delay_seconds=10
    )
    assert isinstance(first, Decision) and (first.key, first.request_hash) == ("k", "h")
    last = later(transient(), Redelivery("m-1", 3), policy, attempts=5)
    assert last == Decision.dead_letter(
        Outcome.TRANSIENT_FAILURE,
        DeadLetterReason.RETRIES_EXHAUSTED,
        "transient_failure after 3 delayed retries and 5 attempt(s) in the last delivery: "
        "ConnectionError: down",
    )


@pytest.mark.parametrize(
    ("decision", "policy"),
    [
        (transient(), None),
        (transient(), DelayedRetries(retries=0)),
        (Decision.complete(), DelayedRetries()),
        (Decision.dead_letter(Outcome.REFUSED, "DownstreamRefused", "no"), DelayedRetries()),
        # An application's own abandon (shipping waiting for a charge) is its own business.
        (Decision(Outcome.REJECTED, Settlement.ABANDON, error="its own"), DelayedRetries()),
    ],
)
def test_what_is_not_a_spent_failure_is_left_as_it_is(
    decision: Decision, policy: DelayedRetries | None
) -> None:
    assert later(decision, Redelivery("m-1"), policy, attempts=1) is decision


def test_subscription_filter_quotes_the_name() -> None:
    assert subscription_filter("o'neil") == (
        "ExactlyOnceSubscription IS NULL OR ExactlyOnceSubscription = 'o''neil'"
    )


async def test_settle_hands_a_delayed_retry_to_the_settler_with_its_number_and_delay() -> None:
    settler = RecordingSettler()
    decision = Decision.retry_later(Outcome.TRANSIENT_FAILURE, "down", retry=2, delay_seconds=30)
    await settle(decision, settler)
    assert settler.calls == [("retry_later", {"retry": "2", "delay": "30"})]
    with pytest.raises(ValueError, match="retry"):
        await settle(Decision(Outcome.TRANSIENT_FAILURE, Settlement.RETRY_LATER), settler)


async def test_without_a_scheduler_the_functions_settler_abandons() -> None:
    actions = FakeMessageActions()
    message = received_message("m-1", data=b"{}")
    await MessageActionsSettler(actions, message).retry_later(retry=1, delay_seconds=60)
    assert [call for call, _, _ in actions.calls] == ["abandon"]


def test_the_delayed_retry_lines_name_the_consumer_and_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = DelayedRetries(retries=1, delay_seconds=10)
    with caplog.at_level(logging.WARNING, "exactly_once"), one_delivery() as delivery:
        delivery.consumer = "billing"
        later(transient(), Redelivery("m-1"), policy, attempts=4)
        later(transient(), Redelivery("m-1", 1), policy, attempts=2)

    retried, exhausted = (record.getMessage() for record in caplog.records)
    assert retried == (
        "consumer=billing key=k message_id=m-1: transient_failure after 4 attempt(s), "
        'delayed retry 1 of 1 in 10 s: "ConnectionError: down"'
    )
    assert exhausted.startswith(
        'consumer=billing key=k message_id=m-1: "transient_failure after 1 delayed retries'
    )
