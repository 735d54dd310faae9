"""Billing: the charge, and its compensation, each done in two phases with a downstream key.

Every event is first verified against the order document (one point read, `service/saga.py`):
an event no stored order vouches for is dead-lettered and nothing is charged.

`OrderAccepted`:
1. Record `inProgress` under `billing:<eventId>` (the create is the lock; owner and lease).
2. Charge with `Idempotency-Key: billing:<orderId>`: the provider charges once per key, so a
   second call after a crash returns the first charge instead of charging again.
3. Mark `completed` with the payment id, If-Match the record's ETag.
4. Record the charge on the order document (If-Match, `OrderSaga.record_charge`): shipping
   reserves a shipment only for a charged order. The order as read there tells of a cancel that
   landed during the charge, which could not see it: the charge is paid back now (a cancel
   that came before step 1 is seen at the start, and nothing is charged).

A charge refused for good marks the record `refused`, ends the open order in `payment_failed`
(`OrderSaga.record_payment_failed`: never shipped) and dead-letters the event `PaymentRefused`.

`OrderCancelled`: a charge that was made (or is still in progress: it is finished first) is
refunded in full, with record `refund:<orderId>` and `Idempotency-Key: refund:<orderId>`.
Both paths may ask for the refund; the record and the key keep it to one.

On redelivery the record decides: `completed` -> done; `inProgress` under a live lease -> wait
for its owner (bounded), then decide again; a lease that ended (judged by the database's clock)
-> take over with If-Match and call the provider again with the same key. That state machine is
the `exactly_once` core's (`Claims`), run on billing's records (`service/billing_records.py`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import TypeVar

from exactly_once.claims import Claims
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.records import Record, RecordStatus
from orders.domain.events import (
    ORDER_ACCEPTED,
    OrderAccepted,
    OrderCancelled,
    OrderEvent,
    order_event_id,
)
from orders.domain.inbox import (
    BillingRecord,
    BillingStatus,
    RefundRecord,
    payment_key,
    refund_key,
)
from orders.domain.messages import DeadLetterReason, truncate
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.payments import Charge, ChargeRequest, Refund, RefundRequest
from orders.domain.received import ReceivedOrderMessage
from orders.domain.saga import Fulfilment, SagaOrder
from orders.domain.status import OrderStatus
from orders.exceptions import PaymentRefusedError, PaymentUnavailableError
from orders.observability import log_value
from orders.service.billing_records import (
    FencedRecords,
    as_charge,
    as_refund,
    charge_record,
    refund_record,
)
from orders.service.payment_port import PaymentGateway
from orders.service.ports import BillingLayout, FencedDocuments, StatusPublisher
from orders.service.saga import OrderSaga
from orders.service.subscriber import TRANSIENT_ERRORS, announce, handle_event

logger = logging.getLogger("orders.billing")

# How long a delivery waits for another owner's live lease before handing the message back.
DEFAULT_MAX_WAIT_SECONDS = 30.0

# Called after the provider answered and before the completion mark (crash drills exit here).
AfterCharge = Callable[[Charge], None]
AfterRefund = Callable[[Refund], None]


Answer = TypeVar("Answer", Charge, Refund)


@dataclass(frozen=True)
class Charged:
    """A charge the provider made for the order (now, or by an earlier delivery)."""

    payment_id: str
    amount: str
    currency: str
    fresh: bool  # made by this delivery


class BillingConsumer:
    def __init__(
        self,
        records: FencedDocuments,
        payments: PaymentGateway,
        saga: OrderSaga,
        layout: BillingLayout,
        *,
        owner: str | None = None,
        lease_seconds: float,
        max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        after_charge: AfterCharge | None = None,
        after_refund: AfterRefund | None = None,
        status: StatusPublisher | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._records = records
        self._payments = payments
        self._saga = saga
        self._layout = layout
        self._owner = owner or f"billing-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        # A refused record is taken over at once by a resubmitted copy, which asks again.
        self._charges, self._refunds = (
            Claims(
                store,
                owner=self._owner,
                lease_seconds=lease_seconds,
                max_wait_seconds=max_wait_seconds,
                sleep=sleep,
                failed_is_final=False,
            )
            for store in (
                FencedRecords.charges(records, layout),
                FencedRecords.refunds(records, layout),
            )
        )
        self._after_charge = after_charge
        self._after_refund = after_refund
        self._status = status
        self._clock = clock

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        # On a transient failure the record keeps its lease: our next delivery is its owner
        # and goes on at once.
        return await handle_event(
            message,
            self._on_event,
            consumer="billing",
            transient_errors=(*TRANSIENT_ERRORS, PaymentUnavailableError),
        )

    async def _on_event(self, event: OrderEvent) -> Decision:
        order = (await self._saga.verified(event, consumer="billing")).order
        if isinstance(event, OrderCancelled):
            return await self._on_cancel(event, order)
        return await self._bill(event, order)

    # --- OrderAccepted: the charge ---------------------------------------------------------

    async def _bill(self, event: OrderAccepted, order: SagaOrder) -> Decision:
        if order.fulfilment is Fulfilment.CANCELLED and not await self._charge_started(event):
            logger.info(
                "order %s was cancelled before billing: no charge", log_value(order.order_id)
            )
            return Decision(OrderOutcome.SKIPPED_CANCELLED, Settlement.COMPLETE, key=event.order_id)
        charged = await self._charge_phase(self._new_charge_record(event))
        if isinstance(charged, Decision):
            if charged.outcome is Outcome.REFUSED:
                # Refused for good: the order ends in payment_failed, so it never ships.
                await self._saga.record_payment_failed(
                    event.order_id, charged.dead_letter_description
                )
            return charged
        # On every delivery, a duplicate too: a crash after the charge's mark and before this
        # one is healed by the redelivery. Shipping waits for this write.
        latest = await self._saga.record_charge(event.order_id, charged.payment_id)
        await announce(self._status, event, OrderStatus.PAID, self._clock())
        # A cancel that committed while we charged saw no charge to pay back: we do it.
        if latest.order.fulfilment is Fulfilment.CANCELLED:
            return await self._refund_phase(event, charged)
        return Decision(
            Outcome.PROCESSED if charged.fresh else Outcome.DUPLICATE,
            Settlement.COMPLETE,
            key=event.order_id,
        )

    async def _charge_started(self, event: OrderAccepted) -> bool:
        started = await self._charge_record(event.event_id, event.order_id)
        return started is not None and started.status is not BillingStatus.REFUSED

    async def _charge_record(self, event_id: str, order_id: str) -> BillingRecord | None:
        """The charge record of the order's `OrderAccepted` `event_id`, if one was written."""
        read = await self._records.read(self._layout.charge_record_id(event_id), order_id)
        return self._layout.charge_of(read.document.body) if read.document is not None else None

    def _new_charge_record(self, event: OrderAccepted) -> BillingRecord:
        return BillingRecord(
            record_id=self._layout.charge_record_id(event.event_id),
            order_id=event.order_id,
            message_id=event.event_id,
            status=BillingStatus.IN_PROGRESS,
            owner=self._owner,
            lease_seconds=self._lease_seconds,
            amount=event.total_amount,
            currency=str(event.currency),
            payment_key=payment_key(event.order_id),
        )

    async def _charge_phase(self, record: BillingRecord) -> Charged | Decision:
        """The order's charge: made now, or found made; else what to do with the message."""
        # Another owner's live lease (after the bounded wait) raises InProgressElsewhereError:
        # the one error frame abandons the message.
        claimed = await self._charges.own(charge_record(record))
        owned = as_charge(claimed)
        if owned.status is BillingStatus.COMPLETED:
            assert owned.payment_id is not None
            logger.info("billing %s already completed", log_value(owned.order_id))
            return Charged(owned.payment_id, owned.amount, owned.currency, fresh=False)
        request = ChargeRequest(
            order_id=owned.order_id,
            amount=Decimal(owned.amount),
            currency=owned.currency,
            idempotency_key=owned.payment_key,
        )
        charge = await self._ask(
            self._charges,
            claimed,
            self._payments.charge(request),
            "payment",
            DeadLetterReason.PAYMENT_REFUSED,
        )
        if isinstance(charge, Decision):
            return charge
        if self._after_charge is not None:
            self._after_charge(charge)
        await self._charges.finish(claimed, charge.payment_id)
        logger.info(
            "charged order %s: payment_id=%s",
            log_value(owned.order_id),
            log_value(charge.payment_id),
        )
        return Charged(charge.payment_id, owned.amount, owned.currency, fresh=True)

    # --- OrderCancelled: the compensation --------------------------------------------------

    async def _on_cancel(self, event: OrderCancelled, order: SagaOrder) -> Decision:
        await announce(self._status, event, OrderStatus.CANCELLED, self._clock())
        accepted_id = order_event_id(order.order_id, ORDER_ACCEPTED)
        started = await self._charge_record(accepted_id, order.order_id)
        if started is None:
            # No charge was asked for. A delivery that is about to ask reads the order again
            # after its charge, sees the cancel and pays it back itself.
            return Decision(OrderOutcome.NOTHING_TO_REFUND, Settlement.COMPLETE, key=order.order_id)
        if started.status is BillingStatus.REFUSED:
            return Decision(OrderOutcome.NOTHING_TO_REFUND, Settlement.COMPLETE, key=order.order_id)
        # Still in progress: finish the charge (same key: never a second one), then refund it.
        charged = await self._charge_phase(
            replace(started, owner=self._owner, lease_seconds=self._lease_seconds)
        )
        if isinstance(charged, Decision):
            return charged
        return await self._refund_phase(event, charged)

    async def _refund_phase(self, event: OrderEvent, charged: Charged) -> Decision:
        if Decimal(charged.amount) == 0:
            # A free order was "charged" nothing: there is nothing to pay back, and providers
            # refuse a refund of 0.
            return Decision(OrderOutcome.NOTHING_TO_REFUND, Settlement.COMPLETE, key=event.order_id)
        record = RefundRecord(
            record_id=self._layout.refund_record_id(event.order_id),
            order_id=event.order_id,
            status=BillingStatus.IN_PROGRESS,
            owner=self._owner,
            lease_seconds=self._lease_seconds,
            payment_id=charged.payment_id,
            amount=charged.amount,
            currency=charged.currency,
            refund_key=refund_key(event.order_id),
        )
        claimed = await self._refunds.own(refund_record(record))
        owned = as_refund(claimed)
        if owned.status is not BillingStatus.COMPLETED:
            request = RefundRequest(
                payment_id=owned.payment_id,
                order_id=owned.order_id,
                amount=Decimal(owned.amount),
                currency=owned.currency,
                idempotency_key=owned.refund_key,
            )
            refund = await self._ask(
                self._refunds,
                claimed,
                self._payments.refund(request),
                "refund",
                DeadLetterReason.REFUND_REFUSED,
            )
            if isinstance(refund, Decision):
                return refund
            if self._after_refund is not None:
                self._after_refund(refund)
            await self._refunds.finish(claimed, refund.refund_id)
            logger.info(
                "refunded order %s: refund_id=%s",
                log_value(owned.order_id),
                log_value(refund.refund_id),
            )
        await announce(self._status, event, OrderStatus.REFUNDED, self._clock())
        return Decision(OrderOutcome.REFUNDED, Settlement.COMPLETE, key=event.order_id)

    # --- The two-phase record, shared by the charge and the refund: the core's state machine

    async def _ask(
        self,
        claims: Claims,
        owned: Record,
        call: Awaitable[Answer],
        what: str,
        reason: DeadLetterReason,
    ) -> Answer | Decision:
        """The provider's answer, or (refused for good) the record marked `refused` and the
        dead-letter decision, with an ALERT line."""
        try:
            return await call
        except PaymentRefusedError as refused:
            logger.error(
                "ALERT %s refused for order %s: %s",
                what,
                log_value(owned.partition),
                log_value(refused.description),
            )
            await claims.finish(owned, None, RecordStatus.FAILED)
            return Decision(
                Outcome.REFUSED,
                Settlement.DEAD_LETTER,
                key=owned.partition,
                dead_letter_reason=reason.value,
                dead_letter_description=truncate(f"{refused.reason}: {refused.description}"),
            )
