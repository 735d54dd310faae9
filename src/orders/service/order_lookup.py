"""What GET /api/orders/{orderId} answers: the stored order, "accepted" while queued, or unknown."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orders.domain.documents import LINE_DOCUMENT_TYPE, ORDER_DOCUMENT_TYPE
from orders.domain.idempotency import ORDER_STATUS_ACCEPTED, order_location
from orders.service.ports import IdempotencyStore, OrderReader


class OrderState(StrEnum):
    STORED = "stored"
    ACCEPTED = "accepted"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class OrderLookupResult:
    state: OrderState
    body: dict[str, Any] | None = None


def order_view(documents: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The public view of a stored order: amounts stay decimal strings, lines in order."""
    order = next((d for d in documents if d.get("type") == ORDER_DOCUMENT_TYPE), None)
    if order is None:
        return None
    lines = sorted(
        (d for d in documents if d.get("type") == LINE_DOCUMENT_TYPE),
        key=lambda line: int(line["lineNumber"]),
    )
    return {
        "orderId": order["orderId"],
        "status": order["status"],
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


class OrderLookup:
    def __init__(self, reader: OrderReader, idempotency_store: IdempotencyStore) -> None:
        self._reader = reader
        self._idempotency_store = idempotency_store

    async def find(self, scope: str, order_id: str) -> OrderLookupResult:
        view = order_view(await self._reader.read_order_documents(order_id))
        # A stored order is shown to every authorised caller (function key or Entra ID): the
        # orders container holds no owner. Scope it here if your callers must not see others'.
        if view is not None:
            return OrderLookupResult(OrderState.STORED, view)
        # Only the caller that submitted it learns that an unprocessed order exists.
        if await self._idempotency_store.find_order(scope, order_id) is not None:
            return OrderLookupResult(
                OrderState.ACCEPTED,
                {
                    "orderId": order_id,
                    "status": ORDER_STATUS_ACCEPTED,
                    "location": order_location(order_id),
                },
            )
        return OrderLookupResult(OrderState.UNKNOWN)
