"""The order saga's decisions against the order document: verify, reserve, cancel, and
billing's payment.

Billing and shipping verify every event with one point read of the order document before they
act; shipping reserves the shipment and the HTTP API cancels by an If-Match replace of that same
document, so the two can never both win; billing records its charge, or a refusal that ends the
order in `payment_failed`, on that document too, and shipping reserves only a charged order
(`domain/saga.py`).

Each of these is a read-decide-write under the read's ETag, run by the core's `update_fenced`:
a write that lost its race reads the order again and decides anew, within the core's bound
(`exactly_once.store.MAX_RACES`), past which the caller retries later (the broker, or
the client with its key).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from exactly_once import TransientStoreError
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.store import DocumentStore, RecordChangedError, update_fenced
from orders.domain.events import OrderCancelled, OrderEvent
from orders.domain.saga import (
    CancelVerdict,
    Fulfilment,
    PaymentVerdict,
    SagaOrder,
    ShipVerdict,
    check_event,
    judge_cancel,
    judge_payment,
    judge_shipment,
)
from orders.observability import log_value
from orders.service.ports import SagaLayout

logger = logging.getLogger("orders.saga")

S = TypeVar("S")  # what a fenced update reads
R = TypeVar("R")  # what it decides


class EventRefused(Exception):
    """No stored order vouches for the event; carries the dead-letter decision."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.dead_letter_description)
        self.decision = decision


@dataclass(frozen=True)
class FencedOrder:
    """The order as read for the saga: what it decides on (`order`), and the stored document
    with its ETag that a fenced rewrite starts from (the layout keeps every field it had)."""

    order: SagaOrder
    document: dict[str, Any]
    etag: str


class CancelResult(StrEnum):
    CANCELLED = "cancelled"  # this request cancelled the order
    ALREADY_CANCELLED = "already_cancelled"  # an earlier cancel did
    ALREADY_SHIPPED = "already_shipped"  # the shipment was reserved first
    NOT_STORED = "not_stored"  # no order document (yet)
    NOT_OWNED = "not_owned"  # the stored order is not the caller's: nothing written


