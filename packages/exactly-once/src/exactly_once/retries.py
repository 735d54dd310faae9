"""Retries of a message that failed for now, in place: a `Backoff` run by a `Retrier` inside the
lock's renewal horizon (`LockRenewal`), the attempts of one delivery (`current_delivery`,
`delivery_owner`), and what counts as "for now" (`is_transient`, `Transient`). Retries later,
by a scheduled copy of the message, are `exactly_once.delayed_retries` (it needs the Service
Bus SDK; this module does not).

For a host of your own that composes these itself; `exactly_once(...)` and `run_worker` use
them for you (`ConsumerOptions(backoff=..., delayed_retries=..., lock_renewal=...)`).
"""

from __future__ import annotations

from exactly_once._attempts import current_delivery, delivery_owner, one_delivery
from exactly_once._backoff import Backoff, Retrier, Retry
from exactly_once._budgets import FUNCTIONS_LOCK_RENEWAL, LockRenewal
from exactly_once._transient import Transient, is_transient

__all__ = [
    "FUNCTIONS_LOCK_RENEWAL",
    "Backoff",
    "LockRenewal",
    "Retrier",
    "Retry",
    "Transient",
    "current_delivery",
    "delivery_owner",
    "is_transient",
    "one_delivery",
]
