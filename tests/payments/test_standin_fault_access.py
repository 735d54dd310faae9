"""Issue 37, item 4: any web page open in the developer's browser could switch the stand-in's
faults on with a simple cross-site POST (`text/plain`, its own Origin, no custom header). The
fault switches now need the token, a JSON body and no foreign Origin; each refusal changes
nothing. The browser itself tries in tests/browser/test_fault_switches_in_browser.py."""

from __future__ import annotations

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
from standin_http import PROBLEM, charge

from orders.entrypoints.localstack import LocalStack

RULE = '{"kind": "refuse", "count": 1000}'
DRAWN_TOKEN = re.compile(
    r"payments-standin listening on (?P<address>\S+)\npayments-standin fault token: (?P<token>\S+)"
)
CLI_URL = re.compile(r"payments service listening on (?P<url>\S+)")
CLI_TOKEN = re.compile(r"PAYMENTS_STANDIN_FAULT_TOKEN=(?P<token>\S+)")


@pytest.fixture
def anyone(standin: StandinProcess) -> Iterator[httpx.Client]:
    """A caller without the token: a web page, or a local process that was never given it."""
    with httpx.Client(base_url=standin.url, timeout=10) as http:
        yield http


def installed(client: httpx.Client) -> list[dict[str, object]]:
    response = client.get("/faults")
    assert response.status_code == 200
    faults: list[dict[str, object]] = response.json()["faults"]
    return faults


@pytest.mark.parametrize(
    "origin", ["http://attacker.example", "https://attacker.example:8443", "null"]
)
def test_a_cross_site_simple_post_is_403_and_installs_nothing(
    anyone: httpx.Client, client: httpx.Client, order_id: str, origin: str
) -> None:
    answer = anyone.post(
        "/faults", content=RULE, headers={"Content-Type": "text/plain", "Origin": origin}
    )

    assert answer.status_code == 403
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.json()["type"] == PROBLEM + "foreign-origin"
    assert installed(client) == []
    assert charge(client, f"k-{order_id}", order_id).status_code == 201


def test_a_foreign_origin_is_refused_even_with_the_token(
    standin: StandinProcess, client: httpx.Client
) -> None:
    answers = [
        client.post("/faults", content=RULE, headers={**json_type(), "Origin": origin})
        for origin in ("http://attacker.example", f"https://{standin.url.split('://')[1]}")
    ]

    assert [a.status_code for a in answers] == [403, 403]
    assert installed(client) == []


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer wrong-token-of-enough-length", "Basic dXNlcjpwYXNz", "TOKEN"],
)
def test_no_token_or_a_wrong_one_is_401_and_installs_nothing(
    standin: StandinProcess, anyone: httpx.Client, client: httpx.Client, authorization: str | None
) -> None:
    headers = json_type()
    if authorization is not None:
        headers["Authorization"] = authorization.replace("TOKEN", standin.fault_token)

    answer = anyone.post("/faults", content=RULE, headers=headers)

    assert answer.status_code == 401
    assert answer.json()["type"] == PROBLEM + "fault-token-required"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert installed(client) == []


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_rule_not_sent_as_json_is_415_even_with_the_token(
    client: httpx.Client, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}

    answer = client.post("/faults", content=RULE, headers=headers)

    assert answer.status_code == 415
    assert answer.json()["type"] == PROBLEM + "unsupported-media-type"
    assert installed(client) == []


def test_a_preflight_is_never_granted(anyone: httpx.Client) -> None:
    answer = anyone.options(
        "/faults",
        headers={
            "Origin": "http://attacker.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )

    assert answer.status_code == 405
    assert not [name for name in answer.headers if name.lower().startswith("access-control-")]


def test_listing_and_clearing_need_the_token_too(
    anyone: httpx.Client, client: httpx.Client
) -> None:
    client.post("/faults", content=RULE, headers=json_type()).raise_for_status()

    listed = anyone.get("/faults")
    cleared = anyone.delete("/faults", headers={"Origin": "http://attacker.example"})

    assert (listed.status_code, cleared.status_code) == (401, 403)
    assert [rule["kind"] for rule in installed(client)] == ["refuse"]


def test_the_token_a_same_origin_caller_and_json_install_the_rule(
    standin: StandinProcess, client: httpx.Client
) -> None:
    answer = client.post(
        "/faults",
        content=RULE,
        headers={"Content-Type": "application/json; charset=utf-8", "Origin": standin.url},
    )

    assert answer.status_code == 201
    assert [rule["kind"] for rule in installed(client)] == ["refuse"]


def test_without_a_token_given_it_draws_one_and_prints_it_after_the_ready_line(
    tmp_path: Path,
) -> None:
    output = tmp_path / "standin.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "payments_standin", "--port", "0"],
            stdout=sink,
            env={**without_fault_token(), "PYTHONPATH": str(SRC)},
        )
    try:
        printed = wait_for_output(output, DRAWN_TOKEN, process)
        bearer = {"Authorization": f"Bearer {printed['token']}"}
        with httpx.Client(base_url=f"http://{printed['address']}") as http:
            assert http.post("/faults", content=RULE, headers=json_type()).status_code == 401
            assert (
                http.post("/faults", content=RULE, headers={**json_type(), **bearer}).status_code
                == 201
            )
    finally:
        stop_process(process)


def test_orders_payments_draws_a_token_prints_it_and_hands_it_to_the_stand_in(
    tmp_path: Path,
) -> None:
    output = tmp_path / "orders-payments.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "orders", "payments", "--port", "0"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=without_fault_token(),
        )
    try:
        url = wait_for_output(output, CLI_URL, process)["url"]
        token = wait_for_output(output, CLI_TOKEN, process)["token"]
        with httpx.Client(base_url=url) as http:
            bearer = {"Authorization": f"Bearer {token}"}
            assert http.post("/faults", content=RULE, headers=json_type()).status_code == 401
            assert (
                http.post("/faults", content=RULE, headers={**json_type(), **bearer}).status_code
                == 201
            )
    finally:
        stop_process(process)


def test_the_local_stack_starts_the_stand_in_with_its_own_token(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    try:
        stack.start_payments()
        with httpx.Client(base_url=stack.payments_url) as http:
            bearer = {"Authorization": f"Bearer {stack.fault_token}"}
            assert http.get("/faults").status_code == 401
            assert http.get("/faults", headers=bearer).json() == {"faults": []}
    finally:
        stack.stop()


def without_fault_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PAYMENTS_STANDIN_FAULT_TOKEN"}


def json_type() -> dict[str, str]:
    return {"Content-Type": "application/json"}