class OrderSaga:
    def __init__(
        self,
        orders: DocumentStore,
        layout: SagaLayout,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._orders = orders
        self._layout = layout
        self._clock = clock

    async def order(self, order_id: str) -> FencedOrder | None:
        # The orders container is partitioned by orderId, the order document in its own.
        stored = await self._orders.get(order_id, order_id)
        if stored is None:
            return None
        order = self._layout.saga_order(stored.body)
        return None if order is None else FencedOrder(order, stored.body, stored.etag)

    async def verified(self, event: OrderEvent, *, consumer: str) -> FencedOrder:
        """The stored order `event` is about, or `EventRefused` (with an ALERT logged)."""
        stored = await self.order(event.order_id)
        refusal = check_event(None if stored is None else stored.order, event)
        if refusal is None:
            assert stored is not None
            return stored
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
                key=event.order_id,
                dead_letter_reason=refusal.reason.value,
                dead_letter_description=refusal.description,
            )
        )

    async def reserve_shipment(self, stored: FencedOrder, event_id: str) -> ShipVerdict:
        """RESERVED once the shipment is reserved for `event_id` (now or before);
        SKIP_CANCELLED when a cancel won, SKIP_PAYMENT_FAILED when the charge was refused,
        AWAIT_CHARGE while billing has not recorded the charge (`stored` is then current)."""

        async def reserve(current: FencedOrder) -> ShipVerdict:
            verdict = judge_shipment(current.order)
            if verdict is not ShipVerdict.RESERVE:
                return verdict
            reserved = self._layout.shipment_reserved(current.document, event_id, self._clock())
            await self._orders.replace(reserved, current.order.order_id, etag=current.etag)
            return ShipVerdict.RESERVED

        order_id = stored.order.order_id
        return await self._fenced(order_id, first_then(stored, self._reread), reserve)

    async def cancel(
        self,
        order_id: str,
        reason: str | None,
        *,
        may_cancel: Callable[[SagaOrder], bool] = lambda order: True,
    ) -> CancelResult:
        """Decide the cancel now: cancelled (with its `OrderCancelled` event, one batch), or
        refused because the shipment was reserved first, or because `may_cancel` says the
        order read is not the caller's (asked before anything else is told of it)."""

        async def cancel_stored(stored: FencedOrder | None) -> CancelResult:
            if stored is None:
                return CancelResult.NOT_STORED
            if not may_cancel(stored.order):
                return CancelResult.NOT_OWNED
            match judge_cancel(stored.order):
                case CancelVerdict.ALREADY_CANCELLED:
                    return CancelResult.ALREADY_CANCELLED
                case CancelVerdict.ALREADY_SHIPPED:
                    return CancelResult.ALREADY_SHIPPED
            at = self._clock()
            event = OrderCancelled.of(order_id, cancelled_at=at, reason=reason)
            await self._orders.replace_and_create(
                order_id,
                self._layout.order_cancelled(stored.document, at, reason),
                etag=stored.etag,
                created=[self._layout.outbox_document(event)],
            )
            logger.info("order %s cancelled", log_value(order_id))
            return CancelResult.CANCELLED

        return await self._fenced(order_id, lambda: self.order(order_id), cancel_stored)

    async def record_charge(self, order_id: str, payment_id: str) -> FencedOrder:
        """Record billing's charge on the order document (If-Match), which is what lets
        shipping reserve the shipment; the order as it stands after, so billing sees a cancel
        that committed while it charged (and pays it back)."""
        return await self._record_payment(
            order_id,
            lambda document, at: self._layout.order_charged(document, payment_id, at),
            charged=True,
        )

    async def record_payment_failed(self, order_id: str, reason: str | None) -> FencedOrder:
        """End an open order in `payment_failed` (If-Match): the provider refused its charge
        for good, so it never ships. A cancel that won the race keeps the order cancelled."""
        order = await self._record_payment(
            order_id,
            lambda document, at: self._layout.order_payment_failed(document, at, reason),
            charged=False,
        )
        if order.order.fulfilment is Fulfilment.PAYMENT_FAILED:
            logger.info("order %s ended in payment_failed", log_value(order_id))
        return order

    async def _record_payment(
        self,
        order_id: str,
        rewrite: Callable[[dict[str, Any], datetime], dict[str, Any]],
        *,
        charged: bool,
    ) -> FencedOrder:

        async def record(stored: FencedOrder) -> FencedOrder:
            if judge_payment(stored.order, charged=charged) is PaymentVerdict.RECORDED:
                return stored
            written = await self._orders.replace(
                rewrite(stored.document, self._clock()), order_id, etag=stored.etag
            )
            order = self._layout.saga_order(written.body)
            if order is None:
                raise TransientStoreError(f"order {order_id!r} could not be read back")
            return FencedOrder(order, written.body, written.etag)

        return await self._fenced(order_id, lambda: self._reread(order_id), record)

    async def _fenced(
        self,
        order_id: str,
        read: Callable[[], Awaitable[S]],
        write: Callable[[S], Awaitable[R]],
    ) -> R:
        """`write(read())` under the core's `update_fenced`; an order that kept changing is a
        transient failure, which the broker (or the client) retries."""
        try:
            return await update_fenced(read, write, name=order_id)
        except RecordChangedError as exc:
            raise TransientStoreError(f"order {order_id!r}: {exc}") from exc

    async def _reread(self, order_id: str) -> FencedOrder:
        stored = await self.order(order_id)
        if stored is None:
            raise TransientStoreError(f"order {order_id!r} vanished during the saga")
        return stored


def first_then(
    first: FencedOrder, reread: Callable[[str], Awaitable[FencedOrder]]
) -> Callable[[], Awaitable[FencedOrder]]:
    """Reads that start from an order already read (the verified event's), then read again."""
    pending = [first]

    async def read() -> FencedOrder:
        return pending.pop() if pending else await reread(first.order.order_id)

    return read
