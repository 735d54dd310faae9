"""Issue 22.2: the stand-in serves only the hosts it is called by; a page that re-binds its own
name to 127.0.0.1 (DNS rebinding) reaches the port but is refused, and changes nothing."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from payment_service import StandinProcess
from standin_http import PROBLEM, charge, charges_of, raw_exchange, refunds_of

from payments_standin import PaymentStandin


def rebinding(host: str) -> dict[str, str]:
    """What a browser sends from a rebound page: its own name as Host and as Origin."""
    return {"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}


def test_a_rebinding_request_is_421_and_charges_refunds_and_faults_nothing(
    standin: StandinProcess, client: httpx.Client, order_id: str
) -> None:
    port = standin.url.rsplit(":", 1)[1]
    foreign = rebinding(f"attacker.example:{port}")
    payment_id = charge(client, f"billing:{order_id}", order_id).json()["paymentId"]
    client.post("/faults", json={"kind": "refuse", "order_id": "o-kept"})
    body = {"orderId": order_id, "amount": "1", "currency": "EUR"}

    answers = [
        client.post("/payments", json=body, headers={**foreign, "Idempotency-Key": "k1"}),
        client.post(
            "/refunds",
            json={"paymentId": payment_id, "amount": "1", "currency": "EUR"},
            headers={**foreign, "Idempotency-Key": "k2"},
        ),
        client.post("/faults", json={"kind": "refuse", "count": 5}, headers=foreign),
        client.delete("/faults", headers=foreign),
        client.get("/payments", params={"orderId": order_id}, headers=foreign),
    ]

    assert [a.status_code for a in answers] == [421] * 5
    assert {a.json()["type"] for a in answers} == {PROBLEM + "misdirected-request"}
    assert all(a.headers["Connection"] == "close" for a in answers)
    assert len(charges_of(client, order_id)) == 1
    assert refunds_of(client, orderId=order_id) == []
    faults = client.get("/faults").json()["faults"]
    assert [(f["kind"], f["order_id"]) for f in faults] == [("refuse", "o-kept")]


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LocalHost"])
def test_the_default_names_with_the_bound_port_are_served(
    standin: StandinProcess, client: httpx.Client, name: str
) -> None:
    port = standin.url.rsplit(":", 1)[1]

    assert client.get("/health", headers={"Host": f"{name}:{port}"}).status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1:1", "localhost", "127.0.0.2:{port}", "[::1]:{port}"])
def test_another_port_or_address_is_misdirected(
    standin: StandinProcess, client: httpx.Client, host: str
) -> None:
    port = standin.url.rsplit(":", 1)[1]

    answer = client.get("/health", headers={"Host": host.format(port=port)})

    assert answer.status_code == 421


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.0\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: a b\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: {host}:\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: localhost:99999\r\n\r\n",
    ],
    ids=["none", "twice", "space", "empty port", "port out of range"],
)
def test_no_host_several_or_a_malformed_one_is_400(
    standin: StandinProcess, client: httpx.Client, head: bytes
) -> None:
    status, problem = raw_exchange(standin.url, head)

    assert status == 400
    assert problem["type"] == PROBLEM + "invalid-host"
    assert client.get("/health").status_code == 200


def test_a_misdirected_body_is_never_read_as_the_next_request(standin: StandinProcess) -> None:
    parts = urlsplit(standin.url)
    smuggled = f"GET /health HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    request = (
        b"POST /faults HTTP/1.1\r\nHost: attacker.example\r\n"
        b"Content-Length: %d\r\n\r\n" % len(smuggled)
    ) + smuggled

    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):  # to the end: the server closes after the refusal
            received += chunk

    assert received.startswith(b"HTTP/1.1 421 ")
    assert received.count(b"HTTP/1.1 ") == 1


@pytest.fixture
def named() -> Iterator[PaymentStandin]:
    standin = PaymentStandin(allowed_hosts=["payments.internal", "gateway:8443"]).start()
    yield standin
    standin.stop()


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("payments.internal:{port}", 200),
        ("PAYMENTS.internal:{port}", 200),
        ("gateway:8443", 200),
        ("127.0.0.1:{port}", 200),
        ("payments.internal:1", 421),
        ("gateway:{port}", 421),
        ("internal:{port}", 421),
    ],
)
def test_allowed_hosts_add_names_with_the_bound_port_or_their_own(
    named: PaymentStandin, host: str, status: int
) -> None:
    answer = httpx.get(named.url + "/health", headers={"Host": host.format(port=named.port)})

    assert answer.status_code == status


@pytest.mark.parametrize("entry", ["", "a b", "host:0", "host:65536", "host:", "http://host"])
def test_a_bad_allowed_host_is_refused_at_construction(entry: str) -> None:
    with pytest.raises(ValueError, match="--allowed-host"):
        PaymentStandin(allowed_hosts=[entry])
