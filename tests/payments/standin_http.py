"""Talking to the stand-in in tests: its JSON API through httpx, and raw bytes over a socket."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx

PROBLEM = "urn:payments-standin:problem:"


def charge(
    client: httpx.Client, key: str, order_id: str, amount: str = "12.50", currency: str = "EUR"
) -> httpx.Response:
    body = {"orderId": order_id, "amount": amount, "currency": currency}
    return client.post("/payments", json=body, headers={"Idempotency-Key": key})


def charges_of(client: httpx.Client, order_id: str) -> list[dict[str, Any]]:
    response = client.get("/payments", params={"orderId": order_id})
    assert response.status_code == 200
    payments: list[dict[str, Any]] = response.json()["payments"]
    return payments


def refund(
    client: httpx.Client, key: str, payment_id: str, amount: str = "12.50", currency: str = "EUR"
) -> httpx.Response:
    body = {"paymentId": payment_id, "amount": amount, "currency": currency}
    return client.post("/refunds", json=body, headers={"Idempotency-Key": key})


def refunds_of(client: httpx.Client, **query: str) -> list[dict[str, Any]]:
    """The refunds `GET /refunds?orderId=` or `?paymentId=` lists (one page is enough here)."""
    response = client.get("/refunds", params=query)
    assert response.status_code == 200
    refunds: list[dict[str, Any]] = response.json()["refunds"]
    return refunds


def raw_exchange(
    url: str, request: bytes, *, half_close: bool = False, token: str = ""
) -> tuple[int, Any]:
    """Send bytes as they are, but for `{host}`, which becomes the stand-in's own address (the
    one Host it serves), and `{token}`, which becomes `token` (the money routes' own);
    (status, JSON body) of the answer, read until the server closes the connection (every
    refusal of a malformed request closes it) or Content-Length is met."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(
            request.replace(b"{host}", parts.netloc.encode()).replace(b"{token}", token.encode())
        )
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    status = int(lines[0].split(" ")[1])
    assert headers.get("content-type") == "application/problem+json", (status, headers)
    return status, json.loads(body)
