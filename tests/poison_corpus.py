"""The poison corpus: every kind of bad message we know, with the reason it must earn.

One list drives every entry point: real `orders worker` processes (tests/e2e/test_poison.py),
the Functions trigger (tests/unit/test_poison_functions.py), `POST /api/orders`
(tests/http/test_poison_http.py) and the benchmark that prints what a rejection costs
(scripts/bench_poison.py). Each case is built for one order id so runs never collide. The
exactly_once core's cases (its consumer's message path, its `Idempotency-Key` dependency, its
stored records) are at the end: tests/core/test_poison_core.py and scripts/bench_core_poison.py.

When you add a parser or an endpoint, add its hostile cases here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exactly_once import Rejected
from exactly_once.decisions import DeadLetterReason as CoreReason
from orders.domain.events import MAX_EVENT_BODY_BYTES
from orders.domain.messages import MAX_BODY_BYTES, MAX_LINES_PER_ORDER, DeadLetterReason
from orders.domain.received import BodyKind
from orders.domain.status import MAX_STATUS_BODY_BYTES

INVALID_JSON = DeadLetterReason.INVALID_JSON.value
SCHEMA = DeadLetterReason.SCHEMA_VIOLATION.value
TOO_LARGE = DeadLetterReason.ORDER_TOO_LARGE.value
ID_MISMATCH = DeadLetterReason.MESSAGE_ID_MISMATCH.value
INVALID_ID = DeadLetterReason.INVALID_ID.value

# What POST /api/orders answers for a body rejected with each reason.
HTTP_PROBLEM = {
    INVALID_JSON: (400, "invalid-json"),
    SCHEMA: (400, "invalid-order"),
    TOO_LARGE: (413, "order-too-large"),
    INVALID_ID: (400, "invalid-id"),
}

# A body over the byte limit never reaches the order's parser over HTTP: the core's
# `Idempotency-Key` dependency refuses it first, with its own problem.
HTTP_BODY_TOO_LARGE = (413, "body-too-large")


def http_problem(case: PoisonCase) -> tuple[int, str]:
    """What POST /api/orders answers for `case`'s body."""
    if len(case.body) > MAX_BODY_BYTES:
        return HTTP_BODY_TOO_LARGE
    return HTTP_PROBLEM[case.reason]


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
        ("customer-id-newline", INVALID_ID, lambda oid: dumps(order(oid, customerId="c\nALERT x"))),
        ("sku-tab", INVALID_ID, lambda oid: dumps(with_line(oid, sku="a\tb"))),
        ("sku-trailing-space", INVALID_ID, lambda oid: dumps(with_line(oid, sku="a "))),
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


def _id_cases() -> list[tuple[str, str, str]]:
    """(name, reason, raw JSON literal of the orderId) for ids outside the one id grammar
    (`orders/domain/ids.py`): refused as `InvalidId` before any party sees them."""
    outside = [
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
        # Ids Cosmos DB takes that another party refuses or rewrites: the payment provider
        # refused to charge the first three while shipping shipped them.
        ("id-leading-space", '" o-1"'),
        ("id-no-break-space", '"o\\u00a01"'),
        ("id-zero-width-space", '"o\\u200b1"'),
        ("id-not-ascii", '"caf\\u00e9"'),
        ("id-dot-segment", '".."'),
        ("id-percent-escape", '"o%2F1"'),
        ("id-leading-dash", '"-o-1"'),
    ]
    # Not a string at all: the schema's type, not the id grammar.
    return [(name, INVALID_ID, literal) for name, literal in outside] + [
        ("id-number", SCHEMA, "1001"),
        ("id-null", SCHEMA, "null"),
    ]


