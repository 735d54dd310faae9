"""Issue 46, item 5: the stand-in's money routes (`POST /payments`, `POST /refunds`) had no
Origin guard and no token: any local process could charge or refund, and nothing but the
missing `Idempotency-Key` of a simple cross-site request kept a web page from trying. They now
get the fault switches' guards with a token of their own (the app's `PAYMENTS_TOKEN`): no
foreign Origin, `Authorization: Bearer <token>`, a JSON body. Each refusal moves no money. The
browser itself tries in tests/browser/test_fault_switches_in_browser.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from payment_service import SRC, StandinProcess
from servers import stop_process, wait_for_output
from standin_http import PROBLEM, charge, charges_of, refunds_of

from orders.entrypoints.localstack import LocalStack

DRAWN_TOKEN = re.compile(
    r"payments-standin listening on (?P<address>\S+)\n"
    r"payments-standin fault token: \S+\npayments-standin payments token: (?P<token>\S+)"
)
CLI_LINE = re.compile(r"PAYMENTS_URL=(?P<url>\S+) PAYMENTS_TOKEN=(?P<token>\S+) points the app")
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def anyone(standin: StandinProcess) -> Iterator[httpx.Client]:
    """A caller without the token: a web page, or a local process that was never given it."""
    with httpx.Client(base_url=standin.url, timeout=10) as http:
        yield http


def charge_body(order_id: str) -> str:
    return json.dumps({"orderId": order_id, "amount": "12.50", "currency": "EUR"})


def made_payment(client: httpx.Client, order_id: str) -> str:
    made = charge(client, f"billing:{order_id}", order_id)
    assert made.status_code == 201
    payment_id: str = made.json()["paymentId"]
    return payment_id


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer wrong-token-of-enough-length", "Basic dXNlcjpwYXNz", "FAULT"],
)
def test_a_charge_without_the_token_or_with_another_is_401_and_charges_nothing(
    standin: StandinProcess,
    anyone: httpx.Client,
    client: httpx.Client,
    order_id: str,
    authorization: str | None,
) -> None:
    headers = {**JSON, "Idempotency-Key": f"k-{order_id}"}
    if authorization is not None:  # the fault token opens the fault switches only
        headers["Authorization"] = authorization.replace("FAULT", f"Bearer {standin.fault_token}")

    answer = anyone.post("/payments", content=charge_body(order_id), headers=headers)

    assert answer.status_code == 401
    assert answer.json()["type"] == PROBLEM + "payments-token-required"
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="payments"'
    assert charges_of(client, order_id) == []


def test_a_refund_without_the_token_is_401_and_refunds_nothing(
    anyone: httpx.Client, client: httpx.Client, order_id: str
) -> None:
    payment_id = made_payment(client, order_id)
    body = json.dumps({"paymentId": payment_id, "amount": "12.50", "currency": "EUR"})

    answer = anyone.post(
        "/refunds", content=body, headers={**JSON, "Idempotency-Key": f"r-{order_id}"}
    )

    assert answer.status_code == 401
    assert refunds_of(client, orderId=order_id) == []


@pytest.mark.parametrize("path", ["/payments", "/refunds"])
@pytest.mark.parametrize("origin", ["http://attacker.example", "null"])
def test_a_foreign_origin_moves_no_money_even_with_the_token(
    standin: StandinProcess, client: httpx.Client, order_id: str, path: str, origin: str
) -> None:
    payment_id = made_payment(client, order_id)
    body = {
        "/payments": charge_body(f"{order_id}-again"),
        "/refunds": json.dumps({"paymentId": payment_id, "amount": "1", "currency": "EUR"}),
    }[path]

    answer = client.post(
        path, content=body, headers={**JSON, "Idempotency-Key": "k-origin", "Origin": origin}
    )

    assert answer.status_code == 403
    assert answer.json()["type"] == PROBLEM + "foreign-origin"
    assert charges_of(client, f"{order_id}-again") == []
    assert refunds_of(client, orderId=order_id) == []


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_charge_not_sent_as_json_is_415_even_with_the_token(
    client: httpx.Client, order_id: str, content_type: str | None
) -> None:
    headers = {"Idempotency-Key": f"k-{order_id}"}
    if content_type is not None:
        headers["Content-Type"] = content_type

    answer = client.post("/payments", content=charge_body(order_id), headers=headers)

    assert answer.status_code == 415
    assert charges_of(client, order_id) == []


def test_the_money_token_does_not_open_the_fault_switches(
    standin: StandinProcess, anyone: httpx.Client
) -> None:
    answer = anyone.get("/faults", headers=standin.payments_headers())

    assert answer.status_code == 401
    assert answer.json()["type"] == PROBLEM + "fault-token-required"


def test_without_a_token_given_it_draws_one_and_prints_it(tmp_path: Path) -> None:
    output = tmp_path / "standin.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "payments_standin", "--port", "0"],
            stdout=sink,
            env={**without_tokens(), "PYTHONPATH": str(SRC)},
        )
    try:
        printed = wait_for_output(output, DRAWN_TOKEN, process)
        with httpx.Client(base_url=f"http://{printed['address']}") as http:
            assert charge(http, "k-drawn", "o-drawn").status_code == 401
            http.headers["Authorization"] = f"Bearer {printed['token']}"
            assert charge(http, "k-drawn", "o-drawn").status_code == 201
    finally:
        stop_process(process)


def test_orders_payments_prints_the_token_the_app_sends_as_payments_token(
    tmp_path: Path,
) -> None:
    output = tmp_path / "orders-payments.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "orders", "payments", "--port", "0"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=without_tokens(),
        )
    try:
        printed = wait_for_output(output, CLI_LINE, process)
        with httpx.Client(base_url=printed["url"]) as http:
            assert charge(http, "k-cli", "o-cli").status_code == 401
            http.headers["Authorization"] = f"Bearer {printed['token']}"
            assert charge(http, "k-cli", "o-cli").status_code == 201
    finally:
        stop_process(process)


def test_the_local_stack_hands_the_app_the_stand_ins_money_token(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    try:
        stack.start_payments()
        environment = stack.environment()
        with httpx.Client(base_url=environment["PAYMENTS_URL"]) as http:
            assert charge(http, "k-stack", "o-stack").status_code == 401
            http.headers["Authorization"] = f"Bearer {environment['PAYMENTS_TOKEN']}"
            assert charge(http, "k-stack", "o-stack").status_code == 201
        assert stack.payments_token != stack.fault_token
    finally:
        stack.stop()


def without_tokens() -> dict[str, str]:
    drop = {"PAYMENTS_STANDIN_FAULT_TOKEN", "PAYMENTS_STANDIN_TOKEN", "PAYMENTS_TOKEN"}
    return {k: v for k, v in os.environ.items() if k not in drop}
