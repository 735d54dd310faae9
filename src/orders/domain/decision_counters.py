"""Live counters from the workers' decision journals: what each decision counts as, tallied in
totals and in fixed time buckets for a chart. Journal lines are untrusted input (a file anyone
on the machine may write): each is parsed totally and bounded, and a bad one is skipped."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exactly_once.decisions import Outcome, Settlement
from orders.domain.order_outcomes import OrderOutcome

# One counter per decision kind, named as the operator reads it; every kind the consumers
# decide is here (a test holds it to `Outcome` and `OrderOutcome`), so the counts add up to
# the decision log.
_BY_OUTCOME: dict[str, str] = {
    **{outcome.value: outcome.value for outcome in (*Outcome, *OrderOutcome)},
    Outcome.PROCESSED.value: "processed",
    Outcome.DUPLICATE.value: "duplicates",
    Outcome.MISMATCH.value: "mismatches",
    # Status updates older than the stored version: decided without a write.
    Outcome.STALE.value: "stale",
}
# A journal line naming an outcome this version does not know (a newer worker's): still a
# decision, counted here so the counts still add up.
UNKNOWN_OUTCOME = "unknown_outcome"
# Every decision; then one counter per kind (each decision adds to exactly one, so they sum to
# `decisions`); then how the deliveries were settled besides completing.
DECISIONS = "decisions"
SETTLEMENT_COUNTERS = ("dead_lettered", "abandoned")
COUNTERS = (DECISIONS, *_BY_OUTCOME.values(), UNKNOWN_OUTCOME, *SETTLEMENT_COUNTERS)
KIND_COUNTERS = (*_BY_OUTCOME.values(), UNKNOWN_OUTCOME)
# The orders queue's workers; fan-out and status consumers are named by their subscription.
DEFAULT_CONSUMER = "orders"
MAX_CONSUMERS = 16
BUCKET_SECONDS = 5
# Five minutes of history in the chart; older buckets are dropped (the totals keep counting).
MAX_BUCKETS = 60
MAX_LINE_BYTES = 4096
# Messages remembered as backing off (one entry per consumer and MessageId, the latest wait):
# journal lines are untrusted, so the list is bounded and the soonest retry makes room.
MAX_BACKING_OFF = 200
MAX_SHOWN_TEXT = 200


def kind_counter(outcome: str) -> str:
    """The one counter of a decision's kind (its outcome's)."""
    return _BY_OUTCOME.get(outcome, UNKNOWN_OUTCOME)


def parse_journal_line(line: bytes) -> dict[str, Any] | None:
    """One journal entry, or None for anything that is not a JSON object of bounded size."""
    if not line or len(line) > MAX_LINE_BYTES:
        return None
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return entry if isinstance(entry, dict) else None


def counted_as(entry: Mapping[str, Any]) -> list[str]:
    """The counters one decision adds to: `decisions`, its kind's, and dead-lettered or
    abandoned when it was."""
    names = [DECISIONS, kind_counter(str(entry.get("outcome")))]
    if entry.get("settlement") == Settlement.DEAD_LETTER.value:
        names.append("dead_lettered")
    elif entry.get("settlement") == Settlement.ABANDON.value:
        names.append("abandoned")
    return names


def _zero() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


@dataclass(frozen=True)
class BackingOff:
    """A message a worker holds while it waits out a backoff (a `backoff` journal line)."""

    consumer: str
    message_id: str
    attempt: int
    outcome: str
    retry_at: float

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "messageId": self.message_id,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "retryInSeconds": round(max(self.retry_at - now, 0.0), 1),
        }


def backing_off_from(entry: Mapping[str, Any], consumer: str) -> BackingOff | None:
    """The wait a `backoff` journal line announces, or None when it is not one (or is bad)."""
    backoff = entry.get("backoff")
    if not isinstance(backoff, dict):
        return None
    message_id, attempt = backoff.get("message_id"), backoff.get("attempt")
    outcome, retry_at = backoff.get("outcome"), backoff.get("retry_at")
    if not isinstance(message_id, str) or not isinstance(outcome, str):
        return None
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        return None
    if not isinstance(retry_at, int | float) or not math.isfinite(retry_at):
        return None
    return BackingOff(
        consumer, message_id[:MAX_SHOWN_TEXT], attempt, outcome[:MAX_SHOWN_TEXT], retry_at
    )


@dataclass
class DecisionCounters:
    """Totals since the journals began, and per-bucket counts over the last `MAX_BUCKETS`."""

    totals: dict[str, int] = field(default_factory=_zero)
    buckets: dict[int, dict[str, int]] = field(default_factory=dict)
    # The same totals per consumer (orders, billing, shipping, status): a sum over consumers
    # that decide different things means little on its own.
    by_consumer: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped_lines: int = 0
    # The latest wait of each message backing off, and how many waits the journals announced.
    backing_off: dict[tuple[str, str], BackingOff] = field(default_factory=dict)
    backoffs: int = 0

    def add_line(self, line: bytes, consumer: str = DEFAULT_CONSUMER) -> None:
        entry = parse_journal_line(line)
        at = entry.get("at") if entry is not None else None
        if entry is None or not isinstance(at, int | float) or not math.isfinite(at) or at < 0:
            self.skipped_lines += 1
            return
        if "backoff" in entry:
            self._add_backoff(entry, consumer)
            return
        names = counted_as(entry)
        bucket = self.buckets.setdefault(int(at // BUCKET_SECONDS) * BUCKET_SECONDS, _zero())
        if consumer not in self.by_consumer and len(self.by_consumer) >= MAX_CONSUMERS:
            consumer = "other"  # journal names are untrusted: bound what they can add
        per_consumer = self.by_consumer.setdefault(consumer, _zero())
        for name in names:
            self.totals[name] += 1
            bucket[name] += 1
            per_consumer[name] += 1
        while len(self.buckets) > MAX_BUCKETS:
            del self.buckets[min(self.buckets)]

    def _add_backoff(self, entry: Mapping[str, Any], consumer: str) -> None:
        waiting = backing_off_from(entry, consumer[:40])
        if waiting is None:
            self.skipped_lines += 1
            return
        self.backoffs += 1
        key = (waiting.consumer, waiting.message_id)
        if key not in self.backing_off and len(self.backing_off) >= MAX_BACKING_OFF:
            soonest = min(self.backing_off.values(), key=lambda known: known.retry_at)
            del self.backing_off[(soonest.consumer, soonest.message_id)]
        self.backing_off[key] = waiting

    def waiting_out_a_backoff(self, now: float) -> list[BackingOff]:
        """The messages whose latest wait has not ended at `now`, the soonest retry first."""
        waiting = [known for known in self.backing_off.values() if known.retry_at > now]
        return sorted(waiting, key=lambda known: (known.retry_at, known.message_id))

    def to_json(self, now: float) -> dict[str, Any]:
        """Totals, one point per bucket up to `now` (empty buckets as zeros), and the messages
        waiting out a backoff at `now`."""
        last = int(now // BUCKET_SECONDS) * BUCKET_SECONDS
        starts = [last - BUCKET_SECONDS * index for index in reversed(range(MAX_BUCKETS))]
        return {
            "totals": dict(self.totals),
            "byConsumer": {name: dict(counts) for name, counts in sorted(self.by_consumer.items())},
            "bucketSeconds": BUCKET_SECONDS,
            "series": [{"at": start, **self.buckets.get(start, _zero())} for start in starts],
            "skippedLines": self.skipped_lines,
            "backoffs": self.backoffs,
            "backingOff": [known.to_json(now) for known in self.waiting_out_a_backoff(now)],
        }
