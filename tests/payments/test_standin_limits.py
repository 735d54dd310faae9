"""Connection cap and socket timeout, on an in-process stand-in with small limits."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from standin_http import PROBLEM, raw_exchange

from payments_standin import PaymentStandin, ServerLimits


@pytest.fixture
def small() -> Iterator[PaymentStandin]:
    standin = PaymentStandin(
        limits=ServerLimits(socket_timeout_seconds=0.5, max_connections=2)
    ).start()
    yield standin
    standin.stop()


def healthy(url: str) -> bool:
    """Polls until a new connection is served (bounded): slots free when handlers end."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


def test_connections_over_the_cap_get_503_and_the_slots_come_back(small: PaymentStandin) -> None:
    idle = [socket.create_connection((small.host, small.port)) for _ in range(2)]
    try:
        # The kernel's accept queue is FIFO: both idle connections take a slot before the third.
        status, problem = raw_exchange(small.url, b"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n")
    finally:
        for connection in idle:
            connection.close()

    assert status == 503
    assert problem["type"] == PROBLEM + "too-many-connections"
    assert healthy(small.url)


def test_a_client_that_stops_sending_loses_its_connection_not_the_server(
    small: PaymentStandin,
) -> None:
    with socket.create_connection((small.host, small.port)) as stalled:
        stalled.sendall(
            f"POST /payments HTTP/1.1\r\nHost: {small.host}:{small.port}\r\n".encode()
            + f"Authorization: Bearer {small.money_token}\r\n".encode()
            + b"Content-Type: application/json\r\n"
            + b"Idempotency-Key: k\r\nContent-Length: 100\r\n\r\n{"
        )
        stalled.settimeout(10)
        assert stalled.recv(1024) == b""  # closed by the server's socket timeout

    assert healthy(small.url)
    assert small.ledger.list(None, 0, 10) == []


def test_stop_is_idempotent_and_releases_the_port() -> None:
    standin = PaymentStandin().start()
    port = standin.port
    standin.stop()
    standin.stop()

    with socket.socket() as again:
        again.bind(("127.0.0.1", port))
