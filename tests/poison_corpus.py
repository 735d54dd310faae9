"""The poison corpus: every kind of bad message we know, with the reason it must earn.

One list drives every entry point: real `orders worker` processes (tests/e2e/test_poison.py),
the Functions trigger (tests/unit/test_poison_functions.py), `POST /api/orders`
(tests/http/test_poison_http.py) and the benchmark that prints what a rejection costs
(scripts/bench_poison.py). Each case is built for one order id so runs never collide.

When you add a parser or an endpoint, add its hostile cases here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orders.domain.events import MAX_EVENT_BODY_BYTES
from orders.domain.messages import MAX_BODY_BYTES, MAX_LINES_PER_ORDER, DeadLetterReason
from orders.domain.received import BodyKind
from orders.domain.status import MAX_STATUS_BODY_BYTES

INVALID_JSON = DeadLetterReason.INVALID_JSON.value
SCHEMA = DeadLetterReason.SCHEMA_VIOLATION.value
TOO_LARGE = DeadLetterReason.ORDER_TOO_LARGE.value
ID_MISMATCH = DeadLetterReason.MESSAGE_ID_MISMATCH.value

# What POST /api/orders answers for a body rejected with each reason.
HTTP_PROBLEM = {
    INVALID_JSON: (400, "invalid-json"),
    SCHEMA: (400, "invalid-order"),
    TOO_LARGE: (413, "order-too-large"),
}

SAME_AS_ORDER = "<orderId>"  # the message id is the case's own order id


@dataclass(frozen=True)
class PoisonCase:
    name: str
    reason: str
    body: bytes
    message_id: str | None
    body_kind: BodyKind = BodyKind.DATA
    # Only the bytes are poison (the HTTP body path applies); message-level cases are not.
    body_only: bool = True
    value: Any = None  # the AMQP value or sequence, for non-data bodies
    notes: str = field(default="", compare=False)


def order(order_id: str, **changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "orderId": order_id,
        "customerId": "customer-1",
        "currency": "EUR",
        "lines": [{"sku": "sku-1", "quantity": 2, "unitPrice": 1.25}],
    }
    document.update(changes)
    return document


def with_line(order_id: str, **line_changes: Any) -> dict[str, Any]:
    return order(
        order_id, lines=[{"sku": "sku-1", "quantity": 2, "unitPrice": 1.25} | line_changes]
    )


def dumps(document: Any) -> bytes:
    return json.dumps(document).encode()


def line_raw(order_id: str, field_name: str, literal: str) -> bytes:
    """An order whose line field is written as the raw JSON text `literal`."""
    line = {"sku": "sku-1", "quantity": 2, "unitPrice": 1.25}
    parts = [
        f'"{name}": {literal if name == field_name else json.dumps(value)}'
        for name, value in line.items()
    ]
    return (
        f'{{"orderId": {json.dumps(order_id)}, "customerId": "c-1", "currency": "EUR", '
        f'"lines": [{{{", ".join(parts)}}}]}}'
    ).encode()


def raw_id(literal: str) -> bytes:
    """An order whose orderId is the raw JSON text `literal` (escapes stay as written)."""
    return (
        f'{{"orderId": {literal}, "customerId": "c-1", "currency": "EUR", '
        '"lines": [{"sku": "a", "quantity": 1, "unitPrice": 1}]}'
    ).encode()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _body_cases() -> list[tuple[str, str, Callable[[str], bytes]]]:
    """(name, reason, body of order id) for cases whose message id is the order id."""
    big_int = "1" * 5000
    return [
        # --- not JSON, or JSON we refuse to decode -> InvalidJson
        ("empty-body", INVALID_JSON, lambda oid: b""),
        ("not-json", INVALID_JSON, lambda oid: b"hello, world"),
        ("invalid-utf8", INVALID_JSON, lambda oid: b'{"orderId": "\xff\xfe"}'),
        ("utf8-bom", INVALID_JSON, lambda oid: b"\xef\xbb\xbf" + dumps(order(oid))),
        ("utf16-body", INVALID_JSON, lambda oid: json.dumps(order(oid)).encode("utf-16")),
        ("truncated", INVALID_JSON, lambda oid: dumps(order(oid))[:-7]),
        ("trailing-garbage", INVALID_JSON, lambda oid: dumps(order(oid)) + b" x"),
        ("two-documents", INVALID_JSON, lambda oid: dumps(order(oid)) * 2),
        ("single-quotes", INVALID_JSON, lambda oid: dumps(order(oid)).replace(b'"', b"'")),
        ("nan-literal", INVALID_JSON, lambda oid: line_raw(oid, "unitPrice", "NaN")),
        ("infinity-literal", INVALID_JSON, lambda oid: line_raw(oid, "unitPrice", "Infinity")),
        ("minus-infinity", INVALID_JSON, lambda oid: line_raw(oid, "quantity", "-Infinity")),
        ("nested-1000", INVALID_JSON, lambda oid: nested(1000).encode()),
        (
            "nested-100k-unknown-field",
            TOO_LARGE,
            lambda oid: dumps(order(oid))[:-1] + b', "x": ' + nested(100_000).encode() + b"}",
        ),
        (
            "int-5000-digits-unknown-field",
            INVALID_JSON,
            lambda oid: dumps(order(oid))[:-1] + b', "x": ' + big_int.encode() + b"}",
        ),
        ("int-5000-digits-quantity", INVALID_JSON, lambda oid: line_raw(oid, "quantity", big_int)),
        ("int-41-digits-quantity", INVALID_JSON, lambda oid: line_raw(oid, "quantity", "9" * 41)),
        # --- JSON, but not an order -> SchemaViolation
        (
            "cpu-bomb-quantity",
            SCHEMA,
            lambda oid: line_raw(oid, "quantity", "1E+999999999999"),
        ),
        ("cpu-bomb-quantity-1e10m", SCHEMA, lambda oid: line_raw(oid, "quantity", "1E+10000000")),
        ("huge-price", SCHEMA, lambda oid: line_raw(oid, "unitPrice", "1E+999999999999")),
        ("tiny-price", SCHEMA, lambda oid: line_raw(oid, "unitPrice", "1E-999999999")),
        ("quantity-true", SCHEMA, lambda oid: dumps(with_line(oid, quantity=True))),
        ("quantity-string", SCHEMA, lambda oid: dumps(with_line(oid, quantity="2"))),
        ("quantity-2.0", SCHEMA, lambda oid: line_raw(oid, "quantity", "2.0")),
        ("quantity-2e0", SCHEMA, lambda oid: line_raw(oid, "quantity", "2e0")),
        ("price-string", SCHEMA, lambda oid: dumps(with_line(oid, unitPrice="1.25"))),
        ("price-true", SCHEMA, lambda oid: dumps(with_line(oid, unitPrice=True))),
        ("price-null", SCHEMA, lambda oid: dumps(with_line(oid, unitPrice=None))),
        ("quantity-zero", SCHEMA, lambda oid: dumps(with_line(oid, quantity=0))),
        ("quantity-negative", SCHEMA, lambda oid: dumps(with_line(oid, quantity=-1))),
        ("quantity-too-big", SCHEMA, lambda oid: dumps(with_line(oid, quantity=1_000_001))),
        ("price-negative", SCHEMA, lambda oid: line_raw(oid, "unitPrice", "-0.01")),
        ("price-5-decimals", SCHEMA, lambda oid: line_raw(oid, "unitPrice", "0.00001")),
        ("price-16-digits", SCHEMA, lambda oid: line_raw(oid, "unitPrice", "1234567890123.456")),
        ("currency-lowercase", SCHEMA, lambda oid: dumps(order(oid, currency="eur"))),
        ("currency-unknown", SCHEMA, lambda oid: dumps(order(oid, currency="XXY"))),
        ("currency-number", SCHEMA, lambda oid: dumps(order(oid, currency=978))),
        ("customer-id-number", SCHEMA, lambda oid: dumps(order(oid, customerId=42))),
        ("customer-id-newline", SCHEMA, lambda oid: dumps(order(oid, customerId="c\nALERT x"))),
        ("sku-tab", SCHEMA, lambda oid: dumps(with_line(oid, sku="a\tb"))),
        ("sku-trailing-space", SCHEMA, lambda oid: dumps(with_line(oid, sku="a "))),
        (
            "lines-missing",
            SCHEMA,
            lambda oid: dumps({k: v for k, v in order(oid).items() if k != "lines"}),
        ),
        ("lines-empty", SCHEMA, lambda oid: dumps(order(oid, lines=[]))),
        ("lines-object", SCHEMA, lambda oid: dumps(order(oid, lines={"sku": "a"}))),
        ("lines-of-nulls", SCHEMA, lambda oid: dumps(order(oid, lines=[None, None]))),
        ("unknown-field", SCHEMA, lambda oid: dumps(order(oid, extra="x"))),
        ("unknown-line-field", SCHEMA, lambda oid: dumps(with_line(oid, discount=1))),
        (
            "nested-500-unknown-field",
            SCHEMA,
            lambda oid: dumps(order(oid))[:-1] + b', "x": ' + nested(500).encode() + b"}",
        ),
        (
            "many-errors",
            SCHEMA,
            lambda oid: dumps(
                order(oid, lines=[{"sku": 1, "quantity": "x"}] * MAX_LINES_PER_ORDER)
            ),
        ),
        # --- too large for one message or one transactional batch -> OrderTooLarge
        (
            "100-lines",
            TOO_LARGE,
            lambda oid: dumps(
                order(
                    oid,
                    lines=[{"sku": "a", "quantity": 1, "unitPrice": 1}] * (MAX_LINES_PER_ORDER + 1),
                )
            ),
        ),
        (
            "87k-empty-lines",
            TOO_LARGE,
            lambda oid: (
                dumps(order(oid))[:-1].replace(b'"lines": [', b'"lines": [' + b"{}," * 87_000)
                + b"}"
            ),
        ),
        (
            "87k-numbers-unknown-field",
            TOO_LARGE,
            lambda oid: dumps(order(oid))[:-1] + b', "x": [' + b"1," * 87_000 + b"1]}",
        ),
        (
            "body-over-256k",
            TOO_LARGE,
            lambda oid: dumps(order(oid, padding="x" * (MAX_BODY_BYTES + 1))),
        ),
    ]


def _id_cases() -> list[tuple[str, str]]:
    """(name, raw JSON literal of the orderId) for ids Cosmos refuses or we refuse."""
    return [
        ("id-trailing-space", '"o-1 "'),
        ("id-c1-control", '"o-\\u0085"'),
        ("id-c0-control", '"o-\\u0001"'),
        ("id-nul", '"o-\\u0000"'),
        ("id-newline", '"o-1\\noutcome=processed"'),
        ("id-whitespace-only", '"\\u3000\\u3000"'),
        ("id-spaces-only", '"   "'),
        ("id-slash", '"o/1"'),
        ("id-hash", '"o#1"'),
        ("id-question-mark", '"o?1"'),
        ("id-backslash", '"o\\\\1"'),
        ("id-65-chars", json.dumps("o" * 65)),
        ("id-empty", '""'),
        ("id-not-nfc", '"e\\u0301"'),
        ("id-lone-surrogate", '"o-\\ud800"'),
        ("id-number", "1001"),
        ("id-null", "null"),
    ]


def poison_cases(prefix: str) -> list[PoisonCase]:
    """Every case, each with its own order id under `prefix` (e.g. a test's run id)."""
    cases: list[PoisonCase] = []
    for number, (name, reason, build) in enumerate(_body_cases()):
        order_id = f"{prefix}-b{number:02d}"
        cases.append(PoisonCase(name, reason, build(order_id), order_id))
    for number, (name, literal) in enumerate(_id_cases()):
        # The message id is a valid stand-in: the body's id is what must be refused.
        cases.append(PoisonCase(name, SCHEMA, raw_id(literal), f"{prefix}-i{number:02d}"))
    valid = dumps(order(f"{prefix}-m00"))
    cases += [
        PoisonCase("message-id-differs", ID_MISMATCH, valid, f"{prefix}-m99", body_only=False),
        PoisonCase("message-id-missing", ID_MISMATCH, valid, None, body_only=False),
        PoisonCase(
            "message-id-newline",
            ID_MISMATCH,
            valid,
            f"{prefix}-m00\nINFO forged outcome=processed",
            body_only=False,
        ),
        PoisonCase(
            "message-id-trailing-space", ID_MISMATCH, valid, f"{prefix}-m00 ", body_only=False
        ),
        PoisonCase(
            "amqp-value-body",
            INVALID_JSON,
            b"",
            f"{prefix}-m01",
            body_kind=BodyKind.VALUE,
            body_only=False,
            value=json.dumps(order(f"{prefix}-m01")),
        ),
        PoisonCase(
            "amqp-sequence-body",
            INVALID_JSON,
            b"",
            f"{prefix}-m02",
            body_kind=BodyKind.SEQUENCE,
            body_only=False,
            value=[[1, 2, 3]],
        ),
    ]
    return cases


def valid_order_body(order_id: str) -> bytes:
    return dumps(order(order_id))


# --- After the order: events on the topic and status updates on the status queue --------------


def valid_event_document(order_id: str) -> dict[str, Any]:
    return {
        "eventType": "OrderAccepted",
        "eventId": f"{order_id}:outbox:OrderAccepted",
        "orderId": order_id,
        "customerId": "customer-1",
        "currency": "EUR",
        "totalAmount": "2.5",
        "lineCount": 1,
        "acceptedAt": "2026-11-30T00:00:00+00:00",
    }


def valid_order_document(order_id: str) -> dict[str, Any]:
    """The order `valid_event_document(order_id)` is the `OrderAccepted` of."""
    return {
        "orderId": order_id,
        "customerId": "customer-1",
        "currency": "EUR",
        "lines": [{"sku": "sku-1", "quantity": 1, "unitPrice": 2.5}],
    }


def valid_status_document(order_id: str) -> dict[str, Any]:
    return {"orderId": order_id, "status": "paid", "version": 2, "changedAt": "2026-11-30"}


def _small_message_cases(
    prefix: str,
    tag: str,
    valid: Callable[[str], dict[str, Any]],
    message_id: Callable[[str], str],
    max_bytes: int,
) -> list[PoisonCase]:
    """What every small-message parser (events, status updates) must refuse, with its reason."""
    builders: list[tuple[str, str, Callable[[str], bytes]]] = [
        ("empty-body", INVALID_JSON, lambda oid: b""),
        ("not-utf8", INVALID_JSON, lambda oid: b"\xff\xfe{}"),
        ("not-json", INVALID_JSON, lambda oid: b"{oops"),
        ("nan", INVALID_JSON, lambda oid: dumps(valid(oid))[:-1] + b', "x": NaN}'),
        ("integer-100-digits", INVALID_JSON, lambda oid: b'{"version": ' + b"9" * 100 + b"}"),
        # Deep, yet within the decoder's depth: decoded, then refused as no object.
        ("nested-600", SCHEMA, lambda oid: nested(600).encode()),
        ("array", SCHEMA, lambda oid: b"[]"),
        ("unknown-field", SCHEMA, lambda oid: dumps(valid(oid) | {"extra": 1})),
        ("missing-order-id", SCHEMA, lambda oid: dumps({**valid(oid), "orderId": None})),
        ("order-id-slash", SCHEMA, lambda oid: dumps({**valid(oid), "orderId": "a/b"})),
        ("too-large", TOO_LARGE, lambda oid: dumps(valid(oid) | {"pad": "x" * max_bytes})),
    ]
    cases = [
        PoisonCase(f"{tag}-{name}", reason, build(oid), message_id(oid))
        for number, (name, reason, build) in enumerate(builders)
        for oid in [f"{prefix}-{tag}{number:02d}"]
    ]
    other = f"{prefix}-{tag}99"
    cases += [
        PoisonCase(
            f"{tag}-message-id-differs", ID_MISMATCH, dumps(valid(other)), other, body_only=False
        ),
        PoisonCase(
            f"{tag}-amqp-value-body",
            INVALID_JSON,
            b"",
            message_id(other),
            body_kind=BodyKind.VALUE,
            body_only=False,
            value=json.dumps(valid(other)),
        ),
    ]
    return cases


def valid_cancel_event_document(order_id: str) -> dict[str, Any]:
    return {
        "eventType": "OrderCancelled",
        "eventId": f"{order_id}:outbox:OrderCancelled",
        "orderId": order_id,
        "cancelledAt": "2026-11-30T00:00:00+00:00",
    }


def event_poison_cases(prefix: str) -> list[PoisonCase]:
    """Hostile `OrderAccepted` and `OrderCancelled` events (billing and shipping must refuse
    each alike, before they look at the store)."""
    accepted = _small_message_cases(
        prefix,
        "e",
        valid_event_document,
        lambda oid: f"{oid}:outbox:OrderAccepted",
        MAX_EVENT_BODY_BYTES,
    )
    cancelled = _small_message_cases(
        prefix,
        "c",
        valid_cancel_event_document,
        lambda oid: f"{oid}:outbox:OrderCancelled",
        MAX_EVENT_BODY_BYTES,
    )
    other = f"{prefix}-x00"
    unknown_type = {**valid_cancel_event_document(other), "eventType": "OrderShipped"}
    mixed = {**valid_cancel_event_document(other), "totalAmount": "1"}
    return [
        *accepted,
        *cancelled,
        PoisonCase("x-unknown-event-type", SCHEMA, dumps(unknown_type), f"{other}:outbox:x"),
        PoisonCase("x-cancel-with-order-fields", SCHEMA, dumps(mixed), mixed["eventId"]),
    ]


def forged_event_cases(prefix: str, stored_order_id: str) -> list[PoisonCase]:
    """Well-formed events no stored order vouches for: refused by billing and shipping after
    their one point read of the order (`stored_order_id` is stored, open, not cancelled)."""
    never_stored = f"{prefix}-f00"
    return [
        PoisonCase(
            "f-order-never-stored",
            "UnknownOrder",
            dumps(valid_event_document(never_stored)),
            f"{never_stored}:outbox:OrderAccepted",
        ),
        PoisonCase(
            "f-cancel-of-an-open-order",
            "EventMismatch",
            dumps(valid_cancel_event_document(stored_order_id)),
            f"{stored_order_id}:outbox:OrderCancelled",
        ),
    ]


def status_poison_cases(prefix: str) -> list[PoisonCase]:
    """Hostile `OrderStatusChanged` updates for the status consumer."""
    return _small_message_cases(
        prefix, "s", valid_status_document, lambda oid: f"{oid}:status:2", MAX_STATUS_BODY_BYTES
    )
