"""The order saga's decisions against the order document: verify, reserve, cancel.

Billing and shipping verify every event with one point read of the order document before they
act; shipping reserves the shipment and the HTTP API cancels by an If-Match replace of that same
document, so the two can never both win (`domain/saga.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum

from orders.domain.events import OrderCancelled, OrderEvent
from orders.domain.outcomes import Decision, Outcome, Settlement
from orders.domain.saga import (
    CancelVerdict,
    SagaOrder,
    ShipVerdict,
    check_event,
    is_order_document,
    judge_cancel,
    judge_shipment,
)
from orders.exceptions import LeaseLostError, TransientStoreError
from orders.observability import log_value
from orders.service.ports import EventLayout, OrderDocuments

logger = logging.getLogger("orders.saga")

# Each lost race costs a read; past this many the caller retries later (the broker or client).
MAX_RACES = 8


class EventRefused(Exception):
    """No stored order vouches for the event; carries the dead-letter decision."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.dead_letter_description)
        self.decision = decision


class CancelResult(StrEnum):
    CANCELLED = "cancelled"  # this request cancelled the order
    ALREADY_CANCELLED = "already_cancelled"  # an earlier cancel did
    ALREADY_SHIPPED = "already_shipped"  # the shipment was reserved first
    NOT_STORED = "not_stored"  # no order document (yet)


class OrderSaga:
    def __init__(
        self,
        orders: OrderDocuments,
        layout: EventLayout,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._orders = orders
        self._layout = layout
        self._clock = clock

    async def order(self, order_id: str) -> SagaOrder | None:
        stored = await self._orders.get_stored(order_id, order_id)
        if stored is None or not is_order_document(stored.body):
            return None
        return SagaOrder.of(stored.body, stored.etag)

    async def verified(self, event: OrderEvent, *, consumer: str) -> SagaOrder:
        """The stored order `event` is about, or `EventRefused` (with an ALERT logged)."""
        stored = await self._orders.get_stored(event.order_id, event.order_id)
        refusal = check_event(stored.body if stored is not None else None, event)
        if refusal is None:
            assert stored is not None
            return SagaOrder.of(stored.body, stored.etag)
        logger.error(
            "ALERT %s refused event %s: %s",
            consumer,
            log_value(event.event_id),
            log_value(refusal.description),
        )
        raise EventRefused(
            Decision(
                Outcome.REJECTED,
                Settlement.DEAD_LETTER,
                event.order_id,
                dead_letter_reason=refusal.reason.value,
                dead_letter_description=refusal.description,
            )
        )

    async def reserve_shipment(self, order: SagaOrder, event_id: str) -> ShipVerdict:
        """RESERVED once the shipment is reserved for `event_id` (now or before), or
        SKIP_CANCELLED when a cancel won."""
        for _ in range(MAX_RACES):
            verdict = judge_shipment(order)
            if verdict is not ShipVerdict.RESERVE:
                return verdict
            try:
                await self._orders.replace(
                    order.with_shipment_reserved(event_id, self._clock()), etag=order.etag
                )
                return ShipVerdict.RESERVED
            except LeaseLostError:
                order = await self._reread(order.order_id)
        raise TransientStoreError(f"order {order.order_id!r} changed {MAX_RACES} times in a row")

    async def cancel(self, order_id: str, reason: str | None) -> CancelResult:
        """Decide the cancel now: cancelled (with its `OrderCancelled` event, one batch), or
        refused because the shipment was reserved first."""
        order = await self.order(order_id)
        for _ in range(MAX_RACES):
            if order is None:
                return CancelResult.NOT_STORED
            match judge_cancel(order):
                case CancelVerdict.ALREADY_CANCELLED:
                    return CancelResult.ALREADY_CANCELLED
                case CancelVerdict.ALREADY_SHIPPED:
                    return CancelResult.ALREADY_SHIPPED
            at = self._clock()
            event = OrderCancelled.of(order_id, cancelled_at=at, reason=reason)
            try:
                await self._orders.replace_and_create(
                    order_id,
                    order.cancelled(at, reason),
                    etag=order.etag,
                    created=[self._layout.outbox_document(event)],
                )
                logger.info("order %s cancelled", log_value(order_id))
                return CancelResult.CANCELLED
            except LeaseLostError:
                order = await self.order(order_id)  # shipping (or another cancel) moved first
        raise TransientStoreError(f"order {order_id!r} changed {MAX_RACES} times in a row")

    async def _reread(self, order_id: str) -> SagaOrder:
        order = await self.order(order_id)
        if order is None:
            raise TransientStoreError(f"order {order_id!r} vanished during the saga")
        return order
