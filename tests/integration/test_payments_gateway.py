"""`HttpPaymentGateway` against the real stand-in (every answer and fault), and against a
provider that answers garbage, so each answer maps to a Charge or Refund or to one of the two
errors."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from decimal import Decimal

import aiohttp
import httpx
import pytest
from aiohttp import web
from payment_service import StandinProcess, running_standin
from servers import free_port

from orders.adapters import payments_http
from orders.adapters.payments_http import HttpPaymentGateway
from orders.domain.payments import Charge, ChargeRequest, Refund, RefundRequest
from orders.exceptions import PaymentRefusedError, PaymentUnavailableError


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinProcess]:
    with running_standin() as running:
        yield running


@pytest.fixture
def faults(standin: StandinProcess) -> Iterator[Callable[..., None]]:
    with httpx.Client(base_url=standin.url, headers=standin.fault_headers()) as client:

        def add(**rule: object) -> None:
            assert client.post("/faults", json=rule).status_code == 201

        yield add
        client.delete("/faults")


@pytest.fixture
async def gateway(standin: StandinProcess) -> AsyncIterator[HttpPaymentGateway]:
    async with HttpPaymentGateway(
        standin.url, timeout_seconds=5, token=standin.token
    ) as open_gateway:
        yield open_gateway


def request_for(amount: str = "12.50", order_id: str | None = None) -> ChargeRequest:
    order_id = order_id or f"o-{uuid.uuid4().hex[:12]}"
    return ChargeRequest(order_id, Decimal(amount), "EUR", f"billing:{order_id}")


async def test_a_charge_comes_back_as_a_charge_and_a_retry_as_the_same_one(
    gateway: HttpPaymentGateway,
) -> None:
    request = request_for("12.50")

    first = await gateway.charge(request)
    again = await gateway.charge(request)
    respelt = await gateway.charge(
        ChargeRequest(request.order_id, Decimal("12.5000"), "EUR", request.idempotency_key)
    )

    assert first.payment_id.startswith("pay_")
    assert (first.order_id, first.amount, first.currency) == (
        request.order_id,
        Decimal("12.5"),
        "EUR",
    )
    assert first.idempotency_key == request.idempotency_key
    assert again == first == respelt
    assert await gateway.charges_for(request.order_id) == [first]


async def test_the_key_reused_for_another_amount_is_refused_for_good(
    gateway: HttpPaymentGateway,
) -> None:
    request = request_for("10")
    first = await gateway.charge(request)

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.charge(
            ChargeRequest(request.order_id, Decimal("11"), "EUR", request.idempotency_key)
        )

    assert refused.value.reason == "idempotency-key-reused"
    assert refused.value.status == 422
    assert first.payment_id in refused.value.description
    assert await gateway.charges_for(request.order_id) == [first]


async def test_a_request_the_provider_refuses_as_invalid_is_refused_for_good(
    gateway: HttpPaymentGateway,
) -> None:
    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.charge(request_for("1.123456"))  # more decimals than a provider takes

    assert (refused.value.reason, refused.value.status) == ("invalid-request", 400)


async def test_refused_by_the_provider_is_unavailable_and_the_retry_charges_once(
    gateway: HttpPaymentGateway, faults: Callable[..., None]
) -> None:
    request = request_for()
    faults(kind="refuse", order_id=request.order_id)

    with pytest.raises(PaymentUnavailableError, match="503"):
        await gateway.charge(request)
    assert await gateway.charges_for(request.order_id) == []
    charged = await gateway.charge(request)

    assert await gateway.charges_for(request.order_id) == [charged]


async def test_fail_after_charge_then_a_retry_returns_the_same_payment(
    gateway: HttpPaymentGateway, faults: Callable[..., None]
) -> None:
    request = request_for()
    faults(kind="fail_after_charge", order_id=request.order_id)

    with pytest.raises(PaymentUnavailableError, match="500"):
        await gateway.charge(request)
    recorded = await gateway.charges_for(request.order_id)
    retried = await gateway.charge(request)

    assert len(recorded) == 1
    assert retried == recorded[0]


async def test_an_answer_later_than_the_timeout_is_unavailable_and_the_retry_gets_that_charge(
    standin: StandinProcess, gateway: HttpPaymentGateway, faults: Callable[..., None]
) -> None:
    request = request_for()
    faults(kind="delay", delay_seconds=5, order_id=request.order_id)

    async with HttpPaymentGateway(
        standin.url, timeout_seconds=0.5, token=standin.token
    ) as impatient:
        with pytest.raises(PaymentUnavailableError, match="did not answer"):
            await impatient.charge(request)
    recorded = await poll_charges(gateway, request.order_id)
    retried = await gateway.charge(request)

    assert [retried] == recorded == await gateway.charges_for(request.order_id)


async def poll_charges(gateway: HttpPaymentGateway, order_id: str) -> list[Charge]:
    """The stand-in charges before its late answer; poll until it lists the charge (bounded)."""
    for _ in range(200):  # 10 s at most
        if found := await gateway.charges_for(order_id):
            return found
        await asyncio.sleep(0.05)
    return []


async def test_an_unreachable_provider_is_unavailable() -> None:
    async with HttpPaymentGateway(f"http://127.0.0.1:{free_port()}", 5) as nowhere:
        with pytest.raises(PaymentUnavailableError, match="did not answer"):
            await nowhere.charge(request_for())
        with pytest.raises(PaymentUnavailableError):
            await nowhere.charges_for("o-1")


async def test_listing_follows_every_page(
    gateway: HttpPaymentGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payments_http, "PAGE_SIZE", 2)
    order_id = f"o-{uuid.uuid4().hex[:12]}"
    made = [
        await gateway.charge(ChargeRequest(order_id, Decimal(n), "EUR", f"{order_id}-{n}"))
        for n in range(1, 6)
    ]

    assert await gateway.charges_for(order_id) == made
    everything = await gateway.list_all_charges()
    assert [c for c in everything if c.order_id == order_id] == made


@pytest.mark.parametrize("url", ["ftp://host/", "payments", "http://", "http://h/?x=1"])
def test_a_url_that_is_not_http_is_refused_at_construction(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        HttpPaymentGateway(url, 5)


# --- a provider that misbehaves: real HTTP, crafted answers -----------------------------------

GOOD_CHARGE = {
    "paymentId": "pay_1",
    "orderId": "o-1",
    "amount": "12.5",
    "currency": "EUR",
    "idempotencyKey": "billing:o-1",
    "createdAt": "2026-01-01T00:00:00.000000Z",
}
Answer = Callable[[], Awaitable[web.StreamResponse]]


def answer(status: int, body: object, content_type: str = "application/json") -> Answer:
    async def respond() -> web.StreamResponse:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return web.Response(status=status, body=raw, content_type=content_type)

    return respond


@pytest.fixture
async def crafted() -> AsyncIterator[tuple[str, list[Answer]]]:
    """A server that gives the next queued answer to any request."""
    answers: list[Answer] = []

    async def handle(_: web.Request) -> web.StreamResponse:
        return await answers.pop(0)()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", answers
    finally:
        await runner.cleanup()


def with_field(name: str, value: object) -> dict[str, object]:
    return {**GOOD_CHARGE, name: value}


GOOD_REQUEST = ChargeRequest("o-1", Decimal("12.50"), "EUR", "billing:o-1")

UNAVAILABLE = {
    "500": answer(500, {"type": "urn:x:boom"}),
    "502 html": answer(502, b"<html>bad gateway</html>", "text/html"),
    "429": answer(429, {}),
    "409 key in use": answer(409, {"type": "urn:x:request-in-progress"}),
    "408": answer(408, b""),
    "302 redirect": answer(302, b""),
    "204 no content": answer(204, b""),
    "201 not json": answer(201, b"charged!"),
    "201 NaN": answer(201, b'{"amount": NaN}'),
    "201 array": answer(201, []),
    "201 missing field": answer(201, {k: v for k, v in GOOD_CHARGE.items() if k != "paymentId"}),
    "201 amount number": answer(201, with_field("amount", 12.5)),
    "201 amount exponent": answer(201, with_field("amount", "1E+3")),
    "201 currency lower": answer(201, with_field("currency", "eur")),
    "201 id with newline": answer(201, with_field("paymentId", "pay\n1")),
    "201 id 300 chars": answer(201, with_field("paymentId", "p" * 300)),
    "201 bad date": answer(201, with_field("createdAt", "yesterday")),
    "201 2 MB": answer(201, b" " * (2 * 1024 * 1024) + json.dumps(GOOD_CHARGE).encode()),
    "201 deep": answer(201, b"[" * 100_000),
}


@pytest.mark.parametrize("respond", UNAVAILABLE.values(), ids=UNAVAILABLE.keys())
async def test_unreadable_or_transient_answers_are_unavailable(
    crafted: tuple[str, list[Answer]], respond: Answer
) -> None:
    url, answers = crafted
    answers.append(respond)

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentUnavailableError):
            await gateway.charge(GOOD_REQUEST)


async def test_extra_fields_in_a_charge_are_ignored(crafted: tuple[str, list[Answer]]) -> None:
    url, answers = crafted
    answers.append(answer(201, with_field("receiptUrl", "/r/1")))

    async with HttpPaymentGateway(url, 5) as gateway:
        charge = await gateway.charge(GOOD_REQUEST)

    assert charge == Charge(
        "pay_1", "o-1", Decimal("12.5"), "EUR", "billing:o-1", GOOD_CHARGE["createdAt"]
    )


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (400, {"type": "urn:x:invalid-request", "detail": "bad"}, "invalid-request"),
        (402, {"type": "https://provider.invalid/problems/card-declined"}, "card-declined"),
        (404, b"no such route", "http-404"),
        (422, {"type": "urn:x:" + "A\u0000" * 100, "detail": "x" * 5000}, "http-422"),
        (403, {"type": 7, "detail": ["not", "text"]}, "http-403"),
    ],
)
async def test_permanent_refusals_carry_a_bounded_printable_reason(
    crafted: tuple[str, list[Answer]], status: int, body: object, reason: str
) -> None:
    url, answers = crafted
    answers.append(answer(status, body))

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentRefusedError) as refused:
            await gateway.charge(GOOD_REQUEST)

    assert refused.value.reason == reason
    assert refused.value.status == status
    assert len(refused.value.description) <= 500
    assert refused.value.description.isprintable()


async def test_a_charge_that_answers_another_request_is_refused(
    crafted: tuple[str, list[Answer]],
) -> None:
    url, answers = crafted
    answers.append(answer(200, with_field("amount", "99")))

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentRefusedError) as refused:
            await gateway.charge(GOOD_REQUEST)

    assert refused.value.reason == "charge-mismatch"


async def test_a_list_of_another_orders_charges_or_a_bad_cursor_is_unavailable(
    crafted: tuple[str, list[Answer]],
) -> None:
    url, answers = crafted
    answers.append(answer(200, {"payments": [GOOD_CHARGE], "next": None}))
    answers.append(answer(200, {"payments": [], "next": 7}))
    answers.append(answer(200, {"items": []}))

    async with HttpPaymentGateway(url, 5) as gateway:
        for _ in range(3):
            with pytest.raises(PaymentUnavailableError):
                await gateway.charges_for("o-2")


async def test_a_cursor_that_never_ends_stops_after_max_pages(
    crafted: tuple[str, list[Answer]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payments_http, "MAX_PAGES", 3)
    url, answers = crafted
    answers.extend(answer(200, {"payments": [], "next": "again"}) for _ in range(3))

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentUnavailableError, match="3 pages"):
            await gateway.list_all_charges()


async def test_the_session_comes_from_the_factory_and_is_closed(standin: StandinProcess) -> None:
    made: list[aiohttp.ClientSession] = []

    def factory() -> aiohttp.ClientSession:
        made.append(aiohttp.ClientSession(headers={"User-Agent": "billing-test"}))
        return made[-1]

    gateway = HttpPaymentGateway(standin.url, 5, factory, token=standin.token)
    await gateway.charges_for("o-none")
    await gateway.charges_for("o-none")
    await gateway.close()

    assert len(made) == 1
    assert made[0].closed


# --- refunds against the real stand-in --------------------------------------------------------


async def charged(gateway: HttpPaymentGateway) -> tuple[Charge, RefundRequest]:
    """A charge, and the full refund of it that the saga asks for."""
    charge = await gateway.charge(request_for("12.50"))
    return charge, RefundRequest(
        charge.payment_id, charge.order_id, charge.amount, "EUR", f"refund:{charge.order_id}"
    )


async def test_refused_refund_is_unavailable_and_the_retry_refunds_once(
    gateway: HttpPaymentGateway, faults: Callable[..., None]
) -> None:
    charge, request = await charged(gateway)
    faults(kind="refuse", operation="refund", order_id=charge.order_id)

    with pytest.raises(PaymentUnavailableError, match="503"):
        await gateway.refund(request)
    assert await gateway.refunds_for(charge.order_id) == []
    refunded = await gateway.refund(request)

    assert await gateway.refunds_for(charge.order_id) == [refunded]


async def test_fail_after_refund_then_a_retry_returns_the_same_refund(
    gateway: HttpPaymentGateway, faults: Callable[..., None]
) -> None:
    charge, request = await charged(gateway)
    faults(kind="fail_after_refund", order_id=charge.order_id)

    with pytest.raises(PaymentUnavailableError, match="500"):
        await gateway.refund(request)
    recorded = await gateway.refunds_for(charge.order_id)
    retried = await gateway.refund(request)

    assert len(recorded) == 1
    assert retried == recorded[0]


async def test_a_refund_answered_later_than_the_timeout_is_unavailable_and_the_retry_gets_it(
    standin: StandinProcess, gateway: HttpPaymentGateway, faults: Callable[..., None]
) -> None:
    charge, request = await charged(gateway)
    faults(kind="delay", operation="refund", delay_seconds=5, order_id=charge.order_id)

    async with HttpPaymentGateway(
        standin.url, timeout_seconds=0.5, token=standin.token
    ) as impatient:
        with pytest.raises(PaymentUnavailableError, match="did not answer"):
            await impatient.refund(request)
    recorded: list[Refund] = []
    for _ in range(200):  # the refund is made before the late answer: 10 s at most
        if recorded := await gateway.refunds_for(charge.order_id):
            break
        await asyncio.sleep(0.05)
    retried = await gateway.refund(request)

    assert [retried] == recorded == await gateway.refunds_for(charge.order_id)


async def test_an_already_refunded_payment_is_refused_for_good_not_retried(
    gateway: HttpPaymentGateway,
) -> None:
    charge, request = await charged(gateway)
    await gateway.refund(request)

    with pytest.raises(PaymentRefusedError) as refused:
        await gateway.refund(
            RefundRequest(charge.payment_id, charge.order_id, Decimal(1), "EUR", "refund:other")
        )

    assert (refused.value.reason, refused.value.status) == ("already-refunded", 409)


async def test_an_unreachable_provider_is_unavailable_for_refunds() -> None:
    async with HttpPaymentGateway(f"http://127.0.0.1:{free_port()}", 5) as nowhere:
        with pytest.raises(PaymentUnavailableError, match="did not answer"):
            await nowhere.refund(GOOD_REFUND_REQUEST)
        with pytest.raises(PaymentUnavailableError):
            await nowhere.refunds_for("o-1")


async def test_listing_refunds_follows_every_page(
    gateway: HttpPaymentGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payments_http, "PAGE_SIZE", 2)
    charge, _ = await charged(gateway)
    made = [
        await gateway.refund(
            RefundRequest(charge.payment_id, charge.order_id, Decimal(n), "EUR", f"r{n}")
        )
        for n in range(1, 5)
    ]

    assert await gateway.refunds_for(charge.order_id) == made
    everything = await gateway.list_all_refunds()
    assert [r for r in everything if r.order_id == charge.order_id] == made


# --- refunds from a provider that misbehaves --------------------------------------------------

GOOD_REFUND = {
    "refundId": "re_1",
    "paymentId": "pay_1",
    "orderId": "o-1",
    "amount": "12.5",
    "currency": "EUR",
    "idempotencyKey": "refund:o-1",
    "createdAt": "2026-01-01T00:00:00.000000Z",
}
GOOD_REFUND_REQUEST = RefundRequest("pay_1", "o-1", Decimal("12.50"), "EUR", "refund:o-1")


def refund_with(name: str, value: object) -> dict[str, object]:
    return {**GOOD_REFUND, name: value}


REFUND_UNAVAILABLE = {
    "500": answer(500, {"type": "urn:x:boom"}),
    "503 refused": answer(503, {"type": "urn:payments-standin:problem:refused"}),
    "409 key in use": answer(409, {"type": "urn:x:request-in-progress"}),
    "429": answer(429, {}),
    "201 a charge": answer(201, GOOD_CHARGE),
    "201 missing refundId": answer(201, {k: v for k, v in GOOD_REFUND.items() if k != "refundId"}),
    "201 amount exponent": answer(201, refund_with("amount", "1E+3")),
    "201 id with newline": answer(201, refund_with("refundId", "re\n1")),
    "201 bad date": answer(201, refund_with("createdAt", "yesterday")),
    "201 not json": answer(201, b"refunded!"),
    "201 2 MB": answer(201, b" " * (2 * 1024 * 1024) + json.dumps(GOOD_REFUND).encode()),
}


@pytest.mark.parametrize("respond", REFUND_UNAVAILABLE.values(), ids=REFUND_UNAVAILABLE.keys())
async def test_unreadable_or_transient_refund_answers_are_unavailable(
    crafted: tuple[str, list[Answer]], respond: Answer
) -> None:
    url, answers = crafted
    answers.append(respond)

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentUnavailableError):
            await gateway.refund(GOOD_REFUND_REQUEST)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (404, "unknown-payment"),
        (409, "already-refunded"),
        (422, "refund-exceeds-payment"),
        (422, "currency-mismatch"),
        (422, "idempotency-key-reused"),
    ],
)
async def test_refund_refusals_are_permanent(
    crafted: tuple[str, list[Answer]], status: int, reason: str
) -> None:
    url, answers = crafted
    answers.append(answer(status, {"type": f"urn:payments-standin:problem:{reason}"}))

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentRefusedError) as refused:
            await gateway.refund(GOOD_REFUND_REQUEST)

    assert (refused.value.reason, refused.value.status) == (reason, status)


async def test_a_charge_answered_409_already_refunded_is_still_retried(
    crafted: tuple[str, list[Answer]],
) -> None:
    url, answers = crafted
    answers.append(answer(409, {"type": "urn:payments-standin:problem:already-refunded"}))

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentUnavailableError):
            await gateway.charge(GOOD_REQUEST)


async def test_extra_fields_in_a_refund_are_ignored(crafted: tuple[str, list[Answer]]) -> None:
    url, answers = crafted
    answers.append(answer(201, refund_with("reason", "requested_by_customer")))

    async with HttpPaymentGateway(url, 5) as gateway:
        refund = await gateway.refund(GOOD_REFUND_REQUEST)

    assert refund == Refund(
        "re_1", "pay_1", "o-1", Decimal("12.5"), "EUR", "refund:o-1", GOOD_REFUND["createdAt"]
    )


@pytest.mark.parametrize("field", ["paymentId", "orderId", "amount", "currency", "idempotencyKey"])
async def test_a_refund_that_answers_another_request_is_refused(
    crafted: tuple[str, list[Answer]], field: str
) -> None:
    url, answers = crafted
    other = {"amount": "99", "currency": "USD"}.get(field, "other")
    answers.append(answer(200, refund_with(field, other)))

    async with HttpPaymentGateway(url, 5) as gateway:
        with pytest.raises(PaymentRefusedError) as refused:
            await gateway.refund(GOOD_REFUND_REQUEST)

    assert refused.value.reason == "refund-mismatch"


async def test_a_list_of_another_orders_refunds_or_a_list_of_charges_is_unavailable(
    crafted: tuple[str, list[Answer]],
) -> None:
    url, answers = crafted
    answers.append(answer(200, {"refunds": [GOOD_REFUND], "next": None}))
    answers.append(answer(200, {"payments": [], "next": None}))
    answers.append(answer(200, {"refunds": [GOOD_CHARGE], "next": None}))

    async with HttpPaymentGateway(url, 5) as gateway:
        for _ in range(3):
            with pytest.raises(PaymentUnavailableError):
                await gateway.refunds_for("o-2")
