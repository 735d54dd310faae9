"""What the fan-out consumers store: consumer-scoped inbox records and their effects.

All of it lives in the inbox container, partitioned by `/orderId` like the orders container, so
an inbox record and its effect share a partition and can be one transactional batch. Record ids
are scoped by consumer (`shipping:<messageId>`, `billing:<messageId>`): one consumer's record
never blocks another's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from orders.domain.events import OrderAccepted

INBOX_DOCUMENT_TYPE = "inbox"
SHIPMENT_DOCUMENT_TYPE = "shipment"
BILLING_DOCUMENT_TYPE = "billing"
REFUND_DOCUMENT_TYPE = "refund"
SHIPPING = "shipping"
BILLING = "billing"
REFUND = "refund"


def inbox_record_id(consumer: str, message_id: str) -> str:
    return f"{consumer}:{message_id}"


def shipment_document_id(order_id: str) -> str:
    return f"{order_id}:shipment"


def shipping_documents(
    event: OrderAccepted, *, message_id: str, processed_at: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inbox record and the shipment: written together or not at all."""
    at = processed_at.isoformat()
    inbox = {
        "id": inbox_record_id(SHIPPING, message_id),
        "orderId": event.order_id,
        "type": INBOX_DOCUMENT_TYPE,
        "consumer": SHIPPING,
        "messageId": message_id,
        "processedAt": at,
    }
    shipment = {
        "id": shipment_document_id(event.order_id),
        "orderId": event.order_id,
        "type": SHIPMENT_DOCUMENT_TYPE,
        "customerId": event.customer_id,
        "lineCount": event.line_count,
        "status": "requested",
        "requestedAt": at,
    }
    return inbox, shipment


class BillingStatus(StrEnum):
    IN_PROGRESS = "inProgress"
    COMPLETED = "completed"
    # The provider refused for good and the message was dead-lettered; a resubmitted copy
    # takes the record over at once and asks again.
    REFUSED = "refused"


@dataclass(frozen=True)
class BillingRecord:
    """The billing consumer's two-phase record for one message (key `billing:<messageId>`):
    plain data; the store's version of it (ETag, write time) stays with the record store."""

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

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.record_id,
            "orderId": self.order_id,
            "type": BILLING_DOCUMENT_TYPE,
            "consumer": BILLING,
            "messageId": self.message_id,
            "status": self.status.value,
            "owner": self.owner,
            "leaseSeconds": self.lease_seconds,
            "amount": self.amount,
            "currency": self.currency,
            "paymentKey": self.payment_key,
            "paymentId": self.payment_id,
            "attempts": self.attempts,
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> BillingRecord:
        return cls(
            record_id=document["id"],
            order_id=document["orderId"],
            message_id=document["messageId"],
            status=BillingStatus(document["status"]),
            owner=document["owner"],
            lease_seconds=float(document["leaseSeconds"]),
            amount=document["amount"],
            currency=document["currency"],
            payment_key=document["paymentKey"],
            payment_id=document.get("paymentId"),
            attempts=int(document.get("attempts", 1)),
        )


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


def refund_record_id(order_id: str) -> str:
    """One refund record per order (not per message: two paths may ask for the refund)."""
    return f"{REFUND}:{order_id}"


@dataclass(frozen=True)
class RefundRecord:
    """The two-phase record of an order's refund (id `refund:<orderId>`), like billing's."""

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

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.record_id,
            "orderId": self.order_id,
            "type": REFUND_DOCUMENT_TYPE,
            "consumer": BILLING,
            "status": self.status.value,
            "owner": self.owner,
            "leaseSeconds": self.lease_seconds,
            "paymentId": self.payment_id,
            "amount": self.amount,
            "currency": self.currency,
            "refundKey": self.refund_key,
            "refundId": self.refund_id,
            "attempts": self.attempts,
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> RefundRecord:
        return cls(
            record_id=document["id"],
            order_id=document["orderId"],
            status=BillingStatus(document["status"]),
            owner=document["owner"],
            lease_seconds=float(document["leaseSeconds"]),
            payment_id=document["paymentId"],
            amount=document["amount"],
            currency=document["currency"],
            refund_key=document["refundKey"],
            refund_id=document.get("refundId"),
            attempts=int(document.get("attempts", 1)),
        )
