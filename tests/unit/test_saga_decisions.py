"""The order saga's decisions over fakes: cancel and ship decided on the order document, a
charge of a cancelled order refunded exactly once, events verified against the store."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from fakes import (
    LAYOUT,
    FakeFencedDocuments,
    FakePaymentGateway,
    cancel_message,
    event_message,
    stored_orders,
)

from orders.domain.leases import StampedDocument
from orders.domain.outcomes import Decision, Outcome, Settlement
from orders.domain.payments import Charge
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


def billing(
    inbox: FakeFencedDocuments,
    payments: FakePaymentGateway,
    orders: FakeFencedDocuments,
    owner: str = "b",
    **options: Any,
) -> BillingConsumer:
    # 60 s: the billing lease the settings give by default (BILLING_LEASE_SECONDS).
    options.setdefault("lease_seconds", 60.0)
    return BillingConsumer(
        inbox, payments, OrderSaga(orders, LAYOUT), LAYOUT, owner=owner, **options
    )


def shipping(inbox: FakeFencedDocuments, orders: FakeFencedDocuments) -> ShippingConsumer:
    return ShippingConsumer(inbox, OrderSaga(orders, LAYOUT), LAYOUT)


def outcome(decision: Decision) -> tuple[Outcome, Settlement]:
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
    assert (
        await OrderSaga(orders, LAYOUT).cancel("o-1", "changed my mind") is CancelResult.CANCELLED
    )

    decision = await shipping(inbox, orders).handle(event_message())

    assert outcome(decision) == (Outcome.SKIPPED_CANCELLED, Settlement.COMPLETE)
    assert shipments(inbox) == []
    assert (
        "o-1",
        "o-1:outbox:OrderCancelled",
    ) in orders.documents  # the cancel's event, same batch


async def test_a_cancel_after_the_shipment_is_reserved_is_refused(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    await shipping(inbox, orders).handle(event_message())

    assert await OrderSaga(orders, LAYOUT).cancel("o-1", None) is CancelResult.ALREADY_SHIPPED
    assert fulfilment(orders) is Fulfilment.SHIPPING
    assert ("o-1", "o-1:outbox:OrderCancelled") not in orders.documents
    assert len(shipments(inbox)) == 1


class ShipsDuringTheCancel(FakeFencedDocuments):
    """The order document moves on between the cancel's read and its write: shipping
    reserves the shipment first (the interleaving of a real race, made deterministic)."""

    def __init__(self, source: FakeFencedDocuments, inbox: FakeFencedDocuments) -> None:
        super().__init__()
        self.documents = source.documents
        self._inbox = inbox
        self.raced = False

    async def replace_and_create(
        self,
        partition_key: str,
        replaced: dict[str, Any],
        *,
        etag: str,
        created: list[dict[str, Any]],
    ) -> None:
        if not self.raced:
            self.raced = True
            await shipping(self._inbox, self).handle(event_message())
        await super().replace_and_create(partition_key, replaced, etag=etag, created=created)


async def test_a_cancel_that_loses_the_race_to_shipping_sees_it_and_is_refused(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    racing = ShipsDuringTheCancel(orders, inbox)

    assert await OrderSaga(racing, LAYOUT).cancel("o-1", None) is CancelResult.ALREADY_SHIPPED
    assert racing.raced and len(shipments(inbox)) == 1
    assert fulfilment(orders) is Fulfilment.SHIPPING


class CancelsDuringTheReservation(FakeFencedDocuments):
    def __init__(self, source: FakeFencedDocuments) -> None:
        super().__init__()
        self.documents = source.documents
        self.raced = False

    async def replace(self, document: dict[str, Any], *, etag: str) -> StampedDocument:
        if not self.raced:
            self.raced = True
            assert await OrderSaga(self, LAYOUT).cancel("o-1", None) is CancelResult.CANCELLED
        return await super().replace(document, etag=etag)


async def test_shipping_that_loses_the_race_to_a_cancel_makes_no_shipment(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments
) -> None:
    racing = CancelsDuringTheReservation(orders)

    decision = await shipping(inbox, racing).handle(event_message())

    assert racing.raced
    assert outcome(decision) == (Outcome.SKIPPED_CANCELLED, Settlement.COMPLETE)
    assert shipments(inbox) == [] and fulfilment(orders) is Fulfilment.CANCELLED


async def test_a_second_cancel_under_another_key_finds_the_order_cancelled(
    orders: FakeFencedDocuments,
) -> None:
    saga = OrderSaga(orders, LAYOUT)
    assert await saga.cancel("o-1", None) is CancelResult.CANCELLED
    assert await saga.cancel("o-1", "again") is CancelResult.ALREADY_CANCELLED
    assert await saga.cancel("o-404", None) is CancelResult.NOT_STORED


# --- Charge and refund ----------------------------------------------------------------------


async def test_an_order_cancelled_before_billing_is_never_charged(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await OrderSaga(orders, LAYOUT).cancel("o-1", None)

    first = await billing(inbox, payments, orders).handle(event_message())
    refund = await billing(inbox, payments, orders).handle(cancel_message())

    assert outcome(first) == (Outcome.SKIPPED_CANCELLED, Settlement.COMPLETE)
    assert outcome(refund) == (Outcome.NOTHING_TO_REFUND, Settlement.COMPLETE)
    assert payments.requests == [] and payments.refund_requests == []


async def test_a_cancel_after_the_charge_refunds_it_once_in_full(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await billing(inbox, payments, orders).handle(event_message())
    await OrderSaga(orders, LAYOUT).cancel("o-1", None)

    first = await billing(inbox, payments, orders, "x").handle(cancel_message())
    again = await billing(inbox, payments, orders, "y").handle(cancel_message())
    redelivered_charge = await billing(inbox, payments, orders, "z").handle(event_message())

    assert outcome(first) == outcome(again) == (Outcome.REFUNDED, Settlement.COMPLETE)
    assert outcome(redelivered_charge) == (Outcome.REFUNDED, Settlement.COMPLETE)
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

    assert cancelled and outcome(decision) == (Outcome.REFUNDED, Settlement.COMPLETE)
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
    await OrderSaga(orders, LAYOUT).cancel("o-1", None)

    decision = await billing(inbox, payments, orders, "alive").handle(cancel_message())

    assert outcome(decision) == (Outcome.REFUNDED, Settlement.COMPLETE)
    assert len(payments.charges) == 1 and len(payments.refunds) == 1


async def test_a_provider_failing_after_the_refund_is_asked_again_with_the_same_key(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await billing(inbox, payments, orders).handle(event_message())
    await OrderSaga(orders, LAYOUT).cancel("o-1", None)
    payments.fail_next_refund(PaymentUnavailableError("answer lost"), after_refund=True)

    failed = await billing(inbox, payments, orders, "b").handle(cancel_message())
    retried = await billing(inbox, payments, orders, "b").handle(cancel_message())

    assert failed.settlement is Settlement.ABANDON
    assert outcome(retried) == (Outcome.REFUNDED, Settlement.COMPLETE)
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
