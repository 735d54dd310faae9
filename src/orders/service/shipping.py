"""Shipping: the natural inbox, behind the saga's reservation.

The event is verified against the order document, and the shipment reserved on it with
If-Match (a cancel that committed first wins: no shipment, `skipped_cancelled`). Only a charged
order ships: until billing has recorded the charge on the order document, shipping polls it
(bounded), then hands the message back (`awaiting_charge`); an order whose charge was refused
is never shipped (`skipped_payment_failed`). Then the inbox record and the shipment are one
transactional batch (the `exactly_once` core's `create_or_find`), so the record exists if and only
if the effect does; a redelivery finds the reservation its own and the record, and stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.store import DocumentExistsError, DocumentStore, create_or_find
from orders.domain.events import NO_CUTOVER, BareEventIdCutover, OrderAccepted, OrderEvent
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.received import ReceivedOrderMessage
from orders.domain.saga import ShipVerdict
from orders.domain.status import OrderStatus
from orders.observability import log_value
from orders.service.ports import ShippingLayout, StatusPublisher
from orders.service.saga import OrderSaga
from orders.service.subscriber import announce, handle_event

logger = logging.getLogger("orders.shipping")

# How long one delivery waits for billing's charge before handing the message back (the
# subscription's lock is a minute; MaxDeliveryCount bounds the deliveries), and how often it
# reads the order meanwhile: a charge usually lands within a second of the event.
DEFAULT_CHARGE_WAIT_SECONDS = 20.0
CHARGE_POLL_SECONDS = 0.5


class ShippingConsumer:
    def __init__(
        self,
        inbox: DocumentStore,
        saga: OrderSaga,
        layout: ShippingLayout,
        status: StatusPublisher | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        charge_wait_seconds: float = DEFAULT_CHARGE_WAIT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        bare_event_ids: BareEventIdCutover = NO_CUTOVER,
    ) -> None:
        self._bare_event_ids = bare_event_ids
        self._documents = inbox
        self._saga = saga
        self._layout = layout
        self._status = status
        self._clock = clock
        self._charge_wait_seconds = charge_wait_seconds
        self._sleep = sleep

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        return await handle_event(
            message, self._ship, consumer="shipping", cutover=self._bare_event_ids
        )

    async def _ship(self, event: OrderEvent) -> Decision:
        # Every event is verified, a cancel too: a forged one is dead-lettered and alerted on
        # here as in billing, whatever this consumer would have done with it.
        stored = await self._saga.verified(event, consumer="shipping")
        if not isinstance(event, OrderAccepted):
            # A cancel concerns billing; shipping learns of it from the order document.
            return Decision(OrderOutcome.IGNORED, Settlement.COMPLETE, key=event.order_id)
        verdict = await self._saga.reserve_shipment(stored, event.event_id)
        waited = 0.0
        while verdict is ShipVerdict.AWAIT_CHARGE:
            if waited >= self._charge_wait_seconds:
                logger.info("order %s is not charged yet: handed back", log_value(event.order_id))
                return Decision(
                    OrderOutcome.AWAITING_CHARGE, Settlement.ABANDON, key=event.order_id
                )
            await self._sleep(CHARGE_POLL_SECONDS)
            waited += CHARGE_POLL_SECONDS
            stored = await self._saga.verified(event, consumer="shipping")
            verdict = await self._saga.reserve_shipment(stored, event.event_id)
        if verdict is ShipVerdict.SKIP_CANCELLED:
            logger.info(
                "order %s was cancelled before shipping: no shipment", log_value(event.order_id)
            )
            return Decision(OrderOutcome.SKIPPED_CANCELLED, Settlement.COMPLETE, key=event.order_id)
        if verdict is ShipVerdict.SKIP_PAYMENT_FAILED:
            logger.info(
                "order %s was not paid (payment_failed): no shipment", log_value(event.order_id)
            )
            return Decision(
                OrderOutcome.SKIPPED_PAYMENT_FAILED, Settlement.COMPLETE, key=event.order_id
            )
        record, shipment = self._layout.shipping_documents(
            event, message_id=event.event_id, processed_at=self._clock()
        )
        try:
            # The event's id names its payload for good (derived from the stored order): the
            # record's id alone decides, and a duplicate costs the one batch.
            done, _ = await create_or_find(
                self._documents, event.order_id, record, shipment, request_hash=None
            )
        except DocumentExistsError:
            # The order's one shipment exists without this message's record: it was requested
            # already, and shipping has always completed such a message as a duplicate.
            done = Outcome.DUPLICATE
        await announce(self._status, event, OrderStatus.SHIPPED, self._clock())
        if done is Outcome.PROCESSED:
            logger.info("shipment requested: order_id=%s", log_value(event.order_id))
        return Decision(done, Settlement.COMPLETE, key=event.order_id)
