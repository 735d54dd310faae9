"""Refunds over real HTTP: one refund per key, never more than the payment, replays, refusals."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import pytest
from payment_service import StandinProcess
from standin_http import PROBLEM, charge, refund, refunds_of


@pytest.fixture
def payment(client: httpx.Client, order_id: str) -> dict[str, Any]:
    """A charge of 12.50 EUR to refund."""
    made = charge(client, f"billing:{order_id}", order_id, "12.50")
    assert made.status_code == 201
    created: dict[str, Any] = made.json()
    return created


def test_a_refund_is_made_once_and_the_same_call_replays_it(
    client: httpx.Client, payment: dict[str, Any]
) -> None:
    key = f"refund:{payment['orderId']}"

    first = refund(client, key, payment["paymentId"], "12.50")
    again = refund(client, key, payment["paymentId"], "12.5")  # the same amount, spelt otherwise

    assert first.status_code == 201
    created = first.json()
    assert set(created) == {
        "refundId", "paymentId", "orderId", "amount", "currency", "idempotencyKey", "createdAt"
    }  # fmt: skip
    assert created["refundId"].startswith("re_")
    assert (created["paymentId"], created["orderId"]) == (payment["paymentId"], payment["orderId"])
    assert (created["amount"], created["currency"], created["idempotencyKey"]) == (
        "12.5",
        "EUR",
        key,
    )
    assert "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == created
    assert refunds_of(client, orderId=payment["orderId"]) == [created]
    assert refunds_of(client, paymentId=payment["paymentId"]) == [created]


def test_the_replay_wins_even_after_the_payment_is_fully_refunded(
    client: httpx.Client, payment: dict[str, Any]
) -> None:
    key = f"refund:{payment['orderId']}"
    first = refund(client, key, payment["paymentId"], "10").json()
    rest = refund(client, f"rest:{payment['orderId']}", payment["paymentId"], "2.5")

    replay = refund(client, key, payment["paymentId"], "10")

    assert rest.status_code == 201
    assert replay.status_code == 200
    assert replay.json() == first


@pytest.mark.parametrize("change", ["amount", "currency", "paymentId"])
def test_the_same_key_for_another_refund_is_refused_and_refunds_nothing(
    client: httpx.Client, payment: dict[str, Any], change: str
) -> None:
    other = charge(client, f"billing:other-{payment['orderId']}", f"x-{payment['orderId']}")
    key = f"refund:{payment['orderId']}"
    first = refund(client, key, payment["paymentId"], "5").json()
    asked = {"payment_id": payment["paymentId"], "amount": "5", "currency": "EUR"}
    asked.update(
        {
            "amount": {"amount": "6"},
            "currency": {"currency": "USD"},
            "paymentId": {"payment_id": other.json()["paymentId"]},
        }[change]
    )

    reused = refund(client, key, **asked)

    assert reused.status_code == 422
    assert reused.json()["type"] == PROBLEM + "idempotency-key-reused"
    assert first["refundId"] in reused.json()["detail"]
    assert refunds_of(client, orderId=payment["orderId"]) == [first]
    assert refunds_of(client, paymentId=other.json()["paymentId"]) == []


def test_an_unknown_payment_is_404_and_leaves_the_key_unused(
    client: httpx.Client, payment: dict[str, Any]
) -> None:
    key = f"refund:{payment['orderId']}"

    unknown = refund(client, key, "pay_unknown")
    later = refund(client, key, payment["paymentId"])

    assert unknown.status_code == 404
    assert unknown.json()["type"] == PROBLEM + "unknown-payment"
    assert refunds_of(client, paymentId="pay_unknown") == []
    assert later.status_code == 201


def test_partial_refunds_add_up_to_the_payment_and_then_it_is_already_refunded(
    client: httpx.Client, payment: dict[str, Any]
) -> None:
    parts = [
        refund(client, f"r{n}-{payment['paymentId']}", payment["paymentId"], "4.1666")
        for n in range(3)
    ]
    last = refund(client, f"r3-{payment['paymentId']}", payment["paymentId"], "0.0002")

    more = refund(client, f"r4-{payment['paymentId']}", payment["paymentId"], "0.0001")

    assert [r.status_code for r in parts] == [201, 201, 201]
    assert last.status_code == 201
    assert more.status_code == 409
    assert more.json()["type"] == PROBLEM + "already-refunded"
    refunded = refunds_of(client, paymentId=payment["paymentId"])
    assert sum(Decimal(r["amount"]) for r in refunded) == Decimal("12.5")


def test_more_than_remains_is_refused_and_leaves_the_key_unused(
    client: httpx.Client, payment: dict[str, Any]
) -> None:
    first = refund(client, f"a-{payment['paymentId']}", payment["paymentId"], "10").json()
    key = f"b-{payment['paymentId']}"

    over = refund(client, key, payment["paymentId"], "2.51")
    exact = refund(client, key, payment["paymentId"], "2.5")

    assert over.status_code == 422
    assert over.json()["type"] == PROBLEM + "refund-exceeds-payment"
    assert "2.5 EUR" in over.json()["detail"]
    assert exact.status_code == 201
    assert refunds_of(client, paymentId=payment["paymentId"]) == [first, exact.json()]


def test_another_currency_than_the_payments_is_refused(
    client: httpx.Client, payment: dict[str, Any]
) -> None:
    mismatch = refund(client, f"r-{payment['paymentId']}", payment["paymentId"], "1", "USD")

    assert mismatch.status_code == 422
    assert mismatch.json()["type"] == PROBLEM + "currency-mismatch"
    assert refunds_of(client, paymentId=payment["paymentId"]) == []


def test_a_missing_key_is_refused(client: httpx.Client, payment: dict[str, Any]) -> None:
    body = {"paymentId": payment["paymentId"], "amount": "1", "currency": "EUR"}

    missing = client.post("/refunds", json=body)
    bad = client.post("/refunds", json=body, headers={"Idempotency-Key": "k" * 256})

    assert missing.status_code == bad.status_code == 400
    assert missing.json()["type"] == PROBLEM + "missing-idempotency-key"
    assert bad.json()["type"] == PROBLEM + "invalid-idempotency-key"
    assert refunds_of(client, paymentId=payment["paymentId"]) == []


@pytest.mark.parametrize(
    "body",
    [
        {"amount": "0"},
        {"amount": "-1"},
        {"amount": 1},
        {"amount": "1.00001"},
        {"paymentId": ""},
        {"paymentId": "p" * 65},
        {"paymentId": 7},
        {"paymentId": "pay\n1"},
        {"currency": "eur"},
        {"orderId": "o-1"},
        {"paymentId": None, "amount": None, "currency": None},
    ],
)
def test_a_bad_refund_body_is_a_400_problem_and_refunds_nothing(
    client: httpx.Client, payment: dict[str, Any], body: dict[str, object]
) -> None:
    asked = {"paymentId": payment["paymentId"], "amount": "1", "currency": "EUR"}
    asked = {name: value for name, value in {**asked, **body}.items() if value is not None}

    key = f"refund:{payment['orderId']}"

    response = client.post("/refunds", json=asked, headers={"Idempotency-Key": key})

    assert response.status_code == 400, response.text
    assert response.json()["type"] == PROBLEM + "invalid-request"
    assert refunds_of(client, paymentId=payment["paymentId"]) == []


def test_concurrent_refunds_under_different_keys_never_exceed_the_payment(
    standin: StandinProcess, order_id: str
) -> None:
    with httpx.Client(base_url=standin.url, auth=standin.auth()) as client:
        payment_id = charge(client, f"billing:{order_id}", order_id, "10").json()["paymentId"]
    start = threading.Barrier(20)

    def attempt(n: int) -> httpx.Response:
        with httpx.Client(base_url=standin.url, timeout=30, auth=standin.auth()) as own:
            start.wait(timeout=30)
            return refund(own, f"refund-{n}:{order_id}", payment_id, "1")

    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(attempt, range(20)))

    assert sorted(r.status_code for r in responses) == [201] * 10 + [409] * 10
    with httpx.Client(base_url=standin.url, auth=standin.auth()) as client:
        assert len(refunds_of(client, paymentId=payment_id)) == 10


def test_the_list_pages_through_refunds_oldest_first_by_order_payment_or_all(
    client: httpx.Client,
) -> None:
    order_id = f"o-{uuid.uuid4().hex[:12]}"
    payments = [charge(client, f"{order_id}-{n}", order_id, "5").json() for n in range(2)]
    made = [
        refund(client, f"r-{order_id}-{n}", payments[n % 2]["paymentId"], "1").json()
        for n in range(5)
    ]

    seen: list[dict[str, Any]] = []
    params: dict[str, str] = {"orderId": order_id, "limit": "2"}
    for _ in range(10):
        page = client.get("/refunds", params=params).json()
        seen += page["refunds"]
        if page["next"] is None:
            break
        params["after"] = page["next"]

    assert seen == made
    assert refunds_of(client, paymentId=payments[1]["paymentId"]) == made[1::2]
    everything = refunds_of(client, limit="1000")
    assert [r for r in everything if r["orderId"] == order_id] == made


@pytest.mark.parametrize(
    "query",
    [
        {"orderId": "o-1", "paymentId": "pay_1"},
        {"paymentId": ""},
        {"paymentId": "p" * 65},
        {"limit": "0"},
        {"surprise": "1"},
    ],
)
def test_a_bad_refund_list_query_is_a_400_problem(
    client: httpx.Client, query: dict[str, str]
) -> None:
    response = client.get("/refunds", params=query)

    assert response.status_code == 400
    assert response.json()["type"] == PROBLEM + "invalid-request"


def test_the_payment_list_does_not_take_a_payment_filter(client: httpx.Client) -> None:
    assert client.get("/payments", params={"paymentId": "pay_1"}).status_code == 400


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_other_methods_on_refunds_are_405(client: httpx.Client, method: str) -> None:
    response = client.request(method, "/refunds", headers={"Content-Length": "0"})

    assert response.status_code == 405
    assert response.json()["type"] == PROBLEM + "method-not-allowed"
