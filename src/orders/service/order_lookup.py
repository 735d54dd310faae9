"""What GET /api/orders/{orderId} answers: stored, accepted (queued), rejected, or unknown."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orders.domain.ownership import UnrecordedOwner, may_act
from orders.domain.rejections import FiledRejection, rejection_view
from orders.domain.saga import Fulfilment
from orders.domain.status import PRODUCER_VERSIONS, OrderStatus
from orders.service.ports import IdempotencyStore, OrderPartition, OrderReader, OrderViewLayout


class OrderState(StrEnum):
    STORED = "stored"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class OrderLookupResult:
    state: OrderState
    body: dict[str, Any] | None = None


# The version `payment_failed` is shown at in an order's history: `paid`'s, whose place it takes.
PAYMENT_FAILED_VERSION = PRODUCER_VERSIONS[OrderStatus.PAID]


def order_history(partition: OrderPartition) -> list[dict[str, object]]:
    """An order's one history, oldest first: what GET, `orders show` and the console's
    timeline all show. The status document's changes (each kept with its version and time,
    late ones in their place), after `placed` (the order document's time); `payment_failed`
    when billing's refusal ended the order (the order document's word alone: no status update
    carries it) and, while its status update is still queued, the cancel the order document
    already holds."""
    changes = [
        {"status": entry.get("status"), "version": entry.get("version"), "at": entry.get("at")}
        for entry in partition.status.history
    ]
    versions = {change["version"] for change in changes}
    stored = partition.order
    if stored is None:
        return changes
    placed = PRODUCER_VERSIONS[OrderStatus.PLACED]
    if not any(isinstance(v, int) and v <= placed for v in versions):
        changes.insert(
            0, {"status": OrderStatus.PLACED.value, "version": placed, "at": stored.processed_at}
        )
    order = stored.order
    if order.fulfilment is Fulfilment.PAYMENT_FAILED:
        # No status update carries it (the order document alone does): it takes the place of
        # the `paid` its refused charge would have been, and ends the order.
        at = order.payment_failed_at or stored.processed_at
        changes.append(
            {"status": Fulfilment.PAYMENT_FAILED.value, "version": PAYMENT_FAILED_VERSION, "at": at}
        )
    cancelled = PRODUCER_VERSIONS[OrderStatus.CANCELLED]
    if order.fulfilment is Fulfilment.CANCELLED and partition.status.version < cancelled:
        at = order.cancelled_at or stored.processed_at
        changes.append({"status": OrderStatus.CANCELLED.value, "version": cancelled, "at": at})
    return changes


def order_view(partition: OrderPartition) -> dict[str, Any] | None:
    """The public view of a stored order: amounts stay decimal strings, lines in order."""
    stored = partition.order
    if stored is None:
        return None
    order, status = stored.order, partition.status
    shown, version = status.status, status.version
    cancelled = PRODUCER_VERSIONS[OrderStatus.CANCELLED]
    if order.fulfilment is Fulfilment.CANCELLED and version < cancelled:
        # The cancel is decided on the order document; its status update may still be queued.
        shown, version = OrderStatus.CANCELLED, cancelled
    # A refused charge ends the order on its document alone (no status update carries it): it
    # is shown as what it is, never as `placed` waiting for a shipment that will not come.
    failed = order.fulfilment is Fulfilment.PAYMENT_FAILED
    return {
        "orderId": order.order_id,
        "status": Fulfilment.PAYMENT_FAILED.value if failed else shown.value,
        "statusVersion": version,
        "statusHistory": order_history(partition),
        "customerId": order.customer_id,
        "currency": order.currency,
        "totalAmount": stored.total_amount,
        "totalQuantity": stored.total_quantity,
        "processedAt": stored.processed_at,
        "lines": [
            {
                "lineNumber": line.line_number,
                "sku": line.sku,
                "quantity": line.quantity,
                "unitPrice": line.unit_price,
                "lineTotal": line.line_total,
            }
            for line in stored.lines
        ],
    }


def latest_rejection(
    partition: OrderPartition, request_hash: str | None = None
) -> FiledRejection | None:
    """The newest rejection filed for the order (for one payload when `request_hash` is set)."""
    rejections = [
        rejection
        for rejection in partition.rejections
        if request_hash is None or rejection.request_hash == request_hash
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
        """What `scope` is told of `order_id`: its stored order only if it owns it, its own
        payload's fate while no order is stored, else nothing (as for an unknown order).

        A stored order is checked against its owner (`domain/ownership.py`), as a cancel is,
        so GET shows an order exactly to the callers that may cancel it. A caller whose payload
        was rejected because another order holds the orderId learns nothing of that order.
        """
        documents = await self._reader.read_order_documents(order_id)
        partition = self._layout.order_partition(documents)
        stored = partition.order
        if stored is not None:
            owner = stored.order.owner
            claim = None
            if isinstance(owner, UnrecordedOwner):  # stored before owners were recorded
                claim = await self._idempotency_store.read_order_id_claim(order_id)
            if may_act(scope, owner, claim):
                return OrderLookupResult(OrderState.STORED, order_view(partition))
            return OrderLookupResult(OrderState.UNKNOWN)
        accepted = await self._idempotency_store.find_order(scope, order_id)
        if accepted is not None:
            # The caller's own submission, not stored yet: rejected, or still queued.
            rejection = latest_rejection(partition, accepted.request_hash)
            if rejection is not None:
                return OrderLookupResult(OrderState.REJECTED, rejection_view(rejection))
            return OrderLookupResult(OrderState.ACCEPTED)
        # A rejection of a message sent straight to the queue (no key record) under an orderId
        # no order holds: what the dead letter says, with no order's data in it.
        rejection = latest_rejection(partition)
        if rejection is not None:
            return OrderLookupResult(OrderState.REJECTED, rejection_view(rejection))
        return OrderLookupResult(OrderState.UNKNOWN)
