"""Faults set over HTTP: refuse (nothing charged), fail after charging, answer late."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from standin_http import charge, charges_of, refund, refunds_of


def add_fault(client: httpx.Client, **rule: Any) -> dict[str, Any]:
    response = client.post("/faults", json=rule)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_refuse_answers_503_and_charges_nothing_then_the_retry_charges(
    client: httpx.Client, order_id: str
) -> None:
    add_fault(client, kind="refuse", count=2, order_id=order_id)
    key = f"billing:{order_id}"

    refused = [charge(client, key, order_id) for _ in range(2)]
    after = charge(client, key, order_id)

    assert [r.status_code for r in refused] == [503, 503]
    assert refused[0].json()["type"].endswith(":refused")
    assert refused[0].headers["Retry-After"] == "1"
    assert after.status_code == 201
    assert charges_of(client, order_id) == [after.json()]


def test_fail_after_charge_keeps_the_charge_for_the_retry_with_the_same_key(
    client: httpx.Client, order_id: str
) -> None:
    add_fault(client, kind="fail_after_charge", order_id=order_id)
    key = f"billing:{order_id}"

    failed = charge(client, key, order_id)
    stored = charges_of(client, order_id)
    retry = charge(client, key, order_id)

    assert failed.status_code == 500
    assert failed.json()["type"].endswith(":failed-after-charge")
    assert len(stored) == 1
    assert retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == stored[0]
    assert charges_of(client, order_id) == stored


def test_delay_answers_after_the_callers_timeout_but_the_charge_is_made(
    client: httpx.Client, order_id: str
) -> None:
    add_fault(client, kind="delay", delay_seconds=5, order_id=order_id)
    key = f"billing:{order_id}"

    with (
        httpx.Client(base_url=client.base_url, timeout=0.5, auth=client.auth) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        charge(impatient, key, order_id)
    stored = wait_for_charges(client, order_id)
    retry = charge(client, key, order_id)

    assert retry.status_code == 200
    assert [retry.json()] == stored == charges_of(client, order_id)


def wait_for_charges(client: httpx.Client, order_id: str) -> list[dict[str, Any]]:
    """The charge is made before the late answer; poll until it is listed (bounded)."""
    deadline = time.monotonic() + 10
    while not (found := charges_of(client, order_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_a_rule_without_order_id_applies_to_the_next_n_requests_of_any_order(
    client: httpx.Client, order_id: str
) -> None:
    rule = add_fault(client, kind="refuse", count=2)

    statuses = [charge(client, f"{order_id}-{n}", f"{order_id}-{n}").status_code for n in range(3)]

    assert rule["remaining"] == 2
    assert statuses == [503, 503, 201]
    assert client.get("/faults").json() == {"faults": []}


def test_a_rule_for_one_order_leaves_the_others_alone(client: httpx.Client, order_id: str) -> None:
    add_fault(client, kind="refuse", order_id=order_id)

    other = charge(client, f"other-{order_id}", f"other-{order_id}")
    listed = client.get("/faults").json()["faults"]
    mine = charge(client, order_id, order_id)

    assert other.status_code == 201
    assert [(f["kind"], f["order_id"], f["remaining"]) for f in listed] == [("refuse", order_id, 1)]
    assert mine.status_code == 503


def test_delete_clears_every_rule(client: httpx.Client, order_id: str) -> None:
    add_fault(client, kind="refuse", count=5)
    add_fault(client, kind="fail_after_charge", order_id=order_id)

    cleared = client.delete("/faults")

    assert cleared.status_code == 204
    assert client.get("/faults").json() == {"faults": []}
    assert charge(client, order_id, order_id).status_code == 201


@pytest.mark.parametrize(
    "rule",
    [
        {},
        {"kind": "explode"},
        {"kind": "refuse", "count": 0},
        {"kind": "refuse", "count": True},
        {"kind": "refuse", "count": 1.5},
        {"kind": "refuse", "surprise": 1},
        {"kind": "refuse", "order_id": ""},
        {"kind": "refuse", "order_id": 7},
        {"kind": "refuse", "delay_seconds": 1},
        {"kind": "delay"},
        {"kind": "delay", "delay_seconds": 61},
        {"kind": "delay", "delay_seconds": -1},
        {"kind": "delay", "delay_seconds": "1"},
        {"kind": "refuse", "operation": "void"},
        {"kind": "refuse", "operation": None},
        {"kind": "fail_after_charge", "operation": "refund"},
        {"kind": "fail_after_refund", "operation": "charge"},
        [],
        "refuse",
    ],
)
def test_a_malformed_rule_is_refused_and_nothing_is_injected(
    client: httpx.Client, rule: object
) -> None:
    response = client.post("/faults", json=rule)

    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/problem+json"
    assert client.get("/faults").json() == {"faults": []}


@pytest.mark.parametrize(
    "raw", [b"", b"{", b'{"kind": NaN}', b'{"kind": "refuse", "kind": "delay"}', b"x" * 2000]
)
def test_a_rule_that_is_not_strict_json_is_refused(client: httpx.Client, raw: bytes) -> None:
    response = client.post("/faults", content=raw, headers={"Content-Type": "application/json"})

    assert response.status_code in (400, 413)
    assert client.get("/faults").json() == {"faults": []}


# --- refunds ------------------------------------------------------------------------------------


def paid(client: httpx.Client, order_id: str) -> str:
    """A charge of 12.50 EUR for the order; its paymentId."""
    made = charge(client, f"billing:{order_id}", order_id)
    assert made.status_code == 201
    payment_id: str = made.json()["paymentId"]
    return payment_id


def test_a_rule_without_operation_applies_to_charges_only(
    client: httpx.Client, order_id: str
) -> None:
    payment_id = paid(client, order_id)
    rule = add_fault(client, kind="refuse", order_id=order_id)

    refunded = refund(client, f"refund:{order_id}", payment_id)
    listed = client.get("/faults").json()["faults"]

    assert rule["operation"] == "charge"
    assert refunded.status_code == 201
    assert [(f["operation"], f["remaining"]) for f in listed] == [("charge", 1)]


def test_refuse_for_refunds_answers_503_and_refunds_nothing_then_the_retry_refunds(
    client: httpx.Client, order_id: str
) -> None:
    payment_id = paid(client, order_id)
    add_fault(client, kind="refuse", operation="refund", order_id=order_id)
    key = f"refund:{order_id}"

    refused = refund(client, key, payment_id)
    nothing = refunds_of(client, orderId=order_id)
    after = refund(client, key, payment_id)

    assert refused.status_code == 503
    assert refused.json()["type"].endswith(":refused")
    assert refused.headers["Retry-After"] == "1"
    assert nothing == []
    assert after.status_code == 201
    assert refunds_of(client, orderId=order_id) == [after.json()]


def test_fail_after_refund_keeps_the_refund_for_the_retry_with_the_same_key(
    client: httpx.Client, order_id: str
) -> None:
    payment_id = paid(client, order_id)
    rule = add_fault(client, kind="fail_after_refund", order_id=order_id)
    key = f"refund:{order_id}"

    failed = refund(client, key, payment_id)
    stored = refunds_of(client, orderId=order_id)
    retry = refund(client, key, payment_id)

    assert rule["operation"] == "refund"  # implied by the kind
    assert failed.status_code == 500
    assert failed.json()["type"].endswith(":failed-after-refund")
    assert len(stored) == 1
    assert retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == stored[0]
    assert refunds_of(client, orderId=order_id) == stored


def test_delay_for_a_refund_answers_after_the_callers_timeout_but_the_refund_is_made(
    client: httpx.Client, order_id: str
) -> None:
    payment_id = paid(client, order_id)
    add_fault(client, kind="delay", operation="refund", delay_seconds=5, order_id=order_id)
    key = f"refund:{order_id}"

    with (
        httpx.Client(base_url=client.base_url, timeout=0.5, auth=client.auth) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        refund(impatient, key, payment_id)
    stored = wait_for_refunds(client, order_id)
    retry = refund(client, key, payment_id)

    assert retry.status_code == 200
    assert [retry.json()] == stored == refunds_of(client, orderId=order_id)


def wait_for_refunds(client: httpx.Client, order_id: str) -> list[dict[str, Any]]:
    """The refund is made before the late answer; poll until it is listed (bounded)."""
    deadline = time.monotonic() + 10
    while not (found := refunds_of(client, orderId=order_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_a_refund_rule_for_one_order_matches_the_refunded_payments_order_only(
    client: httpx.Client, order_id: str
) -> None:
    other_payment = paid(client, f"other-{order_id}")
    payment_id = paid(client, order_id)
    add_fault(client, kind="refuse", operation="refund", order_id=order_id)

    other = refund(client, f"refund:other-{order_id}", other_payment)
    charged = charge(client, f"second:{order_id}", order_id)
    mine = refund(client, f"refund:{order_id}", payment_id)

    assert other.status_code == 201
    assert charged.status_code == 201  # a refund rule leaves charges alone
    assert mine.status_code == 503
