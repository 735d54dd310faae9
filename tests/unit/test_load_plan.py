"""The load plan: reproducible, with every kind of send meaning what the manifest says."""

from __future__ import annotations

from collections import Counter

import pytest

from orders.domain.load_plan import (
    LoadMix,
    Phase,
    SendKind,
    plan_from_json,
    plan_load,
    plan_to_json,
)
from orders.domain.messages import MessageRejected, parse_order_message


def test_same_seed_same_plan_and_manifest_round_trip() -> None:
    first = plan_load(200, LoadMix(), seed=3, run_id="r")

    assert first == plan_load(200, LoadMix(), seed=3, run_id="r")
    assert plan_from_json(plan_to_json(first, queue="orders")) == first
    assert first != plan_load(200, LoadMix(), seed=4, run_id="r")


def test_default_mix_has_about_thirty_percent_duplicates_of_each_kind() -> None:
    plan = plan_load(200, LoadMix(), seed=1, run_id="r")
    kinds = Counter(send.kind for send in plan.sends)

    assert kinds[SendKind.ORIGINAL] == 200
    assert kinds[SendKind.PRODUCER_RETRY] == 20
    assert kinds[SendKind.LATE_DUPLICATE] == 20
    assert kinds[SendKind.CONCURRENT_DUPLICATE] == 20
    assert kinds[SendKind.CONFLICT] == 6
    assert kinds[SendKind.POISON] == 8


def test_duplicates_repeat_their_original_and_go_in_the_right_phase() -> None:
    plan = plan_load(100, LoadMix(), seed=2, run_id="r")
    originals = {s.message_id: s for s in plan.sends if s.kind is SendKind.ORIGINAL}

    for send in plan.sends:
        if send.kind in (SendKind.PRODUCER_RETRY, SendKind.LATE_DUPLICATE):
            assert send.body == originals[send.message_id].body
        if send.kind is SendKind.PRODUCER_RETRY:
            assert send.phase is Phase.FIRST
        if send.kind in (SendKind.LATE_DUPLICATE, SendKind.CONFLICT):
            assert send.phase is Phase.AFTER_WINDOW
        if send.kind is SendKind.CONFLICT:
            assert send.request_hash != originals[send.message_id].request_hash
        if send.kind is SendKind.CONCURRENT_DUPLICATE:
            # Both copies are scheduled for the same instant, a window apart in sending.
            assert send.scheduled_together and originals[send.message_id].scheduled_together


def test_each_poison_message_is_rejected_with_the_reason_the_manifest_expects() -> None:
    plan = plan_load(100, LoadMix(poison=0.2), seed=5, run_id="r")
    poison = [s for s in plan.sends if s.kind is SendKind.POISON]

    assert {s.expected_reason for s in poison} == {
        "InvalidJson",
        "SchemaViolation",
        "MessageIdMismatch",
        "OrderTooLarge",
    }
    for send in poison:
        with pytest.raises(MessageRejected) as rejected:
            parse_order_message(send.body.encode(), send.message_id)
        assert rejected.value.reason == send.expected_reason


def test_fractions_outside_zero_to_one_are_refused() -> None:
    with pytest.raises(ValueError, match="late_duplicates"):
        LoadMix(late_duplicates=1.5)


def test_a_producer_retry_follows_its_original_at_once() -> None:
    plan = plan_load(100, LoadMix(), seed=4, run_id="r")

    for index, send in enumerate(plan.sends):
        if send.kind is SendKind.PRODUCER_RETRY:
            before = plan.sends[index - 1]
            assert (before.kind, before.message_id) == (SendKind.ORIGINAL, send.message_id)
