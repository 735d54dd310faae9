"""Shipping's decisions over fakes: it ships only a charged order, waiting for billing's charge
a bounded time before handing the event back, and leaves a cancel to billing. (Cancel against
ship is the saga's: test_saga_decisions.py; a refused charge: test_payment_failed.py.)"""

from __future__ import annotations

from fakes import (
    LAYOUT,
    FakeDocumentStore,
    FakeFencedDocuments,
    FakePaymentGateway,
    billing_over,
    cancel_message,
    event_message,
    fulfilment_of,
    shipments_in,
    shipping_over,
    stored_orders,
)

from exactly_once.decisions import Outcome, Settlement
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.saga import Fulfilment
from orders.service.saga import OrderSaga


async def test_shipping_before_billing_waits_for_the_charge_then_ships() -> None:
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    waits: list[float] = []

    async def billing_charges_meanwhile(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 1:  # billing's delivery lands while shipping waits
            await billing_over(inbox, payments, orders).handle(event_message())

    shipped = await shipping_over(inbox, orders, sleep=billing_charges_meanwhile).handle(
        event_message()
    )

    assert shipped.outcome is Outcome.PROCESSED
    assert len(waits) == 1
    assert len(shipments_in(inbox)) == 1 and len(payments.charges) == 1


async def test_shipping_hands_the_event_back_while_no_charge_is_recorded() -> None:
    orders, inbox = stored_orders("o-1"), FakeFencedDocuments()
    waits: list[float] = []

    async def nothing_happens(seconds: float) -> None:
        waits.append(seconds)

    shipped = await shipping_over(
        inbox, orders, sleep=nothing_happens, charge_wait_seconds=2
    ).handle(event_message())

    assert (shipped.outcome, shipped.settlement) == (
        OrderOutcome.AWAITING_CHARGE,
        Settlement.ABANDON,
    )
    assert sum(waits) == 2  # bounded: the broker offers it again
    assert shipments_in(inbox) == [] and fulfilment_of(orders) is Fulfilment.OPEN


async def test_shipping_ignores_a_cancel_event() -> None:
    orders, inbox = stored_orders("o-1", charged=True), FakeFencedDocuments()
    await OrderSaga(FakeDocumentStore(orders), LAYOUT).cancel("o-1", None)
    decision = await shipping_over(inbox, orders).handle(cancel_message())
    assert (decision.outcome, decision.settlement) == (OrderOutcome.IGNORED, Settlement.COMPLETE)
