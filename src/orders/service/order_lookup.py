"""What GET /api/orders/{orderId} answers: stored, accepted (queued), rejected, or unknown."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orders.domain.documents import LINE_DOCUMENT_TYPE, ORDER_DOCUMENT_TYPE
from orders.domain.rejections import FiledRejection, rejection_view
from orders.domain.saga import Fulfilment
from orders.domain.status import (
    PRODUCER_VERSIONS,
    STATUS_DOCUMENT_TYPE,
    OrderStatus,
)
from orders.service.ports import IdempotencyStore, OrderReader, OrderViewLayout


class OrderState(StrEnum):
    STORED = "stored"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class OrderLookupResult:
    state: OrderState
    body: dict[str, Any] | None = None


def order_view(documents: list[dict[str, Any]], layout: OrderViewLayout) -> dict[str, Any] | None:
    """The public view of a stored order: amounts stay decimal strings, lines in order."""
    order = next((d for d in documents if d.get("type") == ORDER_DOCUMENT_TYPE), None)
    saga_order = layout.saga_order(order)
    if order is None or saga_order is None:
        return None
    lines = sorted(
        (d for d in documents if d.get("type") == LINE_DOCUMENT_TYPE),
        key=lambda line: int(line["lineNumber"]),
    )
    status = layout.stored_status(
        next((d for d in documents if d.get("type") == STATUS_DOCUMENT_TYPE), None)
    )
    shown, version = status.status, status.version
    cancelled = PRODUCER_VERSIONS[OrderStatus.CANCELLED]
    if saga_order.fulfilment is Fulfilment.CANCELLED and version < cancelled:
        # The cancel is decided on the order document; its status update may still be queued.
        shown, version = OrderStatus.CANCELLED, cancelled
    return {
        "orderId": order["orderId"],
        "status": shown.value,
        "statusVersion": version,
        "statusHistory": list(status.history),
        "customerId": order["customerId"],
        "currency": order["currency"],
        "totalAmount": order["totalAmount"],
        "totalQuantity": order["totalQuantity"],
        "processedAt": order["processedAt"],
        "lines": [
            {
                "lineNumber": line["lineNumber"],
                "sku": line["sku"],
                "quantity": line["quantity"],
                "unitPrice": line["unitPrice"],
                "lineTotal": line["lineTotal"],
            }
            for line in lines
        ],
    }


def latest_rejection(
    documents: list[dict[str, Any]], layout: OrderViewLayout, request_hash: str | None = None
) -> FiledRejection | None:
    """The newest rejection filed for the order (for one payload when `request_hash` is set)."""
    filed = (layout.filed_rejection(document) for document in documents)
    rejections = [
        rejection
        for rejection in filed
        if rejection is not None
        and (request_hash is None or rejection.request_hash == request_hash)
    ]
    return max(rejections, key=lambda rejection: rejection.rejected_at, default=None)


class OrderLookup:
    def __init__(
        self, reader: OrderReader, idempotency_store: IdempotencyStore, layout: OrderViewLayout
    ) -> None:
        self._reader = reader
        self._idempotency_store = idempotency_store
        self._layout = layout

    async def find(self, scope: str, order_id: str) -> OrderLookupResult:
        documents = await self._reader.read_order_documents(order_id)
        accepted = await self._idempotency_store.find_order(scope, order_id)
        stored = next((d for d in documents if d.get("type") == ORDER_DOCUMENT_TYPE), None)
        if accepted is not None:
            # The caller's own submission decides: rejected, stored as sent, or still queued
            # (an order stored from another payload is not the caller's order).
            rejection = latest_rejection(documents, self._layout, accepted.request_hash)
            if rejection is not None:
                return OrderLookupResult(OrderState.REJECTED, rejection_view(rejection))
            if stored is None or stored.get("requestHash") != accepted.request_hash:
                return OrderLookupResult(OrderState.ACCEPTED)
        # A stored order is shown to every authorised caller (function key or Entra ID): the
        # orders container holds no owner. Scope it here if your callers must not see others'.
        view = order_view(documents, self._layout)
        if view is not None:
            return OrderLookupResult(OrderState.STORED, view)
        # So is a rejection of a message sent straight to the queue (no key record).
        rejection = latest_rejection(documents, self._layout)
        if rejection is not None:
            return OrderLookupResult(OrderState.REJECTED, rejection_view(rejection))
        return OrderLookupResult(OrderState.UNKNOWN)
