"""Hostile and careless input: every bad request is a 400-family problem, nothing is charged,
and the stand-in keeps serving."""

from __future__ import annotations

import json

import httpx
import pytest
from payment_service import StandinProcess
from standin_http import PROBLEM, charge, charges_of, raw_exchange

GOOD = {"orderId": "o-hostile", "amount": "12.50", "currency": "EUR"}


def with_field(name: str, value: object) -> bytes:
    return json.dumps({**GOOD, name: value}).encode()


HOSTILE_BODIES = {
    "not json": b"charge me",
    "empty": b"",
    "NaN": b'{"orderId": "o-1", "amount": NaN, "currency": "EUR"}',
    "Infinity amount": b'{"orderId": "o-1", "amount": Infinity, "currency": "EUR"}',
    "duplicate key": b'{"orderId": "o-1", "amount": "1", "amount": "2", "currency": "EUR"}',
    "array": b"[]",
    "two documents": json.dumps(GOOD).encode() * 2,
    "invalid utf-8": b'{"orderId": "o-\xff", "amount": "1", "currency": "EUR"}',
    "utf-8 bom": b"\xef\xbb\xbf" + json.dumps(GOOD).encode(),
    "utf-16": json.dumps(GOOD).encode("utf-16"),
    "deep nesting": b"[" * 2000 + b"]" * 2000,
    "huge integer": b'{"orderId": "o-1", "amount": ' + b"9" * 4000 + b', "currency": "EUR"}',
    "missing field": json.dumps({"orderId": "o-1", "amount": "1"}).encode(),
    "unknown field": with_field("customer", "c-1"),
    "amount as number": with_field("amount", 12.5),
    "amount negative": with_field("amount", "-1"),
    "amount with plus": with_field("amount", "+1"),
    "amount exponent": with_field("amount", "1e3"),
    "amount leading zero": with_field("amount", "012"),
    "amount five decimals": with_field("amount", "1.12345"),
    "amount 21 digits": with_field("amount", "1" * 21),
    "amount with space": with_field("amount", " 1"),
    "amount arabic digits": with_field("amount", "\u0661\u0662"),
    "amount empty": with_field("amount", ""),
    "amount bare point": with_field("amount", "1."),
    "currency lower case": with_field("currency", "eur"),
    "currency four letters": with_field("currency", "EURO"),
    "currency non-ascii": with_field("currency", "\u00c9UR"),
    "orderId empty": with_field("orderId", ""),
    "orderId 65 characters": with_field("orderId", "o" * 65),
    "orderId control character": with_field("orderId", "o-1\n"),
    "orderId lone surrogate": b'{"orderId": "o-\\ud800", "amount": "1", "currency": "EUR"}',
    "orderId trailing space": with_field("orderId", "o-1 "),
    "orderId number": with_field("orderId", 1001),
    "orderId null": with_field("orderId", None),
}


