"""Billing: the charge, and its compensation, each done in two phases with a downstream key.

Every event is first verified against the order document (one point read, `service/saga.py`):
an event no stored order vouches for is dead-lettered and nothing is charged.

Both run on the `exactly_once` core's `Effects.two_phase`, over the core's record store in
billing's own record shapes (`adapters/cosmos_layout.py` `ChargeRecordShape`,
`RefundRecordShape`: the flat `billing` / `refund` documents the console, the audits and
operators read).

`OrderAccepted`:
1. Claim `billing:<eventId>` in progress (the create is the lock; owner and lease).
2. Charge with `Idempotency-Key: billing:<orderId>`: the provider charges once per key, so a
   second call after a crash returns the first charge instead of charging again.
3. Mark it `completed` with the payment id, If-Match the record's ETag.
4. Record the charge on the order document (If-Match, `OrderSaga.record_charge`): shipping
   reserves a shipment only for a charged order. The order as read there tells of a cancel that
   landed during the charge, which could not see it: the charge is paid back now (a cancel
   that came before step 1 is seen at the start, and nothing is charged).

A charge refused for good marks the record `refused`, ends the open order in `payment_failed`
(`OrderSaga.record_payment_failed`: never shipped) and dead-letters the event `PaymentRefused`.
A resubmitted copy takes a refused record over at once and asks again.

`OrderCancelled`: a charge that was made (or is still in progress: it is finished first) is
refunded in full, with record `refund:<orderId>` and `Idempotency-Key: refund:<orderId>`.
Both paths may ask for the refund; the record and the key keep it to one.

On redelivery the record decides: `completed` -> done; `inProgress` under a live lease -> wait
for its owner (bounded), then decide again; a lease that ended (judged by the database's clock)
-> take over with If-Match and call the provider again with the same key. Every delivery is an
owner of its own (the same on each of its in-place attempts, so a retry takes its own claim
back at once), so two deliveries of one process (a cancel racing its order's charge) wait
for each other like deliveries of two processes, and never call the provider at once.

A call that failed without an answer (the provider unreachable, a timeout) may have charged: the
record stays, in progress with its lease ended (`keep_claim_on_error`), so a cancel still finds
the charge to finish and pay back; the message backs off in place (`RetryLater`, a transient
failure) and the next attempt takes the record over at once and asks again with the same key.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TypeVar

from exactly_once import Effects, Refused, Retention, RetryLater, Store
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.options import DEFAULT_MAX_WAIT_SECONDS, DEFAULT_RETENTION
from exactly_once.retries import delivery_owner
from exactly_once.store import DownstreamCall, JsonMapping, Record, RecordStatus
from orders.domain.events import (
    NO_CUTOVER,
    ORDER_ACCEPTED,
    BareEventIdCutover,
    OrderAccepted,
    OrderCancelled,
    OrderEvent,
    order_event_id,
)
from orders.domain.inbox import (
    BILLING,
    NO_REQUEST_HASH,
    charge_claim,
    claim_field,
    payment_key,
    refund_claim,
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
from orders.service.payment_port import PaymentGateway
from orders.service.ports import BillingLayout, StatusPublisher
from orders.service.saga import OrderSaga
from orders.service.subscriber import announce, handle_event

logger = logging.getLogger("orders.billing")

# Called after the provider answered and before the completion mark (crash drills exit here).
AfterCharge = Callable[[Charge], None]
AfterRefund = Callable[[Refund], None]

Answer = TypeVar("Answer", Charge, Refund)


@dataclass(frozen=True)
class BillingStores:
    """Billing's records: its charges and its refunds, each the core's store in its shape
    (one container, the inbox, partitioned by orderId)."""

    charges: Store
    refunds: Store


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
        records: BillingStores,
        payments: PaymentGateway,
        saga: OrderSaga,
        layout: BillingLayout,
        *,
        owner: str | None = None,
        lease_seconds: float,
        retention: Retention = DEFAULT_RETENTION,
        max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        after_charge: AfterCharge | None = None,
        after_refund: AfterRefund | None = None,
        status: StatusPublisher | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        bare_event_ids: BareEventIdCutover = NO_CUTOVER,
    ) -> None:
        self._bare_event_ids = bare_event_ids
        self._records = records
        self._payments = payments
        self._saga = saga
        self._layout = layout
        self._owner = owner or f"billing-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        self._retention = retention
        self._max_wait_seconds = max_wait_seconds
        self._sleep = sleep
        self._after_charge = after_charge
        self._after_refund = after_refund
        self._status = status
        self._clock = clock

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        return await handle_event(
            message, self._on_event, consumer="billing", cutover=self._bare_event_ids
        )

    async def _on_event(self, event: OrderEvent) -> Decision:
        order = (await self._saga.verified(event, consumer="billing")).order
        # This delivery's own name in the records it claims, `<owner>/<delivery>`, the same on
        # each of its in-place attempts: a retry takes its own claim back at once.
        delivery = delivery_owner(self._owner)
        if isinstance(event, OrderCancelled):
            return await self._on_cancel(event, order, delivery)
        return await self._bill(event, order, delivery)

    def _effects(self, records: Store, event: OrderEvent, delivery: str) -> Effects:
        """The core's effects of this delivery on one of billing's record stores; the records
        live in the order's partition, beside its shipment and inbox records."""
        return Effects(
            consumer=BILLING,
            message_id=event.event_id,
            request_hash=NO_REQUEST_HASH,
            records=records,
            documents=records,
            owner=delivery,
            lease_seconds=self._lease_seconds,
            max_wait_seconds=self._max_wait_seconds,
            sleep=self._sleep,
            retention=self._retention,
            key_partition=event.order_id,
            # A refused record is taken over at once by a resubmitted copy, which asks again.
            failed_is_final=False,
        )

    # --- OrderAccepted: the charge ---------------------------------------------------------

    async def _bill(self, event: OrderAccepted, order: SagaOrder, delivery: str) -> Decision:
        if order.fulfilment is Fulfilment.CANCELLED and not await self._charge_started(event):
            logger.info(
                "order %s was cancelled before billing: no charge", log_value(order.order_id)
            )
            return Decision(OrderOutcome.SKIPPED_CANCELLED, Settlement.COMPLETE, key=event.order_id)
        claim = charge_claim(event.event_id, event.total_amount, str(event.currency))
        charged = await self._charge_phase(event, claim, delivery)
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
            return await self._refund_phase(event, charged, delivery)
        return Decision(
            Outcome.PROCESSED if charged.fresh else Outcome.DUPLICATE,
            Settlement.COMPLETE,
            key=event.order_id,
        )

    async def _charge_started(self, event: OrderAccepted) -> bool:
        started = await self._charge_record(event.event_id, event.order_id)
        return started is not None and started.status is not RecordStatus.FAILED

    async def _charge_record(self, event_id: str, order_id: str) -> Record | None:
        """The charge record of the order's `OrderAccepted` `event_id`, if one was written."""
        key = self._layout.charge_record_id(event_id)
        return (await self._records.charges.read(key, order_id)).record

    async def _charge_phase(
        self, event: OrderEvent, claim: JsonMapping, delivery: str
    ) -> Charged | Decision:
        """The order's charge of `claim` (`charge_claim`): made now, or found made; else what
        to do with the message. Another owner's live lease (after the bounded wait) raises
        InProgressElsewhereError: the one error frame abandons the message."""
        amount, currency = claim_field(claim, "amount"), claim_field(claim, "currency")
        accepted_id = claim_field(claim, "messageId")

        async def charge(key: str) -> str:
            request = ChargeRequest(event.order_id, Decimal(amount), currency, key)
            made = await _asked(self._payments.charge(request))
            if self._after_charge is not None:
                self._after_charge(made)
            logger.info(
                "charged order %s: payment_id=%s",
                log_value(made.order_id),
                log_value(made.payment_id),
            )
            return made.payment_id

        done = await self._two_phase(
            self._effects(self._records.charges, event, delivery),
            charge,
            record_key=self._layout.charge_record_id(accepted_id),
            downstream_key=payment_key(event.order_id),
            claim=claim,
            refused=("payment", DeadLetterReason.PAYMENT_REFUSED),
        )
        if isinstance(done, Decision):
            return done
        payment_id, fresh = done
        if not fresh:
            logger.info("billing %s already completed", log_value(event.order_id))
        return Charged(payment_id, amount, currency, fresh=fresh)

    # --- OrderCancelled: the compensation --------------------------------------------------

    async def _on_cancel(self, event: OrderCancelled, order: SagaOrder, delivery: str) -> Decision:
        await announce(self._status, event, OrderStatus.CANCELLED, self._clock())
        accepted_id = order_event_id(order.order_id, ORDER_ACCEPTED)
        started = await self._charge_record(accepted_id, order.order_id)
        if started is None or started.status is RecordStatus.FAILED:
            # No charge was asked for (or it was refused). A delivery that is about to ask
            # reads the order again after its charge, sees the cancel and pays it back itself.
            return Decision(OrderOutcome.NOTHING_TO_REFUND, Settlement.COMPLETE, key=order.order_id)
        # Still in progress: finish the charge (same key: never a second one), then refund it.
        if not isinstance(started.data, dict):
            raise ValueError(f"charge record {started.key!r} carries no claim")
        charged = await self._charge_phase(event, started.data, delivery)
        if isinstance(charged, Decision):
            return charged
        return await self._refund_phase(event, charged, delivery)

    async def _refund_phase(self, event: OrderEvent, charged: Charged, delivery: str) -> Decision:
        if Decimal(charged.amount) == 0:
            # A free order was "charged" nothing: there is nothing to pay back, and providers
            # refuse a refund of 0.
            return Decision(OrderOutcome.NOTHING_TO_REFUND, Settlement.COMPLETE, key=event.order_id)

        async def refund(key: str) -> str:
            request = RefundRequest(
                payment_id=charged.payment_id,
                order_id=event.order_id,
                amount=Decimal(charged.amount),
                currency=charged.currency,
                idempotency_key=key,
            )
            made = await _asked(self._payments.refund(request))
            if self._after_refund is not None:
                self._after_refund(made)
            logger.info(
                "refunded order %s: refund_id=%s",
                log_value(made.order_id),
                log_value(made.refund_id),
            )
            return made.refund_id

        done = await self._two_phase(
            self._effects(self._records.refunds, event, delivery),
            refund,
            record_key=self._layout.refund_record_id(event.order_id),
            downstream_key=refund_key(event.order_id),
            claim=refund_claim(charged.payment_id, charged.amount, charged.currency),
            refused=("refund", DeadLetterReason.REFUND_REFUSED),
        )
        if isinstance(done, Decision):
            return done
        await announce(self._status, event, OrderStatus.REFUNDED, self._clock())
        return Decision(OrderOutcome.REFUNDED, Settlement.COMPLETE, key=event.order_id)

    # --- The two phases, shared by the charge and the refund: the core's `two_phase` --------

    async def _two_phase(
        self,
        effects: Effects,
        call: DownstreamCall,
        *,
        record_key: str,
        downstream_key: str,
        claim: JsonMapping,
        refused: tuple[str, DeadLetterReason],
    ) -> tuple[str, bool] | Decision:
        """(the provider's id, made by this delivery), or (refused for good: the record marked
        `refused`) the dead-letter decision, with an ALERT line."""
        try:
            done = await effects.two_phase(
                call,
                downstream_key=downstream_key,
                record_key=record_key,
                data=claim,
                keep_claim_on_error=True,
            )
        except Refused as refusal:
            what, reason = refused
            logger.error(
                "ALERT %s refused for order %s: %s",
                what,
                log_value(effects.key_partition),
                log_value(refusal.description),
            )
            return Decision(
                Outcome.REFUSED,
                Settlement.DEAD_LETTER,
                key=effects.key_partition,
                dead_letter_reason=reason.value,
                dead_letter_description=truncate(f"{refusal.reason}: {refusal.description}"),
            )
        return str(done.result), done.outcome is Outcome.PROCESSED


async def _asked(call: Awaitable[Answer]) -> Answer:
    """The provider's answer; its refusal for good as the core's `Refused`, which marks the
    record refused (`two_phase`); its failure for now as the core's `RetryLater`, which backs
    the message off in place (the record kept, its lease ended: the next attempt asks again
    with the same key)."""
    try:
        return await call
    except PaymentRefusedError as refused:
        raise Refused(refused.description, reason=refused.reason) from refused
    except PaymentUnavailableError as unavailable:
        raise RetryLater(str(unavailable)) from unavailable
