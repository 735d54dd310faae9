"""The console's order lookup gathers every document of an order: the orders container, the
consumers' inbox container, and the payment service's charges."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from fakes import LAYOUT, FakeOrderReader, FakeOrderStore, FakePaymentGateway

from orders.domain.payments import ChargeRequest
from orders.exceptions import PaymentUnavailableError
from orders.service.console import OperationsConsole


def console_over(
    orders: FakeOrderStore, inbox: FakeOrderStore, payments: FakePaymentGateway
) -> OperationsConsole:
    return OperationsConsole(
        [],
        counter=None,  # type: ignore[arg-type]  # not used by the order lookup
        dead_letter_queue=lambda source: None,  # type: ignore[arg-type,return-value]
        reader=FakeOrderReader(orders),
        decisions=None,
        layout=LAYOUT,
        duplicate_window=timedelta(minutes=10),
        inbox=FakeOrderReader(inbox),
        payments=payments,
    )


async def test_order_inbox_and_payment_documents_come_together() -> None:
    orders, inbox, payments = FakeOrderStore(), FakeOrderStore(), FakePaymentGateway()
    orders.seed_document("o-1", {"id": "o-1", "orderId": "o-1", "type": "order"})
    inbox.seed_document("o-1", {"id": "shipping:m", "orderId": "o-1", "type": "inbox"})
    inbox.seed_document("o-1", {"id": "o-1:shipment", "orderId": "o-1", "type": "shipment"})
    charge = await payments.charge(ChargeRequest("o-1", Decimal("2.5"), "EUR", "billing:o-1"))

    found = await console_over(orders, inbox, payments).order_documents("o-1")

    assert [d["type"] for d in found] == ["order", "inbox", "shipment", "payment"]
    assert found[-1] == {
        "type": "payment",
        "id": charge.payment_id,
        "orderId": "o-1",
        "amount": "2.5",
        "currency": "EUR",
        "idempotencyKey": "billing:o-1",
        "createdAt": charge.created_at,
    }


async def test_an_unavailable_payment_service_is_shown_not_raised() -> None:
    orders, payments = FakeOrderStore(), FakePaymentGateway()

    async def down(order_id: str) -> list[object]:
        raise PaymentUnavailableError("connection refused")

    payments.charges_for = down  # type: ignore[assignment,method-assign]
    found = await console_over(orders, FakeOrderStore(), payments).order_documents("o-1")

    assert found == [{"type": "payment", "unavailable": "connection refused"}]