@pytest.mark.parametrize("body", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
def test_a_hostile_body_is_a_400_problem_and_charges_nothing(
    client: httpx.Client, body: bytes
) -> None:
    key = "hostile-" + str(abs(hash(body)))

    response = client.post(
        "/payments",
        content=body,
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )

    assert response.status_code == 400, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == PROBLEM + "invalid-request"
    assert problem["status"] == 400
    assert len(problem["detail"]) < 500  # a hostile body never makes a long answer
    assert charges_of(client, "o-1") == charges_of(client, "o-hostile") == []
    # The key was never used: the same key now charges.
    assert charge(client, key, f"ok-{key}").status_code == 201


@pytest.mark.parametrize(
    "headers",
    [
        [("Idempotency-Key", "")],
        [("Idempotency-Key", "k" * 256)],
        [("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
        [("Idempotency-Key", "caf\u00e9")],
        [("Idempotency-Key", "tab\there")],
    ],
    ids=["empty", "256 characters", "twice", "non-ascii", "control character"],
)
def test_a_bad_key_is_a_400_problem(client: httpx.Client, headers: list[tuple[str, str]]) -> None:
    request = client.build_request(
        "POST",
        "/payments",
        content=json.dumps(GOOD).encode(),
        headers=[
            (b"Content-Type", b"application/json"),
            *((n.encode(), v.encode("latin-1")) for n, v in headers),
        ],
    )

    response = client.send(request)

    assert response.status_code == 400
    assert response.json()["type"] == PROBLEM + "invalid-idempotency-key"
    assert charges_of(client, GOOD["orderId"]) == []


def post_raw(body: bytes, extra_headers: str = "", length: int | None = None) -> bytes:
    length_header = "" if length is None else f"Content-Length: {length}\r\n"
    return (
        f"POST /payments HTTP/1.1\r\nHost: {{host}}\r\nIdempotency-Key: raw\r\n{length_header}"
        "Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"{extra_headers}\r\n"
    ).encode() + body


@pytest.mark.parametrize(
    ("request_bytes", "status", "slug"),
    [
        (post_raw(b"x" * 5000, length=5000), 413, "body-too-large"),
        (post_raw(b"", length=10**15), 413, "body-too-large"),
        (post_raw(b"{}"), 411, "length-required"),
        (
            post_raw(b"2\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding: chunked\r\n"),
            411,
            "length-required",
        ),
        (post_raw(b"{}", "Content-Length: 2\r\n", length=2), 400, "invalid-content-length"),
        (post_raw(b"{}", "Content-Length: abc\r\n"), 400, "invalid-content-length"),
        (post_raw(b"{}", "Content-Length: -2\r\n"), 400, "invalid-content-length"),
        (post_raw(b"{}", "Content-Length: 1" + "0" * 30 + "\r\n"), 413, "body-too-large"),
        (b"GARBAGE\r\n\r\n", 400, "bad-request"),
        (b"GET /payments HTTP/9.9\r\n\r\n", 505, "http-version-not-supported"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414, "request-uri-too-long"),
        (
            b"GET /health HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
            431,
            "request-header-fields-too-large",
        ),
        (b"BREW /payments HTTP/1.1\r\nHost: {host}\r\n\r\n", 501, "not-implemented"),
        (b"PUT /payments HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n", 405, None),
        (b"GET /admin HTTP/1.1\r\nHost: {host}\r\n\r\n", 404, "not-found"),
    ],
    ids=[
        "body over the limit",
        "announced petabyte",
        "no content-length",
        "chunked",
        "content-length twice",
        "content-length not a number",
        "content-length negative",
        "content-length 31 digits",
        "garbage request line",
        "unknown http version",
        "70 KB request line",
        "200 headers",
        "unknown method",
        "method not allowed",
        "unknown path",
    ],
)
def test_malformed_http_is_a_problem_and_the_server_keeps_serving(
    standin: StandinProcess,
    client: httpx.Client,
    request_bytes: bytes,
    status: int,
    slug: str | None,
) -> None:
    answered, problem = raw_exchange(standin.url, request_bytes, token=standin.token)

    assert answered == status
    assert problem["status"] == status
    if slug is not None:
        assert problem["type"] == PROBLEM + slug
    assert client.get("/health").status_code == 200


def test_a_body_shorter_than_its_content_length_is_refused(
    standin: StandinProcess, client: httpx.Client
) -> None:
    answered, problem = raw_exchange(
        standin.url, post_raw(b"{}", length=100), half_close=True, token=standin.token
    )

    assert answered == 400
    assert problem["type"] == PROBLEM + "incomplete-body"
    assert client.get("/payments", params={"limit": "1"}).status_code == 200


@pytest.mark.parametrize(
    "query",
    [
        {"surprise": "1"},
        {"limit": "0"},
        {"limit": "1001"},
        {"limit": "ten"},
        {"after": "-1"},
        {"after": "9" * 40},
        {"orderId": ""},
        {"orderId": "o" * 65},
        {"orderId": "o-1\x00"},
    ],
)
def test_a_bad_list_query_is_a_400_problem(client: httpx.Client, query: dict[str, str]) -> None:
    response = client.get("/payments", params=query)

    assert response.status_code == 400
    assert response.json()["type"] == PROBLEM + "invalid-request"


def test_a_repeated_or_malformed_query_is_a_400_problem(client: httpx.Client) -> None:
    assert client.get("/payments?orderId=a&orderId=b").status_code == 400
    assert client.get("/payments?&&=").status_code == 400
    assert client.get("/payments?" + "a=1&" * 50).status_code == 400
