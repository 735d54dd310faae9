"""The operators' rules for dead letters and keys: which ones a command means, and when
resubmitting or evicting would do harm."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from exactly_once._records import Record, Stamp
from orders.domain.dead_letters import (
    DeadLetter,
    Selection,
    delivery_count_meaning,
    names_order,
    plan_for,
    resubmit_refusal,
    resubmitted_properties,
)
from orders.domain.idempotency import RecordStatus, eviction_refusal, key_claim

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=10)


def dead(
    reason: str = "InvalidJson", *, age: timedelta = timedelta(hours=1), **props: object
) -> DeadLetter:
    return DeadLetter(
        sequence_number=7,
        message_id="o-1",
        reason=reason,
        description="why",
        delivery_count=1,
        enqueued_at=NOW - age,
        body=b"{oops\n" + b"x" * 200,
        application_properties=dict(props),
    )


def test_a_selection_must_say_what_it_means() -> None:
    with pytest.raises(ValueError, match="say which dead letters"):
        Selection()
    assert Selection(everything=True).matches(dead())
    assert Selection(frozenset({7})).matches(dead()) and not Selection(frozenset({8})).matches(
        dead()
    )
    assert Selection(reason="InvalidJson").matches(dead())
    assert not Selection(frozenset({7}), reason="SchemaViolation").matches(dead())


def test_a_reused_order_id_is_resubmitted_only_with_force() -> None:
    mismatch = dead("RequestHashMismatch")

    refusal = resubmit_refusal(mismatch, force=False, now=NOW, duplicate_window=WINDOW)

    assert refusal is not None and "RequestHashMismatch" in refusal
    assert resubmit_refusal(mismatch, force=True, now=NOW, duplicate_window=WINDOW) is None


def test_inside_the_duplicate_window_nothing_is_resubmitted_even_with_force() -> None:
    fresh = dead(age=timedelta(minutes=9))

    refusal = resubmit_refusal(fresh, force=True, now=NOW, duplicate_window=WINDOW)

    assert refusal is not None and "resubmit in 60 s" in refusal
    assert resubmit_refusal(dead(age=WINDOW), force=False, now=NOW, duplicate_window=WINDOW) is None


def test_a_resubmitted_copy_keeps_its_properties_and_says_who_when_and_how_often() -> None:
    original = dead(DeadLetterReason="InvalidJson", DeadLetterErrorDescription="x", k="v",
                    ResubmitCount="2")  # fmt: skip

    properties = resubmitted_properties(original, by="ops@host", at=NOW)

    assert properties == {
        "k": "v",
        "ResubmitCount": 3,
        "ResubmittedAt": NOW.isoformat(),
        "ResubmittedBy": "ops@host",
    }
    assert resubmitted_properties(dead(ResubmitCount="junk"), by="a", at=NOW)["ResubmitCount"] == 1


def test_previews_escape_untrusted_bodies_and_say_when_they_are_cut() -> None:
    assert dead().preview.startswith("{oops\\n") and dead().preview.endswith("...")


def record(status: RecordStatus, written_at_s: int) -> Record:
    """A key's record written at `written_at_s` (database time) with a 30 s lease."""
    claimed = key_claim("app:t", "k", "o-1", "h", owner="http-1", lease_seconds=30, ttl_seconds=60)
    return replace(claimed, status=status, stamp=Stamp('"e"', written_at_s))


def test_a_live_claim_is_evicted_only_with_force() -> None:
    # Leases are judged by the database's clock: written at 99 s, a 30 s lease runs to 130 s.
    live = record(RecordStatus.IN_PROGRESS, written_at_s=99)

    assert "in progress" in (eviction_refusal(live, 100_000, force=False) or "")
    assert eviction_refusal(live, 100_000, force=True) is None
    assert eviction_refusal(record(RecordStatus.IN_PROGRESS, 59), 100_000, force=False) is None
    assert eviction_refusal(record(RecordStatus.COMPLETED, 99), 100_000, force=False) is None


def test_a_selection_of_sequence_numbers_is_finished_once_each_was_handled() -> None:
    named = Selection(frozenset({3, 7}))

    assert not named.all_handled([3], {})
    assert named.all_handled([3], {7: "refused"})
    # A reason or --all can match more at any time: only an empty receive ends them.
    assert not Selection(frozenset({3}), reason="InvalidJson").all_handled([3], {})
    assert not Selection(everything=True).all_handled([3, 7], {})


def queue_of(*reasons: str) -> list[DeadLetter]:
    return [replace(dead(reason), sequence_number=10 + i) for i, reason in enumerate(reasons)]


def test_a_plan_passes_over_only_what_lies_before_its_last_target() -> None:
    peeked = queue_of("InvalidJson", "SchemaViolation", "InvalidJson", "SchemaViolation")

    first = plan_for(Selection(frozenset({10})), peeked)
    third = plan_for(Selection(frozenset({12})), peeked)
    by_reason = plan_for(Selection(reason="InvalidJson"), peeked)
    everything = plan_for(Selection(everything=True), peeked)
    missing = plan_for(Selection(frozenset({99})), peeked)

    assert (first.targets, first.passed_over, first.reach) == (frozenset({10}), (), 1)
    assert (third.targets, third.passed_over, third.reach) == (frozenset({12}), (10, 11), 3)
    assert (by_reason.targets, by_reason.passed_over, by_reason.reach) == (
        frozenset({10, 12}),
        (11,),
        3,
    )
    assert (everything.passed_over, everything.reach) == ((), 4)
    assert (missing.targets, missing.passed_over, missing.reach) == (frozenset(), (), 0)


def test_a_refused_dead_letter_is_reported_and_passed_over_only_before_a_target() -> None:
    peeked = queue_of("RequestHashMismatch", "InvalidJson", "RequestHashMismatch")

    def refusal(letter: DeadLetter) -> str | None:
        return resubmit_refusal(letter, force=False, now=NOW, duplicate_window=WINDOW)

    plan = plan_for(Selection(everything=True), peeked, refusal)

    assert plan.targets == {11} and set(plan.refused) == {10, 12}
    assert (plan.passed_over, plan.reach) == ((10,), 2)  # 12 lies after the target: untouched


def test_a_delivery_count_is_explained_by_what_is_known_only() -> None:
    """An operator's command that passed over a dead letter raised its count too: the text
    never says the consumer abandoned it that often."""
    assert "first delivery" in delivery_count_meaning(0)
    assert "never passed over" in delivery_count_meaning(0)
    two = delivery_count_meaning(2)
    assert "passed over" in two and "abandoned" not in two


@pytest.mark.parametrize(
    ("message_id", "body", "named"),
    [
        ("o-1", b"not json", True),  # the order itself, whatever its body
        ("o-1:status:3", b"", True),  # one of its status updates
        ("drawn-id", b'{"orderId": "o-1", "type": "OrderAccepted"}', True),  # an event
        ("o-12", b'{"orderId": "o-12"}', False),  # another order that starts alike
        ("o-1x:status:2", b"", False),
        ("drawn-id", b'{"orderId": "o-2"}', False),
        ("drawn-id", b'["o-1"]', False),  # not an object
        ("drawn-id", b"\xff\xfe", False),  # not UTF-8
        (None, b'{"orderId": "o-1"}', True),
    ],
)
def test_a_dead_letter_names_an_order_by_its_message_id_or_its_bodys_order_id(
    message_id: str | None, body: bytes, named: bool
) -> None:
    dead = DeadLetter(1, message_id, "R", "d", 0, None, body)
    assert names_order(dead, "o-1") is named
