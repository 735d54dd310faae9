"""The order saga's decisions over fakes: cancel and ship decided on the order document, a
charge of a cancelled order refunded exactly once, events verified against the store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

import pytest
from fakes import (
    LAYOUT,
    FakeDocumentStore,
    FakeFencedDocuments,
    FakePaymentGateway,
    billing_stores,
    cancel_message,
    event_message,
    stored_orders,
)

from exactly_once._claims import MAX_RACES
from exactly_once._ports import DocumentStore
from exactly_once._records import JsonMapping, StoredDocument
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.exceptions import RecordChangedError, TransientStoreError
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.payments import Charge, ChargeRequest
from orders.domain.saga import Fulfilment
from orders.exceptions import PaymentUnavailableError
from orders.service.billing import BillingConsumer
from orders.service.saga import CancelResult, OrderSaga
from orders.service.shipping import ShippingConsumer


@pytest.fixture
def orders() -> FakeFencedDocuments:
    # Charged, as billing records it: shipping ships only such an order.
    return stored_orders("o-1", charged=True)


@pytest.fixture
def inbox() -> FakeFencedDocuments:
    return FakeFencedDocuments()


@pytest.fixture
def payments() -> FakePaymentGateway:
    return FakePaymentGateway()


def saga_of(orders: FakeFencedDocuments | DocumentStore) -> OrderSaga:
    """The saga over the fake orders container, or over a racing view of it."""
    store = FakeDocumentStore(orders) if isinstance(orders, FakeFencedDocuments) else orders
    return OrderSaga(store, LAYOUT)


def billing(
    inbox: FakeFencedDocuments,
    payments: FakePaymentGateway,
    orders: FakeFencedDocuments | DocumentStore,
    owner: str = "b",
    **options: Any,
) -> BillingConsumer:
    # 60 s: the billing lease the settings give by default (BILLING_LEASE_SECONDS).
    options.setdefault("lease_seconds", 60.0)
    return BillingConsumer(
        billing_stores(inbox), payments, saga_of(orders), LAYOUT, owner=owner, **options
    )


def shipping(
    inbox: FakeFencedDocuments, orders: FakeFencedDocuments | DocumentStore
) -> ShippingConsumer:
    return ShippingConsumer(FakeDocumentStore(inbox), saga_of(orders), LAYOUT)


def outcome(decision: Decision) -> tuple[StrEnum, Settlement]:
    return decision.outcome, decision.settlement


def shipments(inbox: FakeFencedDocuments) -> list[dict[str, Any]]:
    return [d for d in inbox.documents.values() if d.get("type") == "shipment"]


def fulfilment(orders: FakeFencedDocuments, order_id: str = "o-1") -> Fulfilment:
    order = LAYOUT.saga_order(orders.documents[(order_id, order_id)])
    assert order is not None
    return order.fulfilment


# --- Cancel against ship: one document decides ---------------------------------------------


async def test_a_cancel_before_shipping_wins_and_shipping_skips_without_a_shipment(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    assert await saga_of(orders).cancel("o-1", "changed my mind") is CancelResult.CANCELLED

    decision = await shipping(inbox, orders).handle(event_message())

    assert outcome(decision) == (OrderOutcome.SKIPPED_CANCELLED, Settlement.COMPLETE)
    assert shipments(inbox) == []
    assert (
        "o-1",
        "o-1:outbox:OrderCancelled",
    ) in orders.documents  # the cancel's event, same batch


async def test_a_cancel_after_the_shipment_is_reserved_is_refused(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    await shipping(inbox, orders).handle(event_message())

    assert await saga_of(orders).cancel("o-1", None) is CancelResult.ALREADY_SHIPPED
    assert fulfilment(orders) is Fulfilment.SHIPPING
    assert ("o-1", "o-1:outbox:OrderCancelled") not in orders.documents
    assert len(shipments(inbox)) == 1


class ShipsDuringTheCancel(FakeDocumentStore):
    """The order document moves on between the cancel's read and its write: shipping
    reserves the shipment first (the interleaving of a real race, made deterministic)."""

    def __init__(self, source: FakeFencedDocuments, inbox: FakeFencedDocuments) -> None:
        super().__init__(source)
        self._inbox = inbox
        self.raced = False

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        if not self.raced:
            self.raced = True
            await shipping(self._inbox, self).handle(event_message())
        await super().replace_and_create(partition, document, etag=etag, created=created)


async def test_a_cancel_that_loses_the_race_to_shipping_sees_it_and_is_refused(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    racing = ShipsDuringTheCancel(orders, inbox)

    assert await saga_of(racing).cancel("o-1", None) is CancelResult.ALREADY_SHIPPED
    assert racing.raced and len(shipments(inbox)) == 1
    assert fulfilment(orders) is Fulfilment.SHIPPING


class CancelsDuringTheReservation(FakeDocumentStore):
    def __init__(self, source: FakeFencedDocuments) -> None:
        super().__init__(source)
        self.raced = False

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        if not self.raced:
            self.raced = True
            assert await saga_of(self).cancel("o-1", None) is CancelResult.CANCELLED
        return await super().replace(document, partition, etag=etag)


async def test_shipping_that_loses_the_race_to_a_cancel_makes_no_shipment(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    racing = CancelsDuringTheReservation(orders)

    decision = await shipping(inbox, racing).handle(event_message())

    assert racing.raced
    assert outcome(decision) == (OrderOutcome.SKIPPED_CANCELLED, Settlement.COMPLETE)
    assert shipments(inbox) == [] and fulfilment(orders) is Fulfilment.CANCELLED


class AlwaysMovedOn(FakeDocumentStore):
    """An order another writer rewrites between every read and write: each If-Match fails."""

    def __init__(self, source: FakeFencedDocuments) -> None:
        super().__init__(source)
        self.writes = 0

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        self.writes += 1
        raise RecordChangedError(str(document["id"]))

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        self.writes += 1
        raise RecordChangedError(str(document["id"]))


@pytest.mark.parametrize("step", ["cancel", "reserve", "charge"])
async def test_an_order_that_keeps_moving_is_given_back_after_the_cores_bound(
    orders: FakeFencedDocuments, step: str
) -> None:
    """The saga's races are the core's `update_fenced`: the same bound as every fenced
    update in the core, then a transient failure the broker (or the client) retries."""
    if step == "charge":
        orders = stored_orders("o-1", charged=False)
    moving = AlwaysMovedOn(orders)
    saga = saga_of(moving)

    with pytest.raises(TransientStoreError, match="kept changing"):
        if step == "cancel":
            await saga.cancel("o-1", None)
        elif step == "reserve":
            stored = await saga.order("o-1")
            assert stored is not None
            await saga.reserve_shipment(stored, "event-1")
        else:
            await saga.record_charge("o-1", "payment-1")

    assert moving.writes == MAX_RACES


async def test_a_second_cancel_under_another_key_finds_the_order_cancelled(
    orders: FakeFencedDocuments,
) -> None:
    saga = saga_of(orders)
    assert await saga.cancel("o-1", None) is CancelResult.CANCELLED
    assert await saga.cancel("o-1", "again") is CancelResult.ALREADY_CANCELLED
    assert await saga.cancel("o-404", None) is CancelResult.NOT_STORED


# --- Charge and refund ----------------------------------------------------------------------


async def test_an_order_cancelled_before_billing_is_never_charged(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await saga_of(orders).cancel("o-1", None)

    first = await billing(inbox, payments, orders).handle(event_message())
    refund = await billing(inbox, payments, orders).handle(cancel_message())

    assert outcome(first) == (OrderOutcome.SKIPPED_CANCELLED, Settlement.COMPLETE)
    assert outcome(refund) == (OrderOutcome.NOTHING_TO_REFUND, Settlement.COMPLETE)
    assert payments.requests == [] and payments.refund_requests == []


async def test_a_cancel_after_the_charge_refunds_it_once_in_full(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await billing(inbox, payments, orders).handle(event_message())
    await saga_of(orders).cancel("o-1", None)

    first = await billing(inbox, payments, orders, "x").handle(cancel_message())
    again = await billing(inbox, payments, orders, "y").handle(cancel_message())
    redelivered_charge = await billing(inbox, payments, orders, "z").handle(event_message())

    assert outcome(first) == outcome(again) == (OrderOutcome.REFUNDED, Settlement.COMPLETE)
    assert outcome(redelivered_charge) == (OrderOutcome.REFUNDED, Settlement.COMPLETE)
    [charge] = payments.charges.values()
    [refund] = payments.refunds.values()
    assert refund.payment_id == charge.payment_id and refund.amount == Decimal("12.5")
    assert refund.idempotency_key == "refund:o-1"
    assert inbox.documents[("o-1", "refund:o-1")]["status"] == "completed"


async def test_a_cancel_that_lands_during_the_charge_is_refunded_by_billing_itself(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    """The cancel commits after billing read the order and before it marked the charge: the
    cancel's own event may find the record in progress, so billing reads the order again after
    its charge and pays it back."""
    cancelled: list[CancelResult] = []

    def cancel_now(charge: Charge) -> None:
        document = orders.documents[("o-1", "o-1")]
        orders._stored(LAYOUT.order_cancelled(document, datetime.now(UTC), None))
        cancelled.append(CancelResult.CANCELLED)

    decision = await billing(inbox, payments, orders, after_charge=cancel_now).handle(
        event_message()
    )

    assert cancelled and outcome(decision) == (OrderOutcome.REFUNDED, Settlement.COMPLETE)
    assert len(payments.charges) == 1 and len(payments.refunds) == 1


async def test_a_cancel_event_finishes_a_charge_left_in_progress_then_refunds_it(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    """Billing charged and died before marking the record; its lease ends; the cancel's event
    takes the record over, asks again with the same key (the provider answers the first
    charge) and refunds it: never lost, never doubled."""
    payments.fail_next(PaymentUnavailableError("answer lost"), after_charge=True)
    crashed = await billing(inbox, payments, orders, "dead").handle(event_message())
    assert crashed.settlement is Settlement.ABANDON
    inbox.database_now_ms += 120_000  # the dead owner's lease is over
    await saga_of(orders).cancel("o-1", None)

    decision = await billing(inbox, payments, orders, "alive").handle(cancel_message())

    assert outcome(decision) == (OrderOutcome.REFUNDED, Settlement.COMPLETE)
    assert len(payments.charges) == 1 and len(payments.refunds) == 1


class FirstChargeHeld(FakePaymentGateway):
    """A provider whose first charge answers only when the test lets it."""

    def __init__(self) -> None:
        super().__init__()
        self.charging = asyncio.Event()
        self.answer = asyncio.Event()

    async def charge(self, request: ChargeRequest) -> Charge:
        if not self.charging.is_set():
            self.charging.set()
            await self.answer.wait()
        return await super().charge(request)


async def test_a_cancel_racing_its_orders_charge_in_the_same_process_waits_for_it(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    """One consumer (one process) gets the order's charge and then its cancel while the
    provider still works on the charge: the cancel waits for that delivery's claim (each
    delivery is an owner of its own) instead of asking the provider for the charge at once."""
    payments = FirstChargeHeld()
    accepting: list[asyncio.Task[Decision]] = []

    async def waited_for_the_charge(seconds: float) -> None:
        payments.answer.set()
        await accepting[0]

    consumer = billing(inbox, payments, orders, "p", sleep=waited_for_the_charge)
    accepting.append(asyncio.create_task(consumer.handle(event_message())))
    await payments.charging.wait()
    assert await saga_of(orders).cancel("o-1", None) is CancelResult.CANCELLED

    cancelled = await consumer.handle(cancel_message())
    payments.answer.set()
    accepted = await accepting[0]

    assert len(payments.requests) == 1  # one call for the charge, never two at once
    assert outcome(cancelled) == outcome(accepted) == (OrderOutcome.REFUNDED, Settlement.COMPLETE)
    assert len(payments.charges) == len(payments.refunds) == len(payments.refund_requests) == 1


async def test_a_provider_failing_after_the_refund_is_asked_again_with_the_same_key(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await billing(inbox, payments, orders).handle(event_message())
    await saga_of(orders).cancel("o-1", None)
    payments.fail_next_refund(PaymentUnavailableError("answer lost"), after_refund=True)

    failed = await billing(inbox, payments, orders, "b").handle(cancel_message())
    # The failed delivery kept its claim with its lease ended; by the database's next second
    # no live lease is left for the redelivery to wait for.
    inbox.database_now_ms += 1_000
    retried = await billing(inbox, payments, orders, "b").handle(cancel_message())

    assert failed.settlement is Settlement.ABANDON
    assert outcome(retried) == (OrderOutcome.REFUNDED, Settlement.COMPLETE)
    assert len(payments.refunds) == 1
    assert [r.idempotency_key for r in payments.refund_requests] == ["refund:o-1"] * 2


# --- Events the store does not vouch for ----------------------------------------------------


async def test_an_event_for_an_order_never_stored_is_dead_lettered_and_never_charged(
    inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    empty = FakeFencedDocuments()
    for consumer in (billing(inbox, payments, empty), shipping(inbox, empty)):
        decision = await consumer.handle(event_message("o-forged"))
        assert outcome(decision) == (Outcome.REJECTED, Settlement.DEAD_LETTER)
        assert decision.dead_letter_reason == "UnknownOrder"
    assert payments.requests == [] and shipments(inbox) == []


async def test_an_event_whose_amount_differs_from_the_stored_order_is_refused(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    forged = event_message("o-1", amount="0.01")
    for consumer in (billing(inbox, payments, orders), shipping(inbox, orders)):
        decision = await consumer.handle(forged)
        assert outcome(decision) == (Outcome.REJECTED, Settlement.DEAD_LETTER)
        assert decision.dead_letter_reason == "EventMismatch"
        assert "totalAmount" in (decision.dead_letter_description or "")
    assert payments.requests == [] and shipments(inbox) == []
    # The genuine event still gets its charge, with its own amount.
    genuine = await billing(inbox, payments, orders).handle(event_message())
    assert genuine.outcome is Outcome.PROCESSED
    assert [c.amount for c in payments.charges.values()] == [Decimal("12.5")]


async def test_a_cancel_event_for_an_order_that_is_not_cancelled_refunds_nothing(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await billing(inbox, payments, orders).handle(event_message())

    decision = await billing(inbox, payments, orders).handle(cancel_message())

    assert decision.dead_letter_reason == "EventMismatch"
    assert payments.refund_requests == []
