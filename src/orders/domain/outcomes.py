"""What the consumer decided for one message: the outcome table of docs/how-it-works.md, as data."""

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
    # The order saga: shipping (or billing) found the order cancelled before its effect.
    SKIPPED_CANCELLED = "skipped_cancelled"
    # Shipping: the charge was refused for good (the order is `payment_failed`): no shipment.
    SKIPPED_PAYMENT_FAILED = "skipped_payment_failed"
    # Shipping: billing has not recorded the charge within the wait: abandoned, offered again.
    AWAITING_CHARGE = "awaiting_charge"
    # Billing's answer to a cancel of an order it never charged: nothing to pay back.
    NOTHING_TO_REFUND = "nothing_to_refund"
    REFUNDED = "refunded"  # billing paid a cancelled order's charge back
    IGNORED = "ignored"  # an event this consumer has nothing to do for (shipping: a cancel)
    # An effect's document exists without the record that guards it: dead-lettered, to look at.
    EFFECT_CONFLICT = "effect_conflict"
    # A record the store holds cannot be read (the core's CorruptRecordError): dead-lettered.
    CORRUPT_RECORD = "corrupt_record"
    # The store refused the message's write for good (a Cosmos 400 or 413): dead-lettered at once.
    STORE_REFUSED = "store_refused"


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
