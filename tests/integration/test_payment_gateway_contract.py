"""One contract, two gateways: the fake of the `PaymentGateway` port and `HttpPaymentGateway`
over the real stand-in, so the fake the billing and refund tests use cannot drift from the
adapter. Charges first, then refunds."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal

import pytest
from fakes import FakePaymentGateway
from payment_service import StandinProcess, running_standin

from orders.adapters.payments_http import HttpPaymentGateway
from orders.domain.payments import Charge, ChargeRequest, RefundRequest
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
    async with HttpPaymentGateway(standin.url, timeout_seconds=5, token=standin.token) as http:
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


# --- refunds ------------------------------------------------------------------------------------


async def charged(gateway: PaymentGateway, amount: str = "12.50") -> Charge:
    return await gateway.charge(new_request(amount))


def refund_of(charge: Charge, amount: str | None = None, **changes: str) -> RefundRequest:
    """The refund the saga asks for: key `refund:<orderId>`, the full amount unless told."""
    return RefundRequest(
        payment_id=changes.get("payment_id", charge.payment_id),
        order_id=changes.get("order_id", charge.order_id),
        amount=charge.amount if amount is None else Decimal(amount),
        currency=changes.get("currency", charge.currency),
        idempotency_key=changes.get("idempotency_key", f"refund:{charge.order_id}"),
    )


async def test_a_refund_refunds_exactly_what_was_asked_once(gateway: PaymentGateway) -> None:
    charge = await charged(gateway, "12.50")
    request = refund_of(charge)

    refund = await gateway.refund(request)
    again = await gateway.refund(request)
    respelt = await gateway.refund(refund_of(charge, "12.5000"))

    assert refund.answers(request)
    assert refund.refund_id
    assert (refund.payment_id, refund.order_id, refund.amount) == (
        charge.payment_id,
        charge.order_id,
        Decimal("12.5"),
    )
    assert again == respelt == refund
    assert await gateway.refunds_for(charge.order_id) == [refund]


async def test_the_replay_wins_after_other_keys_refunded_the_rest(gateway: PaymentGateway) -> None:
    charge = await charged(gateway, "10")
    first = await gateway.refund(refund_of(charge, "4"))
    rest = await gateway.refund(refund_of(charge, "6", idempotency_key=f"rest:{charge.order_id}"))

    replay = await gateway.refund(refund_of(charge, "4"))

    assert replay == first
    assert await gateway.refunds_for(charge.order_id) == [first, rest]


@pytest.mark.parametrize("change", ["amount", "currency", "payment_id"])
async def test_the_key_reused_for_another_refund_is_refused_with_422(
    gateway: PaymentGateway, change: str
) -> None:
    charge = await charged(gateway, "10")
    other = await charged(gateway, "10")
    first = await gateway.refund(refund_of(charge, "5"))
    changed = {
        "amount": refund_of(charge, "6"),
        "currency": refund_of(charge, "5", currency="USD"),
        "payment_id": refund_of(charge, "5", payment_id=other.payment_id),
    }[change]

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.refund(changed)

    assert (refused.value.reason, refused.value.status) == ("idempotency-key-reused", 422)
    assert first.refund_id in refused.value.description
    assert await gateway.refunds_for(charge.order_id) == [first]
    assert await gateway.refunds_for(other.order_id) == []


@pytest.mark.parametrize(
    ("amount", "changes", "reason", "status"),
    [
        ("5", {"payment_id": "pay_unknown"}, "unknown-payment", 404),
        ("5", {"currency": "USD"}, "currency-mismatch", 422),
        ("10.01", {}, "refund-exceeds-payment", 422),
        ("0", {}, "invalid-request", 400),
        ("-1", {}, "invalid-request", 400),
    ],
)
async def test_a_refund_the_payment_cannot_take_is_refused_and_refunds_nothing(
    gateway: PaymentGateway, amount: str, changes: dict[str, str], reason: str, status: int
) -> None:
    charge = await charged(gateway, "10")

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.refund(refund_of(charge, amount, **changes))

    assert (refused.value.reason, refused.value.status) == (reason, status)
    assert await gateway.refunds_for(charge.order_id) == []
    # Nothing was recorded under the key: the right refund with it still goes through.
    assert (await gateway.refund(refund_of(charge))).amount == Decimal("10")


async def test_a_payment_refunded_in_full_by_other_keys_is_already_refunded(
    gateway: PaymentGateway,
) -> None:
    charge = await charged(gateway, "10")
    parts = [
        await gateway.refund(
            refund_of(charge, "2.5", idempotency_key=f"part-{n}:{charge.order_id}")
        )
        for n in range(4)
    ]

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.refund(refund_of(charge, "0.01"))

    assert (refused.value.reason, refused.value.status) == ("already-refunded", 409)
    assert await gateway.refunds_for(charge.order_id) == parts


async def test_a_refund_asked_for_another_order_than_the_payments_is_a_mismatch(
    gateway: PaymentGateway,
) -> None:
    charge = await charged(gateway)

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.refund(refund_of(charge, order_id="o-not-the-payments"))

    # The provider takes no orderId: it refunded the payment, and says whose it is.
    assert refused.value.reason == "refund-mismatch"
    assert [r.order_id for r in await gateway.refunds_for(charge.order_id)] == [charge.order_id]


@pytest.mark.parametrize("key", ["", "k" * 256, "refund:caf\u00e9", "line\nbreak"])
async def test_a_refund_key_no_provider_takes_is_refused_and_refunds_nothing(
    gateway: PaymentGateway, key: str
) -> None:
    charge = await charged(gateway)

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.refund(refund_of(charge, idempotency_key=key))

    assert refused.value.reason == "invalid-idempotency-key"
    assert await gateway.refunds_for(charge.order_id) == []


async def test_an_order_without_refunds_lists_none(gateway: PaymentGateway) -> None:
    charge = await charged(gateway)

    assert await gateway.refunds_for(charge.order_id) == []
    assert await gateway.refunds_for(f"o-{uuid.uuid4().hex}") == []


async def test_the_fakes_failure_after_refunding_keeps_the_refund_for_the_retry() -> None:
    fake = FakePaymentGateway()
    request = refund_of(await charged(fake))
    fake.fail_next_refund(PaymentUnavailableError("500"), after_refund=True)

    with pytest.raises(PaymentUnavailableError):
        await fake.refund(request)
    recorded = await fake.refunds_for(request.order_id)

    assert len(recorded) == 1
    assert [await fake.refund(request)] == recorded
    assert len(fake.refund_requests) == 2


async def test_the_fakes_failure_before_refunding_refunds_nothing() -> None:
    fake = FakePaymentGateway()
    request = refund_of(await charged(fake))
    fake.fail_next_refund(PaymentUnavailableError("503"))

    with pytest.raises(PaymentUnavailableError):
        await fake.refund(request)
    nothing = await fake.refunds_for(request.order_id)

    assert nothing == []
    assert [await fake.refund(request)] == await fake.refunds_for(request.order_id)
