"""A charge as the billing consumer asks for it and as the payment provider answers."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class ChargeRequest:
    order_id: str
    amount: Decimal
    currency: str
    idempotency_key: str


@dataclass(frozen=True)
class Charge:
    payment_id: str
    order_id: str
    amount: Decimal
    currency: str
    idempotency_key: str
    created_at: str