def poison_cases(prefix: str) -> list[PoisonCase]:
    """Every case, each with its own order id under `prefix` (e.g. a test's run id)."""
    cases: list[PoisonCase] = []
    for number, (name, reason, build) in enumerate(_body_cases()):
        order_id = f"{prefix}-b{number:02d}"
        cases.append(PoisonCase(name, reason, build(order_id), order_id))
    for number, (name, reason, literal) in enumerate(_id_cases()):
        # The message id is a valid stand-in: the body's id is what must be refused.
        cases.append(PoisonCase(name, reason, raw_id(literal), f"{prefix}-i{number:02d}"))
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
        # What a producer that skips the API sends: the hostile id as orderId and MessageId.
        PoisonCase(
            "message-and-order-id-leading-space",
            INVALID_ID,
            dumps(order(f" {prefix}-m03")),
            f" {prefix}-m03",
            body_only=False,
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
        ("order-id-slash", INVALID_ID, lambda oid: dumps({**valid(oid), "orderId": "a/b"})),
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


# --- The exactly_once core: its message consumer, its Idempotency-Key dependency, its records --
#
# The core's consumer hands a message's bytes to a parser of the user's; the cases below run
# through `ExactlyOnceConsumer` with `core_parse` (tests/core/test_poison_core.py, on our Service
# Bus and Cosmos DB emulators through the real SDKs). Bound the consumer with
# `CORE_MAX_BODY_BYTES`: our emulator's queues take a quarter-megabyte message, not the core's
# default megabyte.

CORE_MAX_BODY_BYTES = 64 * 1024
CORE_INVALID = CoreReason.INVALID_MESSAGE.value
CORE_TOO_LARGE = CoreReason.BODY_TOO_LARGE.value
CORE_NOT_DATA = CoreReason.UNSUPPORTED_BODY_TYPE.value
CORE_NO_ID = CoreReason.MISSING_MESSAGE_ID.value
NOT_A_GREETING = "NotAGreeting"  # the reason `core_parse` gives its own `Rejected`


class UnrenderableError(Exception):
    """A parser's exception whose message itself fails (a broken `__str__`)."""

    def __str__(self) -> str:
        raise RuntimeError("this exception cannot say what went wrong")


def core_parse(body: bytes) -> dict[str, Any]:
    """A user's parser as the core's guide writes one: JSON, an object with a text. It lets
    every decoder error escape (the core must dead-letter whatever a parser raises)."""
    if body == b"raise-unrenderable":
        raise UnrenderableError
    document = json.loads(body)
    if not isinstance(document, dict) or not isinstance(document.get("text"), str):
        raise Rejected("a greeting is an object with a text", reason=NOT_A_GREETING)
    return document


def greeting_body(text: str = "hello") -> bytes:
    return dumps({"text": text})


def core_poison_cases(prefix: str) -> list[PoisonCase]:
    """Messages the core's consumer must dead-letter on their first delivery, with the reason:
    before the parser (no id, too large, not a data body) or because the parser raised."""
    builders: list[tuple[str, str, bytes]] = [
        ("empty-body", CORE_INVALID, b""),
        ("not-json", CORE_INVALID, b"hello, world"),
        ("invalid-utf8", CORE_INVALID, b'{"text": "\xff\xfe"}'),
        ("truncated", CORE_INVALID, greeting_body()[:-2]),
        ("trailing-garbage", CORE_INVALID, greeting_body() + b" x"),
        # Within the size bound, past the decoder's depth: refused at the depth, at once.
        ("nested-30k", CORE_INVALID, nested(30_000).encode()),
        ("int-5000-digits", CORE_INVALID, b'{"text": "a", "n": ' + b"1" * 5000 + b"}"),
        ("parser-exception-unrenderable", CORE_INVALID, b"raise-unrenderable"),
        ("array", NOT_A_GREETING, b"[]"),
        ("text-number", NOT_A_GREETING, b'{"text": 5}'),
        ("body-over-bound", CORE_TOO_LARGE, greeting_body("x" * CORE_MAX_BODY_BYTES)),
    ]
    cases = [
        PoisonCase(name, reason, body, f"{prefix}-core{number:02d}")
        for number, (name, reason, body) in enumerate(builders)
    ]
    valid = json.dumps({"text": "hello"})
    return [
        *cases,
        # Only a host of one's own can deliver it: the SDK and our emulator give a message an id.
        PoisonCase("message-id-missing", CORE_NO_ID, greeting_body(), None, body_only=False),
        PoisonCase(
            "amqp-value-body",
            CORE_NOT_DATA,
            b"",
            f"{prefix}-core-v1",
            body_kind=BodyKind.VALUE,
            body_only=False,
            value=valid,
        ),
        PoisonCase(
            "amqp-value-bytes-body",  # the SDK hands a bytes value over as if it were data
            CORE_NOT_DATA,
            b"",
            f"{prefix}-core-v2",
            body_kind=BodyKind.VALUE,
            body_only=False,
            value=valid.encode(),
        ),
        PoisonCase(
            "amqp-sequence-body",
            CORE_NOT_DATA,
            b"",
            f"{prefix}-core-s1",
            body_kind=BodyKind.SEQUENCE,
            body_only=False,
            value=[[valid]],
        ),
    ]


def core_hostile_message_ids(prefix: str) -> list[tuple[str, str]]:
    """(name, MessageId) of valid messages whose ids Cosmos DB refuses as ids, or that forge
    log lines: the consumer's records must take them (hashed), and process each message once.
    All fit Service Bus's 128-character MessageId."""
    return [
        ("id-newline", f"{prefix}-n\nINFO forged outcome=processed"),
        ("id-trailing-space", f"{prefix}-t "),
        ("id-slash-backslash-question-hash", f"{prefix}/a\\b?c#d"),
        ("id-c0-control", f"{prefix}-\x01"),
        ("id-c1-control", f"{prefix}-\x85"),
        ("id-del", f"{prefix}-\x7f"),
        ("id-not-nfc", f"{prefix}-e\u0301"),
        # The same in every run: the tests give each run a container of its own.
        ("id-ideographic-space-only", "\u3000\u3000"),
        ("id-128-chars-with-slashes", (f"{prefix}/" * 128)[:128]),
    ]


def core_hostile_retry_properties() -> list[tuple[str, dict[str | bytes, Any]]]:
    """(name, application properties) a sender forged as a delayed retry's
    (`exactly_once.delayed_retries`), each malformed: the consumer must dead-letter the message
    on its first delivery, `InvalidRetryProperties`, and never run its effect."""
    original, retry, subscription = (
        "ExactlyOnceOriginalMessageId",
        "ExactlyOnceRetry",
        "ExactlyOnceSubscription",
    )
    return [
        ("original-empty", {original: "", retry: 1}),
        ("original-129-chars", {original: "x" * 129, retry: 1}),
        ("original-a-number", {original: 42, retry: 1}),
        ("retry-missing", {original: "m-1"}),
        ("retry-zero", {original: "m-1", retry: 0}),
        ("retry-negative", {original: "m-1", retry: -1}),
        ("retry-over-100", {original: "m-1", retry: 101}),
        ("retry-int32-max", {original: "m-1", retry: 2**31 - 1}),
        ("retry-a-bool", {original: "m-1", retry: True}),
        ("retry-as-text", {original: "m-1", retry: "1"}),
        ("retry-a-float", {original: "m-1", retry: 1.0}),
        ("subscription-empty", {original: "m-1", retry: 1, subscription: ""}),
        ("subscription-51-chars", {original: "m-1", retry: 1, subscription: "s" * 51}),
        ("subscription-a-number", {original: "m-1", retry: 1, subscription: 7}),
        ("subscription-alone", {subscription: "billing"}),
    ]


def core_parseable_hostile_bodies() -> list[tuple[str, bytes]]:
    """(name, body) a parser accepts (so do JSON decoders), on which the core's request hash
    must still exist and be the same on every delivery: it was raising on some."""
    return [
        # `json.loads` takes UTF-16 and UTF-32 bytes too (a parser's choice, not the core's).
        ("utf16-body", json.dumps({"text": "hi"}).encode("utf-16")),
        ("lone-surrogate", b'{"text": "\\ud800"}'),
        ("lone-low-surrogate-key", b'{"text": "a", "\\udc00": 1}'),
        ("nan-and-infinity", b'{"text": "a", "x": [NaN, Infinity, -Infinity]}'),
        ("float-overflow", b'{"text": "a", "x": 1E+999999999999}'),
        ("int-4300-digits", b'{"text": "a", "x": ' + b"9" * 4300 + b"}"),
        ("duplicate-keys", b'{"text": "a", "text": "b"}'),
        ("nul-in-text", b'{"text": "a\\u0000b"}'),
        ("nested-900-in-a-field", b'{"text": "a", "x": ' + nested(900).encode() + b"}"),
    ]


@dataclass(frozen=True)
class HeaderCase:
    """Raw `Idempotency-Key` headers and the status the core's dependency answers."""

    name: str
    headers: list[tuple[bytes, bytes]]
    status: int


def idempotency_key_header_cases() -> list[HeaderCase]:
    """Every hostile shape of the header (sent raw, past an HTTP server's own checks)."""
    key = b"Idempotency-Key"
    values: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("256-chars", b"k" * 256),
        ("64k-chars", b"k" * 65_536),
        ("nul", b"k\x00"),
        ("newline", b"k\nX-Forged: 1"),
        ("carriage-return", b"k\r"),
        ("tab", b"k\tk"),
        ("del", b"k\x7f"),
        ("escape-sequence", b"\x1b[31mred"),
        ("latin-1-byte", "café".encode("latin-1")),
        ("utf-8-bytes", "café".encode()),
        ("utf-8-bom", b"\xef\xbb\xbfk"),
        ("invalid-utf-8", b"\xff\xfe"),
    ]
    return [
        HeaderCase("missing", [], 400),
        *(HeaderCase(name, [(key, value)], 400) for name, value in values),
        HeaderCase("repeated-same", [(key, b"k-1"), (key, b"k-1")], 400),
        HeaderCase("repeated-different", [(key, b"k-1"), (key, b"k-2")], 400),
        HeaderCase("repeated-lowercase", [(key, b"k-1"), (key.lower(), b"k-2")], 400),
    ]


