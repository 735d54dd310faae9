"""The Cosmos documents an order becomes: the order document, its outbox event, one per line.

All share the partition key `/orderId`, which is what lets them go in one transactional batch.
Amounts are stored as decimal strings: JSON numbers are doubles and money must stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from orders.domain.events import OrderAccepted, outbox_document
from orders.domain.model import OrderPlaced
from orders.exceptions import ConflictSignal

ORDER_DOCUMENT_TYPE = "order"
LINE_DOCUMENT_TYPE = "orderLine"
ORDER_STATUS_PLACED = "placed"


def decimal_text(value: Decimal) -> str:
    """Plain notation without trailing zeros (`1E+2` -> "100", `3.750` -> "3.75").

    Every spelling of one amount hashes alike, so it must be stored alike too: otherwise
    whichever copy of a message arrived first would decide how the amounts read.
    """
    if value.is_zero():
        return "0"  # not "-0": one amount, one spelling
    return format(value.normalize(), "f")


def line_document_id(order_id: str, line_number: int) -> str:
    return f"{order_id}:line:{line_number:03d}"


@dataclass(frozen=True)
class OrderRecord:
    """What the store tells us about an order that already exists."""

    order_id: str
    request_hash: str

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> OrderRecord:
        return cls(order_id=document["orderId"], request_hash=document["requestHash"])


class OrderAlreadyExistsError(ConflictSignal):
    """An order with this id is already stored; carries the existing record. It lives beside
    the record it carries, so `orders.exceptions` stays a leaf."""

    def __init__(self, existing: OrderRecord) -> None:
        super().__init__(f"order {existing.order_id!r} already exists")
        self.existing = existing


@dataclass(frozen=True)
class OrderWrite:
    """Everything one new order writes, order document first, in one transactional batch."""

    order_id: str
    request_hash: str
    documents: tuple[dict[str, Any], ...]


def build_order_write(
    order: OrderPlaced,
    *,
    request_hash: str,
    message_id: str,
    processed_at: datetime,
    trace_context: dict[str, str] | None = None,
) -> OrderWrite:
    total_amount = decimal_text(order.total_amount)
    order_document: dict[str, Any] = {
        "id": order.order_id,
        "orderId": order.order_id,
        "type": ORDER_DOCUMENT_TYPE,
        "customerId": order.customer_id,
        "currency": str(order.currency),
        "status": ORDER_STATUS_PLACED,
        "lineCount": len(order.lines),
        "totalQuantity": sum(line.quantity for line in order.lines),
        "totalAmount": total_amount,
        "requestHash": request_hash,
        "messageId": message_id,
        "processedAt": processed_at.isoformat(),
    }
    line_documents = [
        {
            "id": line_document_id(order.order_id, number),
            "orderId": order.order_id,
            "type": LINE_DOCUMENT_TYPE,
            "lineNumber": number,
            "sku": line.sku,
            "quantity": line.quantity,
            "unitPrice": decimal_text(line.unit_price),
            "lineTotal": decimal_text(line.line_total),
        }
        for number, line in enumerate(order.lines, start=1)
    ]
    return OrderWrite(
        order_id=order.order_id,
        request_hash=request_hash,
        # The outbox entry rides in the same batch: stored order <=> event to publish.
        documents=(
            order_document,
            outbox_document(
                OrderAccepted.of(order, total_amount=total_amount, accepted_at=processed_at),
                trace_context,
            ),
            *line_documents,
        ),
    )
