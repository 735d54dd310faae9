"""What the fan-out consumers keep: billing's two-phase records and their downstream keys.

Plain data and rules; how they are stored (ids, fields, the inbox container shared with
shipping's records) is the Cosmos adapter's (`adapters/cosmos_layout.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

SHIPPING = "shipping"
BILLING = "billing"
REFUND = "refund"


class BillingStatus(StrEnum):
    IN_PROGRESS = "inProgress"
    COMPLETED = "completed"
    # The provider refused for good and the message was dead-lettered; a resubmitted copy
    # takes the record over at once and asks again.
    REFUSED = "refused"


@dataclass(frozen=True)
class BillingRecord:
    """The billing consumer's two-phase record for one message: plain data. Its key is the
    one the store's layout names (`DocumentLayout.charge_record_id`); the store's version of
    it (ETag, write time) stays with the record store."""

    record_id: str
    order_id: str
    message_id: str
    status: BillingStatus
    owner: str
    lease_seconds: float
    amount: str
    currency: str
    payment_key: str  # the Idempotency-Key sent downstream: billing:<orderId>
    payment_id: str | None = None
    attempts: int = 1


# Billing's records are named by their event or order, which name the payload for good (an
# event is checked against its stored order): there is no request hash to compare.
NO_REQUEST_HASH = ""


def charge_claim(message_id: str, amount: str, currency: str) -> dict[str, str]:
    """What a charge's claim carries for whichever delivery finishes it (the core record's
    `data`): the `OrderAccepted` it came from, and what to charge."""
    return {"messageId": message_id, "amount": amount, "currency": currency}


def refund_claim(payment_id: str, amount: str, currency: str) -> dict[str, str]:
    """What a refund's claim carries: the charge paid back, in full."""
    return {"paymentId": payment_id, "amount": amount, "currency": currency}


def claim_field(data: object, name: str) -> str:
    """One text field of a claim's data; `ValueError` naming it when it is not there."""
    found = data.get(name) if isinstance(data, dict) else None
    if not isinstance(found, str):
        raise ValueError(f"the record's data holds no {name!r}")
    return found


def payment_key(order_id: str) -> str:
    """One charge per order, whichever message or worker asks: the key names the order.

    Providers take keys of printable ASCII (as our HTTP API does); an order id outside it is
    named by its SHA-256 instead, still one key per order.
    """
    return _downstream_key(BILLING, order_id)


def refund_key(order_id: str) -> str:
    """One refund per order, whoever asks (the cancel's event, or billing finding the order
    cancelled after its charge): `refund:<orderId>`."""
    return _downstream_key(REFUND, order_id)


def _downstream_key(prefix: str, order_id: str) -> str:
    if order_id.isascii() and order_id.isprintable():
        return f"{prefix}:{order_id}"
    return f"{prefix}:sha256:{hashlib.sha256(order_id.encode('utf-8')).hexdigest()}"


@dataclass(frozen=True)
class RefundRecord:
    """The two-phase record of an order's refund (one per order, its key named by the
    layout's `refund_record_id`), like billing's."""

    record_id: str
    order_id: str
    status: BillingStatus
    owner: str
    lease_seconds: float
    payment_id: str  # the charge paid back
    amount: str  # the full charged amount
    currency: str
    refund_key: str  # the Idempotency-Key sent downstream: refund:<orderId>
    refund_id: str | None = None
    attempts: int = 1
