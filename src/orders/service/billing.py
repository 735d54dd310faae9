"""Billing: an effect outside the database, done in two phases with a downstream key.

1. Record `inProgress` under `billing:<messageId>` (the create is the lock; owner and lease).
2. Charge with `Idempotency-Key: billing:<orderId>`: the provider charges once per key, so a
   second call after a crash returns the first charge instead of charging again.
3. Mark `completed` with the payment id, If-Match the record's ETag.

On redelivery the record decides: `completed` -> complete the message; `inProgress` under a live
lease -> wait for its owner (bounded), then decide again; a lease that ended (judged by the
database's clock) -> take over with If-Match and charge again with the same key.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime

from orders.domain.events import OrderAccepted
from orders.domain.inbox import (
    BILLING,
    BillingRecord,
    BillingStatus,
    inbox_record_id,
    payment_key,
)
from orders.domain.leases import lease_is_live, seconds_left
from orders.domain.messages import DeadLetterReason, truncate
from orders.domain.outcomes import Decision, Outcome, Settlement
from orders.domain.payments import Charge, ChargeRequest
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import OrderStatus
from orders.exceptions import (
    DocumentExistsError,
    LeaseLostError,
    PaymentRefusedError,
    PaymentUnavailableError,
)
from orders.observability import log_value
from orders.service.payment_port import PaymentGateway
from orders.service.ports import FencedDocuments, StatusPublisher
from orders.service.subscriber import TRANSIENT_ERRORS, announce, handle_event

logger = logging.getLogger("orders.billing")

DEFAULT_LEASE_SECONDS = 60.0
# How long a delivery waits for another owner's live lease before handing the message back.
DEFAULT_MAX_WAIT_SECONDS = 30.0
POLL_SECONDS = 0.5
# A record whose owner keeps changing under us is given back to the broker after this many races.
MAX_TURNS = 5

# Called after the charge and before the completion mark (crash drills exit here).
AfterCharge = Callable[[Charge], None]


class BillingConsumer:
    def __init__(
        self,
        records: FencedDocuments,
        payments: PaymentGateway,
        *,
        owner: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        after_charge: AfterCharge | None = None,
        status: StatusPublisher | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._records = records
        self._payments = payments
        self._owner = owner or f"billing-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        self._max_wait_seconds = max_wait_seconds
        self._sleep = sleep
        self._after_charge = after_charge
        self._status = status
        self._clock = clock

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        # On a transient failure the record keeps its lease: our next delivery is its owner
        # and goes on at once.
        return await handle_event(
            message,
            self._bill,
            consumer="billing",
            transient_errors=(*TRANSIENT_ERRORS, PaymentUnavailableError),
        )

    async def _bill(self, event: OrderAccepted) -> Decision:
        record = self._new_record(event)
        try:
            owned = BillingRecord.from_document(await self._records.create(record.to_document()))
        except DocumentExistsError:
            decided = await self._decide_on_existing(event)
            if isinstance(decided, Decision):
                return decided
            owned = decided
        return await self._charge_and_complete(event, owned)

    def _new_record(self, event: OrderAccepted) -> BillingRecord:
        return BillingRecord(
            record_id=inbox_record_id(BILLING, event.event_id),
            order_id=event.order_id,
            message_id=event.event_id,
            status=BillingStatus.IN_PROGRESS,
            owner=self._owner,
            lease_seconds=self._lease_seconds,
            amount=event.total_amount,
            currency=str(event.currency),
            payment_key=payment_key(event.order_id),
        )

    async def _decide_on_existing(self, event: OrderAccepted) -> Decision | BillingRecord:
        """The existing record's verdict: a decision, or the record now owned by us."""
        record_id = inbox_record_id(BILLING, event.event_id)
        waited = 0.0
        races = 0
        while races < MAX_TURNS:
            read = await self._records.read(record_id, event.order_id)
            if read.document is None:
                # Deleted between our create and this read (an operator's cleanup): create again.
                try:
                    created = await self._records.create(self._new_record(event).to_document())
                except DocumentExistsError:
                    races += 1
                    continue
                return BillingRecord.from_document(created)
            existing = BillingRecord.from_document(read.document)
            if existing.status is BillingStatus.COMPLETED:
                logger.info("billing %s already completed", log_value(event.order_id))
                await announce(self._status, event, OrderStatus.PAID, self._clock())
                return Decision(Outcome.DUPLICATE, Settlement.COMPLETE, event.order_id)
            mine = existing.owner == self._owner
            live = lease_is_live(
                existing.written_at_s, existing.lease_seconds, read.database_now_ms
            )
            if live and not mine and existing.status is BillingStatus.IN_PROGRESS:
                left = seconds_left(
                    existing.written_at_s, existing.lease_seconds, read.database_now_ms
                )
                if waited + POLL_SECONDS > self._max_wait_seconds:
                    return self._leave_to_owner(event, existing, left)
                # Its owner is charging right now: wait for it rather than abandon, which would
                # only burn delivery attempts in a tight loop.
                pause = min(POLL_SECONDS, left + 0.05)
                await self._sleep(pause)
                waited += pause
                continue
            try:
                taken = replace(existing, owner=self._owner, attempts=existing.attempts + 1)
                stored = await self._records.replace(taken.to_document(), etag=existing.etag)
            except LeaseLostError:
                races += 1
                continue  # another delivery moved first; read again
            if not mine:
                logger.warning(
                    "billing %s: took over a stale record from %s (attempt %d)",
                    log_value(event.order_id),
                    log_value(existing.owner),
                    taken.attempts,
                )
            return BillingRecord.from_document(stored)
        return self._leave_to_owner(event, None, 0.0)

    def _leave_to_owner(
        self, event: OrderAccepted, existing: BillingRecord | None, seconds: float
    ) -> Decision:
        owner = existing.owner if existing is not None else "another delivery"
        return Decision(
            Outcome.IN_PROGRESS_ELSEWHERE,
            Settlement.ABANDON,
            event.order_id,
            error=f"billing is in progress at {owner}; its lease ends in {seconds:.0f} s",
        )

    async def _charge_and_complete(self, event: OrderAccepted, owned: BillingRecord) -> Decision:
        request = ChargeRequest(
            order_id=event.order_id,
            amount=event.amount,
            currency=str(event.currency),
            idempotency_key=owned.payment_key,
        )
        try:
            charge = await self._payments.charge(request)
        except PaymentRefusedError as refused:
            logger.error(
                "ALERT payment refused for order %s: %s",
                log_value(event.order_id),
                log_value(refused.description),
            )
            await self._mark(owned, status=BillingStatus.REFUSED)
            return Decision(
                Outcome.DOWNSTREAM_REFUSED,
                Settlement.DEAD_LETTER,
                event.order_id,
                dead_letter_reason=DeadLetterReason.PAYMENT_REFUSED.value,
                dead_letter_description=truncate(f"{refused.reason}: {refused.description}"),
            )
        if self._after_charge is not None:
            self._after_charge(charge)
        await self._mark(owned, status=BillingStatus.COMPLETED, payment_id=charge.payment_id)
        await announce(self._status, event, OrderStatus.PAID, self._clock())
        logger.info(
            "charged order %s: payment_id=%s",
            log_value(event.order_id),
            log_value(charge.payment_id),
        )
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, event.order_id)

    async def _mark(
        self, owned: BillingRecord, *, status: BillingStatus, payment_id: str | None = None
    ) -> None:
        done = replace(owned, status=status, payment_id=payment_id)
        try:
            await self._records.replace(done.to_document(), etag=owned.etag)
        except LeaseLostError:
            # Our lease ended during the call and another delivery took over: it charges with
            # the same key, gets this same charge back and marks the record itself.
            logger.warning(
                "billing %s: the record moved on during the charge; its new owner completes it",
                log_value(owned.order_id),
            )
