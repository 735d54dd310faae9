"""What the consumer decided for one message: the outcome table of the README, as data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    PROCESSED = "processed"  # new order written
    DUPLICATE = "duplicate"  # same order seen before, same request hash: no write
    MISMATCH = "mismatch"  # same orderId, different payload: dead-lettered + alert
    REJECTED = "rejected"  # malformed / contract violation: dead-lettered
    TRANSIENT_FAILURE = "transient_failure"  # store unavailable: abandoned, redelivered
    UNEXPECTED_FAILURE = "unexpected_failure"  # bug or unknown error: abandoned, logged
    # Fan-out subscribers (billing): another delivery of the message holds a live lease on its
    # record after we waited for it; abandoned so the broker offers it again later.
    IN_PROGRESS_ELSEWHERE = "in_progress_elsewhere"
    DOWNSTREAM_REFUSED = "downstream_refused"  # the payment service refuses for good: DLQ + alert
    # Status updates (natural idempotency): an older or equal version changes nothing.
    STALE = "stale"
    ILLEGAL_TRANSITION = "illegal_transition"  # not reachable from the stored status: DLQ


class Settlement(StrEnum):
    COMPLETE = "complete"
    ABANDON = "abandon"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    settlement: Settlement
    order_id: str | None = None
    request_hash: str | None = None
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    error: str | None = None
