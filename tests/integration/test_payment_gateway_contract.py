"""One contract, two gateways: the fake of the `PaymentGateway` port and `HttpPaymentGateway`
over the real stand-in, so the fake the billing tests use cannot drift from the adapter."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal

import pytest
from fakes import FakePaymentGateway
from payment_service import StandinProcess, running_standin

from orders.adapters.payments_http import HttpPaymentGateway
from orders.domain.payments import ChargeRequest
from orders.exceptions import PaymentRefusedError, PaymentUnavailableError
from orders.service.payment_port import PaymentGateway


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinProcess]:
    with running_standin() as running:
        yield running


@pytest.fixture(params=["fake", "http"])
async def gateway(
    request: pytest.FixtureRequest, standin: StandinProcess
) -> AsyncIterator[PaymentGateway]:
    if request.param == "fake":
        yield FakePaymentGateway()
        return
    async with HttpPaymentGateway(standin.url, timeout_seconds=5) as http:
        yield http


def new_request(amount: str = "12.50", key_prefix: str = "billing") -> ChargeRequest:
    order_id = f"o-{uuid.uuid4().hex[:12]}"
    return ChargeRequest(order_id, Decimal(amount), "EUR", f"{key_prefix}:{order_id}")


async def test_a_new_key_charges_exactly_what_was_asked(gateway: PaymentGateway) -> None:
    request = new_request("12.50")

    charge = await gateway.charge(request)

    assert charge.answers(request)
    assert charge.amount == Decimal("12.5")
    assert charge.payment_id
    assert await gateway.charges_for(request.order_id) == [charge]


async def test_the_same_request_again_is_the_same_charge(gateway: PaymentGateway) -> None:
    request = new_request("7")
    first = await gateway.charge(request)

    again = await gateway.charge(request)
    respelt = await gateway.charge(
        ChargeRequest(request.order_id, Decimal("7.00"), "EUR", request.idempotency_key)
    )

    assert again == respelt == first
    assert await gateway.charges_for(request.order_id) == [first]


@pytest.mark.parametrize("field", ["amount", "currency", "order_id"])
async def test_the_key_reused_for_another_charge_is_refused_with_422(
    gateway: PaymentGateway, field: str
) -> None:
    request = new_request("10")
    first = await gateway.charge(request)
    changed = {
        "amount": ChargeRequest(request.order_id, Decimal("11"), "EUR", request.idempotency_key),
        "currency": ChargeRequest(request.order_id, Decimal("10"), "USD", request.idempotency_key),
        "order_id": ChargeRequest("o-other", Decimal("10"), "EUR", request.idempotency_key),
    }[field]

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.charge(changed)

    assert (refused.value.reason, refused.value.status) == ("idempotency-key-reused", 422)
    assert first.payment_id in refused.value.description
    assert await gateway.charges_for(request.order_id) == [first]
    assert await gateway.charges_for("o-other") == []


async def test_two_keys_for_one_order_are_two_charges_oldest_first(
    gateway: PaymentGateway,
) -> None:
    request = new_request()
    first = await gateway.charge(request)
    second = await gateway.charge(
        ChargeRequest(request.order_id, request.amount, "EUR", request.idempotency_key + ":2")
    )

    assert first.payment_id != second.payment_id
    assert await gateway.charges_for(request.order_id) == [first, second]


@pytest.mark.parametrize("key", ["", "k" * 256, "billing:caf\u00e9", "line\nbreak"])
async def test_a_key_no_provider_takes_is_refused_and_charges_nothing(
    gateway: PaymentGateway, key: str
) -> None:
    request = new_request()

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.charge(ChargeRequest(request.order_id, request.amount, "EUR", key))

    assert refused.value.reason == "invalid-idempotency-key"
    assert await gateway.charges_for(request.order_id) == []


async def test_an_order_without_charges_lists_none(gateway: PaymentGateway) -> None:
    assert await gateway.charges_for(f"o-{uuid.uuid4().hex}") == []


async def test_the_fakes_failure_after_charging_keeps_the_charge_for_the_retry() -> None:
    fake = FakePaymentGateway()
    request = new_request()
    fake.fail_next(PaymentUnavailableError("500"), after_charge=True)

    with pytest.raises(PaymentUnavailableError):
        await fake.charge(request)
    recorded = await fake.charges_for(request.order_id)

    assert [await fake.charge(request)] == recorded
    assert len(fake.requests) == 2
