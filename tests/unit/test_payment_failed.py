"""No shipment without a charge: a refused charge ends the order in `payment_failed`, shipping
waits for billing's charge and never ships without it, and `orders verify` counts an order
shipped without a charge (`shipped_without_charge`) or failed yet charged.

The hole this closes: the payment provider refused to charge an order (400), billing
dead-lettered the event with `PaymentRefused`, shipping shipped the order anyway, and no
invariant noticed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from fakes import (
    LAYOUT,
    FakeDocumentStore,
    FakeFencedDocuments,
    FakePaymentGateway,
    billing_over,
    event_message,
    fulfilment_of,
    shipments_in,
    shipping_over,
    stored_orders,
)

from exactly_once.decisions import Outcome, Settlement
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.payments import Charge
from orders.domain.saga import Fulfilment
from orders.exceptions import PaymentRefusedError
from orders.service.order_lookup import order_view
from orders.service.saga import CancelResult, OrderSaga
from orders.service.verify_saga import audit_saga


def view(orders: FakeFencedDocuments, order_id: str = "o-1") -> dict[str, Any]:
    partition = LAYOUT.order_partition(
        [doc for (key, _), doc in orders.documents.items() if key == order_id]
    )
    shown = order_view(partition)
    assert shown is not None
    return shown


def refused() -> PaymentRefusedError:
    return PaymentRefusedError("invalid-request", "orderId must be printable", status=400)


async def test_a_refused_charge_ends_the_order_payment_failed_and_it_never_ships() -> None:
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    payments.fail_next(refused())

    billed = await billing_over(inbox, payments, orders).handle(event_message())
    shipped = await shipping_over(inbox, orders).handle(event_message())

    assert (billed.outcome, billed.settlement) == (
        Outcome.REFUSED,
        Settlement.DEAD_LETTER,
    )
    assert billed.dead_letter_reason == "PaymentRefused"
    assert fulfilment_of(orders) is Fulfilment.PAYMENT_FAILED
    assert (shipped.outcome, shipped.settlement) == (
        OrderOutcome.SKIPPED_PAYMENT_FAILED,
        Settlement.COMPLETE,
    )
    assert shipments_in(inbox) == []
    assert view(orders)["status"] == "payment_failed"  # what GET answers


async def test_payment_failed_is_in_the_order_history_when_the_refusal_ended_it() -> None:
    """GET's `statusHistory` (and so `orders show` and the console timeline) names the end the
    order came to: placed, then payment_failed at the time billing recorded the refusal."""
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    payments.fail_next(refused())

    await billing_over(inbox, payments, orders).handle(event_message())

    shown = view(orders)
    [order_document] = [d for d in orders.documents.values() if d.get("type") == "order"]
    assert [(c["status"], c["version"]) for c in shown["statusHistory"]] == [
        ("placed", 1),
        ("payment_failed", 2),
    ]
    assert shown["statusHistory"][-1]["at"] == order_document["fulfilment"]["at"]


async def test_a_charge_made_after_the_cause_was_fixed_reopens_the_order_and_it_ships() -> None:
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    payments.fail_next(refused())
    await billing_over(inbox, payments, orders).handle(event_message())
    await shipping_over(inbox, orders).handle(event_message())

    # The operator fixed the cause and had the event published again (docs/operations.md).
    again = await billing_over(inbox, payments, orders).handle(event_message())
    shipped = await shipping_over(inbox, orders).handle(event_message())

    assert again.outcome is Outcome.PROCESSED
    assert fulfilment_of(orders) is Fulfilment.SHIPPING
    assert "payment_failed" not in [c["status"] for c in view(orders)["statusHistory"]]
    assert shipped.outcome is Outcome.PROCESSED and len(shipments_in(inbox)) == 1


async def test_an_order_whose_payment_failed_may_still_be_cancelled() -> None:
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    payments.fail_next(refused())
    await billing_over(inbox, payments, orders).handle(event_message())

    assert (
        await OrderSaga(FakeDocumentStore(orders), LAYOUT).cancel("o-1", None)
        is CancelResult.CANCELLED
    )
    assert fulfilment_of(orders) is Fulfilment.CANCELLED


# --- orders verify: the invariants that see it -----------------------------------------------


def charge_of(order_id: str) -> Charge:
    return Charge(
        payment_id=f"pay-{order_id}",
        order_id=order_id,
        amount=Decimal("12.5"),
        currency="EUR",
        idempotency_key=f"billing:{order_id}",
        created_at=datetime.now(UTC).isoformat(),
    )


async def audited(
    orders: FakeFencedDocuments, inbox: FakeFencedDocuments, charges: list[Charge]
) -> dict[str, int]:
    partitions = LAYOUT.order_partitions(orders.documents.values())
    shipped = LAYOUT.inbox_partitions(inbox.documents.values())
    found = audit_saga(partitions, shipped, charges, [], run_prefix="o-", check_status=True)
    return found.to_json()


async def test_verify_counts_an_order_shipped_without_a_charge() -> None:
    """A run of the old design: shipping shipped, the provider holds no charge."""
    orders, inbox = stored_orders("o-1", "o-2", charged=True), FakeFencedDocuments()
    for order_id in ("o-1", "o-2"):
        await shipping_over(inbox, orders).handle(event_message(order_id))

    found = await audited(orders, inbox, [charge_of("o-2")])

    assert found["shipped_without_charge"] == 1
    assert found["payment_failed_but_charged"] == 0


async def test_verify_counts_an_order_in_payment_failed_that_holds_a_charge() -> None:
    orders = stored_orders("o-1")
    await OrderSaga(FakeDocumentStore(orders), LAYOUT).record_payment_failed("o-1", "declined")

    found = await audited(orders, FakeFencedDocuments(), [charge_of("o-1")])

    assert found["payment_failed_but_charged"] == 1
    assert found["shipped_without_charge"] == 0


async def test_verify_passes_a_refused_order_that_ended_payment_failed() -> None:
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    payments.fail_next(refused())
    await billing_over(inbox, payments, orders).handle(event_message())
    await shipping_over(inbox, orders).handle(event_message())

    found = await audited(orders, inbox, list(payments.charges.values()))

    assert not any(found.values()), found
