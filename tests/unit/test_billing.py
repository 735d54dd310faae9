"""The billing consumer's decisions over fakes: two phases, a downstream key, leases by the
database's clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from decimal import Decimal

import pytest
from fakes import (
    LAYOUT,
    FakeDocumentStore,
    FakeFencedDocuments,
    FakePaymentGateway,
    billing_stores,
    event_message,
    stored_orders,
)

from exactly_once.decisions import Outcome, Settlement
from orders.domain.events import order_event_id
from orders.domain.inbox import BillingStatus, payment_key
from orders.domain.payments import Charge, ChargeRequest
from orders.domain.received import ReceivedOrderMessage
from orders.exceptions import PaymentUnavailableError
from orders.service.billing import BillingConsumer
from orders.service.saga import OrderSaga
from orders.service.shipping import ShippingConsumer


class Clockwork:
    """A sleep that moves the fake database's clock instead of waiting."""

    def __init__(self, records: FakeFencedDocuments) -> None:
        self.records = records
        self.slept = 0.0
        self.on_sleep: list[Callable[[], None]] = []

    async def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.records.database_now_ms += int(seconds * 1000)
        for hook in self.on_sleep:
            hook()


@pytest.fixture
def records() -> FakeFencedDocuments:
    return FakeFencedDocuments()


@pytest.fixture
def payments() -> FakePaymentGateway:
    return FakePaymentGateway()


def billing(
    records: FakeFencedDocuments,
    payments: FakePaymentGateway,
    owner: str,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    max_wait_seconds: float = 30.0,
    orders: FakeFencedDocuments | None = None,
) -> BillingConsumer:
    return BillingConsumer(
        billing_stores(records),
        payments,
        OrderSaga(
            FakeDocumentStore(orders if orders is not None else stored_orders("o-1", "o-2")), LAYOUT
        ),
        LAYOUT,
        owner=owner,
        lease_seconds=10,
        sleep=sleep,
        max_wait_seconds=max_wait_seconds,
    )


def record_of(records: FakeFencedDocuments, order_id: str = "o-1") -> dict[str, object]:
    return records.documents[(order_id, f"billing:{order_event_id(order_id)}")]


