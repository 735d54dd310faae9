"""Signed raw REST calls, for requests the SDK refuses to send (bad ids, bad signatures)."""

from __future__ import annotations

import http.client
import json
import urllib.parse
import uuid
from collections.abc import Iterable
from email.utils import formatdate
from typing import Any

from cosmos_emulator.auth import authorization_header, resource_of


def call(
    url: str,
    key: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    sign: bool = True,
) -> tuple[int, dict[str, str], Any]:
    parsed = urllib.parse.urlsplit(url)
    segments = [urllib.parse.unquote(s) for s in path.split("/") if s]
    resource_type, link = resource_of(segments)
    date = formatdate(usegmt=True)
    all_headers = {
        "x-ms-date": date,
        "x-ms-version": "2020-07-15",
        "Content-Type": "application/json",
    }
    if sign:
        all_headers["authorization"] = authorization_header(key, method, resource_type, link, date)
    all_headers.update(headers or {})
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=10)
    try:
        payload = (
            body
            if isinstance(body, bytes)
            else (None if body is None else json.dumps(body).encode())
        )
        conn.request(method, path, body=payload, headers=all_headers)
        resp = conn.getresponse()
        raw = resp.read()
        data = json.loads(raw) if raw else None
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def unique(prefix: str) -> str:
    """A random resource name, so tests never collide (xdist-safe)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def values(results: Iterable[Any]) -> list[Any]:
    """Query results as plain values: the SDK types every row as a dict, even for
    `SELECT VALUE` (numbers, strings)."""
    return list(results)
