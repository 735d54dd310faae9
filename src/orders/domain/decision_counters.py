"""Live counters from the workers' decision journals: what each decision counts as, tallied in
totals and in fixed time buckets for a chart. Journal lines are untrusted input (a file anyone
on the machine may write): each is parsed totally and bounded, and a bad one is skipped."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orders.domain.outcomes import Outcome, Settlement

# One counter per decision kind, named as the operator reads it; every kind the consumers
# decide is here (a test holds it to `Outcome`), so the counts add up to the decision log.
_BY_OUTCOME = {
    **{outcome.value: outcome.value for outcome in Outcome},
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


@dataclass
class DecisionCounters:
    """Totals since the journals began, and per-bucket counts over the last `MAX_BUCKETS`."""

    totals: dict[str, int] = field(default_factory=_zero)
    buckets: dict[int, dict[str, int]] = field(default_factory=dict)
    # The same totals per consumer (orders, billing, shipping, status): a sum over consumers
    # that decide different things means little on its own.
    by_consumer: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped_lines: int = 0

    def add_line(self, line: bytes, consumer: str = DEFAULT_CONSUMER) -> None:
        entry = parse_journal_line(line)
        at = entry.get("at") if entry is not None else None
        if entry is None or not isinstance(at, int | float) or not math.isfinite(at) or at < 0:
            self.skipped_lines += 1
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

    def to_json(self, now: float) -> dict[str, Any]:
        """Totals, and one point per bucket up to `now` (empty buckets as zeros)."""
        last = int(now // BUCKET_SECONDS) * BUCKET_SECONDS
        starts = [last - BUCKET_SECONDS * index for index in reversed(range(MAX_BUCKETS))]
        return {
            "totals": dict(self.totals),
            "byConsumer": {name: dict(counts) for name, counts in sorted(self.by_consumer.items())},
            "bucketSeconds": BUCKET_SECONDS,
            "series": [{"at": start, **self.buckets.get(start, _zero())} for start in starts],
            "skippedLines": self.skipped_lines,
        }
