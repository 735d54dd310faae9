"""The idempotency rules without any I/O: keys, record ids, the record's stored shape, the
published body. (The verdicts on a found record and Retry-After are the core's: tests/core.)"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal

import pytest
from fakes import order_payload

from exactly_once._records import Record
from orders.adapters.cosmos_idempotency import IntakeRecordShape
from orders.adapters.servicebus_publisher import order_message_body
from orders.domain.hashing import request_hash
from orders.domain.idempotency import (
    KeyRecord,
    RecordStatus,
    key_claim,
    record_id,
    validate_idempotency_key,
)
from orders.domain.messages import parse_order, parse_order_message
from orders.entrypoints.http_contract import StoredResponse, accepted_response, order_location
from orders.exceptions import InvalidIdempotencyKeyError


def claim(status: RecordStatus = RecordStatus.IN_PROGRESS) -> Record:
    claimed = key_claim("s", "k", "o-1", "h1", owner="http-1", lease_seconds=30, ttl_seconds=60)
    if status is RecordStatus.COMPLETED:
        return replace(claimed, status=status, result=accepted_response("o-1"), attempts=2)
    return claimed


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


@pytest.mark.parametrize("status", [RecordStatus.IN_PROGRESS, RecordStatus.COMPLETED])
def test_the_record_shape_round_trips_in_the_fields_its_readers_know(
    status: RecordStatus,
) -> None:
    original = claim(status)
    shape = IntakeRecordShape()

    document = shape.fields(original)

    assert shape.record_type == "idempotencyRecord"
    assert {key: document[key] for key in ("scope", "key", "orderId", "status")} == {
        "scope": "s",
        "key": "k",
        "orderId": "o-1",
        "status": status.value,
    }
    assert document["response"] == original.result
    # id, type, ttl and the stamp are the store's to write and read (CosmosStore)
    assert not {"id", "type", "ttl", "_etag", "_ts"} & document.keys()
    read = shape.record(document, original.key, original.partition)
    assert read == replace(original, expires_after_seconds=None)
    assert KeyRecord.of(read).answer == (
        original.result if status is RecordStatus.COMPLETED else None
    )


def test_a_record_written_before_database_clock_leases_is_read_with_its_lease() -> None:
    """Records written by the previous version (within their TTL after an upgrade) carry the
    claimant's `leaseExpiresAt` and no owner: the lease left is counted from their `_ts`."""
    identifier = record_id("s", "k")
    legacy: dict[str, object] = {
        "id": identifier,
        "type": "idempotencyRecord",
        "scope": "s",
        "key": "k",
        "requestHash": "h1",
        "orderId": "o-1",
        "status": "inProgress",
        "leaseExpiresAt": 1_000.5 + 30,
        "response": None,
        "ttl": 60,
        "_etag": '"e"',
        "_ts": 1_000,
    }

    read = IntakeRecordShape().record(legacy, identifier, identifier)

    # Its lease ran from the end of its `_ts` second (1001 s) to 1030.5 s.
    assert (read.owner, read.attempts, read.lease_seconds) == ("", 1, 29.5)
    assert KeyRecord.of(read) == KeyRecord(
        identifier, "s", "k", "o-1", "h1", status=RecordStatus.IN_PROGRESS, answer=None
    )


def test_a_stored_response_is_json_the_entrypoint_maps_back() -> None:
    answer = accepted_response("o-1")

    assert answer == {
        "statusCode": 202,
        "body": {"orderId": "o-1", "status": "accepted", "location": "/api/orders/o-1"},
        "headers": {"Location": "/api/orders/o-1"},
    }
    assert StoredResponse.of_json(answer).to_json() == answer


def test_location_escapes_the_order_id() -> None:
    assert order_location("o 1%") == "/api/orders/o%201%25"


@pytest.mark.parametrize("price", ["0.0001", "12345678901.2345", "1E+2", "3", "1.250", "0"])
def test_published_body_is_what_the_consumer_accepts_with_exact_amounts(price: str) -> None:
    payload = order_payload("o-1:eu@shop_2.x", lines=[{"sku": "s", "quantity": 2, "unitPrice": 0}])
    text = json.dumps(payload).replace('"unitPrice": 0', f'"unitPrice": {price}')
    order = parse_order(text.encode())

    body = order_message_body(order)

    parsed = parse_order_message(body, message_id=order.order_id)
    assert parsed == order
    assert request_hash(parsed.canonical_payload()) == request_hash(order.canonical_payload())
    assert json.loads(body, parse_float=Decimal)["lines"][0]["unitPrice"] == Decimal(price)
