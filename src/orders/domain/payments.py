"""A charge asked of the payment service and the charge it made; a refund of a charge asked
of it and the refund it made.

The idempotency key travels with the request: the provider makes at most one charge per key,
which is what lets a caller that cannot tell whether its first attempt charged simply retry.
"""

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
    created_at: str  # as the provider wrote it (ISO 8601, UTC)

    def answers(self, request: ChargeRequest) -> bool:
        """Whether this is the charge `request` asked for (amounts compared as numbers)."""
        return (
            self.order_id == request.order_id
            and self.amount == request.amount
            and self.currency == request.currency
            and self.idempotency_key == request.idempotency_key
        )


@dataclass(frozen=True)
class RefundRequest:
    payment_id: str
    order_id: str  # the charged order; the provider answers with the payment's own
    amount: Decimal
    currency: str
    idempotency_key: str


@dataclass(frozen=True)
class Refund:
    refund_id: str
    payment_id: str
    order_id: str  # the refunded payment's order
    amount: Decimal
    currency: str
    idempotency_key: str
    created_at: str  # as the provider wrote it (ISO 8601, UTC)

    def answers(self, request: RefundRequest) -> bool:
        """Whether this is the refund `request` asked for (amounts compared as numbers)."""
        return (
            self.payment_id == request.payment_id
            and self.order_id == request.order_id
            and self.amount == request.amount
            and self.currency == request.currency
            and self.idempotency_key == request.idempotency_key
        )
