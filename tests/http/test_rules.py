"""The idempotency rules without any I/O: keys, record ids, verdicts, the published body."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from fakes import order_payload

from orders.adapters.servicebus_publisher import order_message_body
from orders.domain.hashing import request_hash
from orders.domain.idempotency import (
    IdempotencyRecord,
    RecordStatus,
    Verdict,
    judge,
    record_id,
    retry_after_seconds,
    validate_idempotency_key,
)
from orders.domain.messages import parse_order, parse_order_message
from orders.entrypoints.http_contract import accepted_response, order_location
from orders.exceptions import InvalidIdempotencyKeyError

NOW = 1_000.0


def record(
    status: RecordStatus, *, lease_expires_at: float, hash_: str = "h1"
) -> IdempotencyRecord:
    return IdempotencyRecord(
        record_id="r",
        scope="s",
        key="k",
        request_hash=hash_,
        order_id="o-1",
        status=status,
        lease_expires_at=lease_expires_at,
        ttl_seconds=60,
        response=accepted_response("o-1") if status is RecordStatus.COMPLETED else None,
        etag='"e"',
    )


@pytest.mark.parametrize(
    ("status", "lease_expires_at", "incoming_hash", "verdict"),
    [
        (RecordStatus.COMPLETED, NOW - 100, "h1", Verdict.REPLAY),
        (RecordStatus.COMPLETED, NOW + 100, "h1", Verdict.REPLAY),
        (RecordStatus.COMPLETED, NOW + 100, "h2", Verdict.MISMATCH),
        (RecordStatus.IN_PROGRESS, NOW + 0.5, "h1", Verdict.IN_PROGRESS),
        (RecordStatus.IN_PROGRESS, NOW + 0.5, "h2", Verdict.MISMATCH),
        (RecordStatus.IN_PROGRESS, NOW, "h1", Verdict.TAKE_OVER),
        (RecordStatus.IN_PROGRESS, NOW - 1, "h1", Verdict.TAKE_OVER),
    ],
)
def test_verdicts(
    status: RecordStatus, lease_expires_at: float, incoming_hash: str, verdict: Verdict
) -> None:
    assert judge(record(status, lease_expires_at=lease_expires_at), incoming_hash, NOW) is verdict


@pytest.mark.parametrize(
    ("remaining", "cap", "expected"), [(0.2, 1, 1), (25.0, 1, 1), (25.0, 10, 10), (3.2, 10, 4)]
)
def test_retry_after_is_at_least_one_and_at_most_the_cap(
    remaining: float, cap: int, expected: int
) -> None:
    existing = record(RecordStatus.IN_PROGRESS, lease_expires_at=NOW + remaining)
    assert retry_after_seconds(existing, NOW, cap) == expected


def test_record_ids_are_cosmos_safe_and_unambiguous() -> None:
    ids = {record_id("ab", "c"), record_id("a", "bc"), record_id("a", "b/c?#\\"), record_id("", "")}
    assert len(ids) == 4
    assert all(len(i) == 64 and i.isalnum() for i in ids)


@pytest.mark.parametrize("key", ["k", " ", "~" * 255, "Stripe-like_KEY-123:/?#"])
def test_valid_keys(key: str) -> None:
    assert validate_idempotency_key(key) == key


@pytest.mark.parametrize(
    ("key", "missing"),
    [(None, True), ("", True), ("x" * 256, False), ("a\nb", False), ("\u00e9", False)],
)
def test_invalid_keys(key: str | None, missing: bool) -> None:
    with pytest.raises(InvalidIdempotencyKeyError) as raised:
        validate_idempotency_key(key)
    assert raised.value.missing is missing


def test_record_document_round_trip_keeps_everything_and_sets_the_item_ttl() -> None:
    original = record(RecordStatus.COMPLETED, lease_expires_at=NOW)
    document = original.to_document() | {"_etag": '"e"'}

    assert document["ttl"] == 60 and document["id"] == "r"
    assert IdempotencyRecord.from_document(document) == original


def test_location_escapes_the_order_id() -> None:
    assert order_location("o 1%") == "/api/orders/o%201%25"


@pytest.mark.parametrize("price", ["0.0001", "12345678901.2345", "1E+2", "3", "1.250", "0"])
def test_published_body_is_what_the_consumer_accepts_with_exact_amounts(price: str) -> None:
    payload = order_payload('o-\u00e9"1', lines=[{"sku": "s", "quantity": 2, "unitPrice": 0}])
    text = json.dumps(payload).replace('"unitPrice": 0', f'"unitPrice": {price}')
    order = parse_order(text.encode())

    body = order_message_body(order)

    parsed = parse_order_message(body, message_id=order.order_id)
    assert parsed == order
    assert request_hash(parsed.canonical_payload()) == request_hash(order.canonical_payload())
    assert json.loads(body, parse_float=Decimal)["lines"][0]["unitPrice"] == Decimal(price)
