"""The payment provider, as the billing consumer needs it."""

from __future__ import annotations

from typing import Protocol

from orders.domain.payments import Charge, ChargeRequest


class PaymentGateway(Protocol):
    async def charge(self, request: ChargeRequest) -> Charge:
        """Charge once per idempotency key: the same key and amount return the same charge.

        Raises `PaymentRefusedError` when the provider refuses for good (e.g. the key reused
        with another amount), `PaymentUnavailableError` when a retry may succeed.
        """
        ...

    async def charges_for(self, order_id: str) -> list[Charge]: ...
