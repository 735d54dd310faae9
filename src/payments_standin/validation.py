"""Untrusted input, read totally and boundedly: every failure is an `InvalidInput` naming the
field, never another exception, and nothing costs more than the bytes it was given."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .store import ChargeRequest, RefundRequest

MAX_BODY_BYTES = 4096
MAX_KEY_LENGTH = 255
MAX_ORDER_ID_LENGTH = 64
MAX_PAYMENT_ID_LENGTH = 64
# A plain decimal: no sign, exponent, spaces or leading zeros; up to 20 integer digits (an order
# of 99 lines of 1,000,000 items at the largest unit price fits) and 4 after the point.
AMOUNT = re.compile(r"(?:0|[1-9][0-9]{0,19})(?:\.[0-9]{1,4})?")
CURRENCY = re.compile(r"[A-Z]{3}")
CHARGE_FIELDS = frozenset({"orderId", "amount", "currency"})
REFUND_FIELDS = frozenset({"paymentId", "amount", "currency"})


class InvalidInput(ValueError):
    """A request the stand-in refuses with 400; the message says what and why."""


def idempotency_key(values: list[str]) -> str:
    """The header's one value: 1..255 printable ASCII characters (space to tilde)."""
    if not values:
        raise InvalidInput("the Idempotency-Key header is required")
    if len(values) > 1:
        raise InvalidInput("send the Idempotency-Key header once")
    key = values[0]
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidInput(f"the Idempotency-Key must be 1 to {MAX_KEY_LENGTH} characters")
    if not all(" " <= char <= "~" for char in key):
        raise InvalidInput("the Idempotency-Key may hold only printable ASCII characters")
    return key


def json_body(raw: bytes) -> Any:
    """Strict JSON: UTF-8, one document, no NaN/Infinity, no duplicate keys."""
    try:
        text = raw.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except InvalidInput:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # RecursionError: nesting deeper than the interpreter's stack (bounded by the body size).
        raise InvalidInput(f"the body is not strict UTF-8 JSON ({type(exc).__name__})") from None


def charge_request(key: str, raw: bytes) -> ChargeRequest:
    body = _object_with(json_body(raw), CHARGE_FIELDS)
    return ChargeRequest(
        idempotency_key=key,
        order_id=order_id(body["orderId"]),
        amount=amount(body["amount"]),
        currency=currency(body["currency"]),
    )


def refund_request(key: str, raw: bytes) -> RefundRequest:
    body = _object_with(json_body(raw), REFUND_FIELDS)
    refunded = amount(body["amount"])
    if Decimal(refunded) == 0:
        raise InvalidInput("a refund's amount must be above 0")
    return RefundRequest(
        idempotency_key=key,
        payment_id=payment_id(body["paymentId"]),
        amount=refunded,
        currency=currency(body["currency"]),
    )


def _object_with(body: object, fields: frozenset[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    missing = sorted(fields - set(body))
    unknown = sorted(set(body) - fields)
    if missing:
        raise InvalidInput(f"missing fields: {missing}")
    if unknown:
        raise InvalidInput(f"unknown fields: {_names(unknown)}")
    return body


def payment_id(value: object) -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_PAYMENT_ID_LENGTH
        or not value.isprintable()
        or value.strip() != value
    ):
        raise InvalidInput(
            f"paymentId must be a printable string of 1 to {MAX_PAYMENT_ID_LENGTH} characters "
            "without leading or trailing spaces"
        )
    return value


def order_id(value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ORDER_ID_LENGTH:
        raise InvalidInput(f"orderId must be a string of 1 to {MAX_ORDER_ID_LENGTH} characters")
    # isprintable() is False for controls, lone surrogates and separators other than space.
    if not value.isprintable() or value.strip() != value:
        raise InvalidInput("orderId must be printable, without leading or trailing spaces")
    return value


def amount(value: object) -> str:
    """The canonical plain spelling: "1.50" and "1.5" are one amount, stored as "1.5"."""
    if not isinstance(value, str) or not AMOUNT.fullmatch(value):
        raise InvalidInput(
            'amount must be a decimal string such as "12.50": no sign or exponent, at most '
            "20 digits before the point and 4 after"
        )
    plain = format(Decimal(value), "f")
    return plain.rstrip("0").rstrip(".") if "." in plain else plain


def currency(value: object) -> str:
    if not isinstance(value, str) or not CURRENCY.fullmatch(value):
        raise InvalidInput('currency must be three capital letters (ISO 4217), such as "EUR"')
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise InvalidInput(f"duplicate field {_names([name])}")
        result[name] = value
    return result


def _no_constants(name: str) -> object:
    raise InvalidInput(f"{name} is not JSON")


def _names(names: list[str]) -> str:
    """Field names echoed back, bounded: a hostile body chooses them."""
    shown = ", ".join(json.dumps(name[:40]) for name in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100
MAX_CURSOR = 2**62


@dataclass(frozen=True)
class ListQuery:
    filters: dict[str, str]  # by query parameter name, each validated
    after: int
    limit: int


LIST_FILTERS = {"orderId": order_id, "paymentId": payment_id}


def list_query(query: str, filters: frozenset[str] = frozenset({"orderId"})) -> ListQuery:
    """`after` (the cursor a previous page returned), `limit` and the `filters` this list takes
    (at most one of them), each at most once."""
    from urllib.parse import parse_qs

    try:
        params = parse_qs(
            query, keep_blank_values=True, strict_parsing=bool(query), max_num_fields=10
        )
    except ValueError as exc:
        raise InvalidInput(f"the query string is malformed ({exc})") from None
    unknown = sorted(set(params) - filters - {"after", "limit"})
    if unknown:
        raise InvalidInput(f"unknown query parameters: {_names(unknown)}")
    single: dict[str, str] = {}
    for name, values in params.items():
        if len(values) != 1:
            raise InvalidInput(f"query parameter {name} must be given once")
        single[name] = values[0]
    given = {name: LIST_FILTERS[name](value) for name, value in single.items() if name in filters}
    if len(given) > 1:
        raise InvalidInput(f"filter by one of {sorted(filters)} at a time")
    return ListQuery(
        given,
        _bounded_int(single.get("after", "0"), "after", 0, MAX_CURSOR),
        _bounded_int(single.get("limit", str(DEFAULT_PAGE_SIZE)), "limit", 1, MAX_PAGE_SIZE),
    )


def _bounded_int(text: str, name: str, low: int, high: int) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or not low <= int(text) <= high:
        raise InvalidInput(f"{name} must be an integer from {low} to {high}")
    return int(text)
