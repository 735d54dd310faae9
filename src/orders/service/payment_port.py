"""The port to the payment service: one charge and one refund per idempotency key, and the
audit of both."""

from __future__ import annotations

from typing import Protocol

from orders.domain.payments import Charge, ChargeRequest, Refund, RefundRequest


class PaymentGateway(Protocol):
    async def charge(self, request: ChargeRequest) -> Charge:
        """Charge once per `request.idempotency_key`: a repeat with the same key and the same
        order, amount and currency returns the first charge, never a second one.

        Raises `PaymentRefusedError` (with the provider's reason) when the request can never
        succeed, such as the key reused for a different charge; `PaymentUnavailableError` when
        the outcome is unknown or the provider is failing (retry with the same key).
        """
        ...

    async def charges_for(self, order_id: str) -> list[Charge]:
        """Every charge the provider holds for this order, oldest first (for audits).

        Raises `PaymentUnavailableError` or `PaymentRefusedError` as `charge` does.
        """
        ...

    async def refund(self, request: RefundRequest) -> Refund:
        """Refund once per `request.idempotency_key`: a repeat with the same key and the same
        payment, amount and currency returns the first refund, never a second one (even once
        the payment is fully refunded).

        Raises `PaymentRefusedError` when the request can never succeed: `unknown-payment`,
        `already-refunded` (other keys refunded all of it), `refund-exceeds-payment`,
        `currency-mismatch`, `idempotency-key-reused`, `invalid-idempotency-key`,
        `invalid-request` (such as an amount of 0), `refund-mismatch` (the provider answered
        with another refund, or the payment belongs to another order than `request.order_id`);
        `PaymentUnavailableError` when the outcome is unknown or the provider is failing (retry
        with the same key).
        """
        ...

    async def refunds_for(self, order_id: str) -> list[Refund]:
        """Every refund the provider holds for this order's payments, oldest first.

        Raises `PaymentUnavailableError` or `PaymentRefusedError` as `charges_for` does.
        """
        ...