def idempotency_key_body_cases(max_body_bytes: int) -> list[tuple[str, bytes, int]]:
    """(name, body, status) of request bodies the request hash must take (201, and the same
    hash on a retry) or refuse by size before decoding (413)."""
    hashed = [
        ("empty", b""),
        ("not-json", b"hello, world"),
        ("invalid-utf8", b"\xff\xfe{}"),
        ("nested-100k", nested(100_000).encode()),
        ("int-5000-digits", b"1" * 5000),
        ("cpu-bomb-exponent", b"1E+999999999999"),
        *core_parseable_hostile_bodies(),
    ]
    return [
        *((name, body, 201) for name, body in hashed),
        ("body-over-bound", b'"' + b"x" * max_body_bytes + b'"', 413),
    ]


# A stored record, read back: the field to change and the value it gets (`MISSING` removes
# it). Each must be the core's `CorruptRecordError`, never a KeyError or TypeError.
MISSING = object()


def corrupt_record_cases() -> list[tuple[str, str, object]]:
    """(name, field, value) that turn a stored exactly-once record into one the core cannot
    read: something else wrote its id, or an operator edited it."""
    return [
        ("status-missing", "status", MISSING),
        ("status-unknown", "status", "done"),
        ("status-number", "status", 1),
        ("status-null", "status", None),
        ("request-hash-missing", "requestHash", MISSING),
        ("request-hash-null", "requestHash", None),
        ("request-hash-number", "requestHash", 5),
        ("owner-missing", "owner", MISSING),
        ("owner-list", "owner", ["a"]),
        ("lease-string", "leaseSeconds", "30"),
        ("lease-bool", "leaseSeconds", True),
        ("lease-missing", "leaseSeconds", MISSING),
        ("attempts-float", "attempts", 1.5),
        ("attempts-string", "attempts", "1"),
        ("attempts-bool", "attempts", True),
        ("attempts-missing", "attempts", MISSING),
        ("downstream-key-number", "downstreamKey", 5),
        ("type-missing", "type", MISSING),
        ("type-other-document", "type", "order"),
    ]


def corrupt_response_cases() -> list[tuple[str, object]]:
    """(name, stored result) of a completed `Idempotency-Key` record that holds no response
    to replay: the core's `CorruptRecordError`, never a ValueError or a made-up 200."""
    return [
        ("result-null", None),
        ("result-text", "201"),
        ("result-list", [201, {}]),
        ("status-missing", {"body": {}, "headers": {}}),
        ("status-text", {"statusCode": "201", "body": {}, "headers": {}}),
        ("status-bool", {"statusCode": True, "body": {}, "headers": {}}),
        ("status-99", {"statusCode": 99, "body": {}, "headers": {}}),
        ("status-float", {"statusCode": 201.0, "body": {}, "headers": {}}),
        ("headers-list", {"statusCode": 201, "body": {}, "headers": ["Location"]}),
        ("header-value-number", {"statusCode": 201, "body": {}, "headers": {"Retry-After": 5}}),
    ]
