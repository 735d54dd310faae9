"""The operators' rules for dead letters and keys: which ones a command means, and when
resubmitting or evicting would do harm."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from exactly_once.records import Record, Stamp
from orders.domain.dead_letters import (
    DeadLetter,
    Selection,
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
