"""The stand-in's contract over real HTTP: one charge per key, replays, reuse refused, audits."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from payment_service import StandinProcess
from standin_http import PROBLEM, charge, charges_of


def test_first_call_charges_and_the_same_call_replays_that_charge(
    client: httpx.Client, order_id: str
) -> None:
    key = f"billing:{order_id}"

    first = charge(client, key, order_id, "12.50")
    again = charge(client, key, order_id, "12.5")  # the same amount, spelt otherwise

    assert first.status_code == 201
    created = first.json()
    assert set(created) == {
        "paymentId", "orderId", "amount", "currency", "idempotencyKey", "createdAt"
    }  # fmt: skip
    assert (created["orderId"], created["amount"], created["currency"]) == (order_id, "12.5", "EUR")
    assert created["idempotencyKey"] == key
    assert "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == created
    assert charges_of(client, order_id) == [created]


@pytest.mark.parametrize(
    "change",
    [{"amount": "12.51"}, {"currency": "USD"}, {"orderId": "another-order"}],
    ids=["amount", "currency", "orderId"],
)
def test_the_same_key_for_another_charge_is_refused_and_charges_nothing(
    client: httpx.Client, order_id: str, change: dict[str, str]
) -> None:
    key = f"billing:{order_id}"
    first = charge(client, key, order_id).json()
    request = {"order_id": order_id, "amount": "12.50", "currency": "EUR"}
    request.update({"order_id" if k == "orderId" else k: v for k, v in change.items()})

    reused = charge(client, key, **request)

    assert reused.status_code == 422
    assert reused.headers["Content-Type"] == "application/problem+json"
    assert reused.json()["type"].endswith("idempotency-key-reused")
    assert first["paymentId"] in reused.json()["detail"]
    assert charges_of(client, order_id) == [first]
    assert charges_of(client, "another-order") == []


def test_a_missing_key_is_refused(client: httpx.Client, order_id: str) -> None:
    response = client.post(
        "/payments", json={"orderId": order_id, "amount": "1", "currency": "EUR"}
    )

    assert response.status_code == 400
    assert response.json()["type"] == PROBLEM + "missing-idempotency-key"
    assert charges_of(client, order_id) == []


def test_different_keys_are_different_charges_even_for_one_order(
    client: httpx.Client, order_id: str
) -> None:
    first = charge(client, "key-a-" + order_id, order_id).json()
    second = charge(client, "key-b-" + order_id, order_id).json()

    assert first["paymentId"] != second["paymentId"]
    assert [p["paymentId"] for p in charges_of(client, order_id)] == [
        first["paymentId"],
        second["paymentId"],
    ]


def test_twenty_concurrent_requests_with_one_key_make_one_charge(
    standin: StandinProcess, order_id: str
) -> None:
    key = f"billing:{order_id}"
    start = threading.Barrier(20)

    def attempt(_: int) -> httpx.Response:
        # A client per thread: twenty connections, released together.
        with httpx.Client(base_url=standin.url, timeout=30, auth=standin.auth()) as own:
            start.wait(timeout=30)
            return charge(own, key, order_id)

    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(attempt, range(20)))

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 19 + [201]
    assert len({r.json()["paymentId"] for r in responses}) == 1
    with httpx.Client(base_url=standin.url, auth=standin.auth()) as client:
        assert len(charges_of(client, order_id)) == 1


def test_the_list_pages_through_every_charge_in_order(client: httpx.Client) -> None:
    order_id = f"o-{uuid.uuid4().hex[:12]}"
    made = [charge(client, f"{order_id}-{n}", order_id, str(n + 1)).json() for n in range(5)]

    seen: list[dict[str, Any]] = []
    params: dict[str, str] = {"orderId": order_id, "limit": "2"}
    for _ in range(10):
        page = client.get("/payments", params=params).json()
        seen += page["payments"]
        if page["next"] is None:
            break
        params["after"] = page["next"]

    assert seen == made
    everything = client.get("/payments", params={"limit": "1000"}).json()["payments"]
    assert {p["paymentId"] for p in made} <= {p["paymentId"] for p in everything}


def test_health(client: httpx.Client) -> None:
    assert client.get("/health").json() == {"status": "ok"}
