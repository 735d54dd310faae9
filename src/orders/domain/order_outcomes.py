"""The outcomes only the orders app decides, beside the core's (`exactly_once.decisions.Outcome`).

A decision is the core's `Decision`; its outcome is the core's `Outcome` wherever the core has
a name for it (processed, duplicate, stale, mismatch, refused, the failures). These are what
the saga, billing, shipping and status updates decide that no other consumer would: the
outcome table of docs/how-it-works.md. None reuses a value of the core's (a test holds it).
"""

from __future__ import annotations

from enum import StrEnum


class OrderOutcome(StrEnum):
    # An event this consumer has nothing to do for (shipping: a cancel).
    IGNORED = "ignored"
    # Shipping: billing has not recorded the charge within the wait: abandoned, offered again.
    AWAITING_CHARGE = "awaiting_charge"
    # The order saga: shipping (or billing) found the order cancelled before its effect.
    SKIPPED_CANCELLED = "skipped_cancelled"
    # Shipping: the charge was refused for good (the order is `payment_failed`): no shipment.
    SKIPPED_PAYMENT_FAILED = "skipped_payment_failed"
    # Billing's answer to a cancel of an order it never charged: nothing to pay back.
    NOTHING_TO_REFUND = "nothing_to_refund"
    REFUNDED = "refunded"  # billing paid a cancelled order's charge back
    # A status update not reachable from the stored status: dead-lettered.
    ILLEGAL_TRANSITION = "illegal_transition"