async def test_a_new_event_is_charged_once_with_the_order_key_and_marked_completed(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    decision = await billing(records, payments, "a").handle(event_message())

    assert (decision.outcome, decision.settlement) == (Outcome.PROCESSED, Settlement.COMPLETE)
    [call] = payments.requests
    assert call.idempotency_key == "billing:o-1" and call.amount == Decimal("12.5")
    [charge] = payments.charges.values()
    stored = record_of(records)
    assert stored["status"] == "completed" and stored["paymentId"] == charge.payment_id


async def test_a_redelivery_after_completion_is_a_duplicate_without_a_call(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    await billing(records, payments, "a").handle(event_message())
    decision = await billing(records, payments, "b").handle(event_message())

    assert (decision.outcome, decision.settlement) == (Outcome.DUPLICATE, Settlement.COMPLETE)
    assert len(payments.requests) == 1


def in_progress_by(records: FakeFencedDocuments, owner: str) -> None:
    """What a worker that recorded `inProgress` and then stalled or died leaves behind."""
    records.documents.clear()
    doc = {
        "id": f"billing:{order_event_id('o-1')}",
        "orderId": "o-1",
        "type": "billing",
        "consumer": "billing",
        "messageId": order_event_id("o-1"),
        "status": "inProgress",
        "owner": owner,
        "leaseSeconds": 10,
        "amount": "12.5",
        "currency": "EUR",
        "paymentKey": "billing:o-1",
        "paymentId": None,
        "attempts": 1,
    }
    records._stored(doc)


async def test_a_live_lease_is_waited_for_and_its_owners_completion_decides(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    in_progress_by(records, "owner-a")
    clock = Clockwork(records)

    def owner_finishes() -> None:
        if clock.slept >= 2:
            record = record_of(records)
            records._stored({**record, "status": "completed", "paymentId": "pay-a"})

    clock.on_sleep.append(owner_finishes)
    decision = await billing(records, payments, "b", sleep=clock.sleep).handle(event_message())

    assert decision.outcome is Outcome.DUPLICATE and payments.requests == []
    assert 2 <= clock.slept < 10


async def test_a_live_lease_that_outlasts_the_wait_hands_the_message_back(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    in_progress_by(records, "owner-a")
    clock = Clockwork(records)
    consumer = billing(records, payments, "b", sleep=clock.sleep, max_wait_seconds=3)

    decision = await consumer.handle(event_message())

    assert (decision.outcome, decision.settlement) == (
        Outcome.IN_PROGRESS_ELSEWHERE,
        Settlement.ABANDON,
    )
    assert "owner-a" in (decision.error or "") and payments.requests == []


async def test_a_lease_ended_by_the_database_clock_is_taken_over_and_charged_with_the_same_key(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    # The first owner charged, then died before marking: the provider holds its charge.
    in_progress_by(records, "owner-a")
    first = await payments.charge(ChargeRequest("o-1", Decimal("12.5"), "EUR", "billing:o-1"))
    records.database_now_ms += 12_000  # past the 10 s lease, by the database's clock

    decision = await billing(records, payments, "b").handle(event_message())

    assert decision.outcome is Outcome.PROCESSED
    assert list(payments.charges.values()) == [first]  # the same charge, never a second one
    stored = record_of(records)
    # Every delivery owns the records it claims under its own name, `<consumer's owner>/<id>`.
    assert str(stored["owner"]).startswith("b/")
    assert (stored["attempts"], stored["paymentId"]) == (2, first.payment_id)


async def test_a_worker_clock_running_ahead_cannot_steal_a_live_lease(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    """Only the database's time counts: nothing in the consumer reads the local clock."""
    in_progress_by(records, "owner-a")
    clock = Clockwork(records)
    consumer = billing(records, payments, "b", sleep=clock.sleep, max_wait_seconds=1)

    decision = await consumer.handle(event_message())

    assert decision.outcome is Outcome.IN_PROGRESS_ELSEWHERE
    assert record_of(records)["owner"] == "owner-a"


async def test_a_refusal_dead_letters_with_a_reason_and_marks_the_record(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    payments.charges["billing:o-1"] = Charge(
        "pay-x", "o-1", Decimal("99"), "EUR", "billing:o-1", "2026-11-30T00:00:00+00:00"
    )

    decision = await billing(records, payments, "a").handle(event_message())

    assert (decision.outcome, decision.settlement) == (
        Outcome.REFUSED,
        Settlement.DEAD_LETTER,
    )
    assert decision.dead_letter_reason == "PaymentRefused"
    assert "idempotency-key-reused" in (decision.dead_letter_description or "")
    assert record_of(records)["status"] == BillingStatus.REFUSED.value


async def test_an_unavailable_provider_abandons_keeps_the_record_and_a_redelivery_goes_on_at_once(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    clock = Clockwork(records)
    consumer = billing(records, payments, "a", sleep=clock.sleep)
    payments.fail_next(PaymentUnavailableError("503"))

    first = await consumer.handle(event_message())
    # The provider may have charged: the record stays, in progress, its lease ended.
    kept = record_of(records)
    second = await consumer.handle(event_message())

    assert (first.outcome, first.settlement) == (Outcome.TRANSIENT_FAILURE, Settlement.ABANDON)
    assert (kept["status"], kept["leaseSeconds"]) == ("inProgress", 0.0)
    assert second.outcome is Outcome.PROCESSED
    # Within the second the database's clock counts leases in, never the lease of 10 s.
    assert clock.slept <= 1.0
    assert len(payments.charges) == 1 and len(payments.requests) == 2


async def test_a_malformed_event_is_dead_lettered_on_first_delivery(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    bad = ReceivedOrderMessage(
        body=json.dumps({"eventType": "OrderAccepted"}).encode(), message_id="x"
    )

    decision = await billing(records, payments, "a").handle(bad)

    assert (decision.outcome, decision.dead_letter_reason) == (Outcome.REJECTED, "SchemaViolation")
    assert payments.requests == [] and records.documents == {}


async def test_one_consumers_record_never_blocks_the_others(
    records: FakeFencedDocuments, payments: FakePaymentGateway
) -> None:
    """A billing record stuck in progress in the inbox store shipping writes to as well;
    shipping still ships the order (charged: what shipping waits for is on the order)."""
    in_progress_by(records, "owner-a")
    orders = stored_orders(charged=True)

    shipped = await ShippingConsumer(
        FakeDocumentStore(records), OrderSaga(FakeDocumentStore(orders), LAYOUT), LAYOUT
    ).handle(event_message())
    again = await ShippingConsumer(
        FakeDocumentStore(records), OrderSaga(FakeDocumentStore(orders), LAYOUT), LAYOUT
    ).handle(event_message())

    assert shipped.outcome is Outcome.PROCESSED and again.outcome is Outcome.DUPLICATE
    assert record_of(records)["status"] == "inProgress"
    assert ("o-1", "o-1:shipment") in records.documents


def test_the_payment_key_names_the_order_in_printable_ascii() -> None:
    assert payment_key("o-1") == "billing:o-1"
    unicode_key = payment_key("commande-é")
    assert unicode_key.isascii() and unicode_key.startswith("billing:sha256:")
    assert unicode_key == payment_key("commande-é") != payment_key("commande-è")
