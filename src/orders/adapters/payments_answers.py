"""The payment provider's answers, read as the untrusted bytes they are.

Total: every malformed answer becomes `PaymentUnavailableError` (the charge or refund may or
may not have happened; a retry with the same key is safe and may get a readable answer) or, for
a refusal, a `PaymentRefusedError` whose reason and description are bounded and printable
whatever the provider sent. A tolerant reader: fields the provider adds later are ignored; the
ones we need are checked for type, shape and size.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from http import HTTPStatus
from typing import Any, TypeVar

from orders.domain.payments import Charge, Refund
from orders.domain.untrusted_json import UntrustedJsonError, decode_untrusted_json
from orders.exceptions import (
    PaymentError,
    PaymentRefusedError,
    PaymentUnavailableError,
)

MAX_ID_LENGTH = 255
MAX_DESCRIPTION_LENGTH = 500
AMOUNT = re.compile(r"(?:0|[1-9][0-9]{0,19})(?:\.[0-9]{1,20})?")
CURRENCY = re.compile(r"[A-Z]{3}")
REASON = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
# Worth a retry with the same key: the provider timed out, is busy with the same key (409, as
# some providers answer a concurrent request), asks to wait (425, 429), or failed (5xx).
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
# A 409 that is an answer, not "busy": the payment is refunded in full, by other keys.
PERMANENT_REFUND_REASONS = frozenset({"already-refunded"})

T = TypeVar("T")


def decode(payload: bytes | None, what: str) -> Any:
    if payload is None:
        raise PaymentUnavailableError(f"the payment service's {what} was too large to read")
    try:
        return decode_untrusted_json(payload)
    except UntrustedJsonError as exc:
        raise PaymentUnavailableError(f"the payment service's {what} is not JSON: {exc}") from None


def charge_from(value: object) -> Charge:
    """A charge object as the provider sends it; anything else is PaymentUnavailableError."""
    if not isinstance(value, dict):
        raise PaymentUnavailableError("the payment service answered something other than a charge")
    try:
        amount, currency, created_at = _money(value)
        return Charge(
            payment_id=_text(value, "paymentId", MAX_ID_LENGTH),
            order_id=_text(value, "orderId", MAX_ID_LENGTH),
            amount=amount,
            currency=currency,
            idempotency_key=_text(value, "idempotencyKey", MAX_ID_LENGTH),
            created_at=created_at,
        )
    except ValueError as exc:
        raise PaymentUnavailableError(f"the payment service's charge is malformed: {exc}") from None


def refund_from(value: object) -> Refund:
    """A refund object as the provider sends it; anything else is PaymentUnavailableError."""
    if not isinstance(value, dict):
        raise PaymentUnavailableError("the payment service answered something other than a refund")
    try:
        amount, currency, created_at = _money(value)
        return Refund(
            refund_id=_text(value, "refundId", MAX_ID_LENGTH),
            payment_id=_text(value, "paymentId", MAX_ID_LENGTH),
            order_id=_text(value, "orderId", MAX_ID_LENGTH),
            amount=amount,
            currency=currency,
            idempotency_key=_text(value, "idempotencyKey", MAX_ID_LENGTH),
            created_at=created_at,
        )
    except ValueError as exc:
        raise PaymentUnavailableError(f"the payment service's refund is malformed: {exc}") from None


def _money(value: dict[str, Any]) -> tuple[Decimal, str, str]:
    """(amount, currency, createdAt) of a charge or refund; ValueError when malformed."""
    created_at = _text(value, "createdAt", 64)
    datetime.fromisoformat(created_at)
    amount = _text(value, "amount", 48)
    currency = _text(value, "currency", 3)
    if not AMOUNT.fullmatch(amount) or not CURRENCY.fullmatch(currency):
        raise ValueError("amount or currency is malformed")
    return Decimal(amount), currency, created_at


def charges_page(value: object) -> tuple[list[Charge], str | None]:
    """`{"payments": [charge, ...], "next": cursor or null}`."""
    return _page(value, "payments", charge_from)


def refunds_page(value: object) -> tuple[list[Refund], str | None]:
    """`{"refunds": [refund, ...], "next": cursor or null}`."""
    return _page(value, "refunds", refund_from)


def _page(value: object, name: str, item: Callable[[object], T]) -> tuple[list[T], str | None]:
    if not isinstance(value, dict) or not isinstance(value.get(name), list):
        raise PaymentUnavailableError(f"the payment service's list has no `{name}` array")
    cursor = value.get("next")
    if cursor is not None and not (
        isinstance(cursor, str) and 1 <= len(cursor) <= MAX_ID_LENGTH and cursor.isprintable()
    ):
        raise PaymentUnavailableError("the payment service's list has a malformed `next` cursor")
    return [item(entry) for entry in value[name]], cursor


def failure_for(
    status: int, payload: bytes | None, permanent_reasons: frozenset[str] = frozenset()
) -> PaymentError:
    """The exception an answer other than success means: permanent for a 4xx the same request
    will meet again (also one of the usually transient statuses when the problem's reason is in
    `permanent_reasons`), transient for everything else (whether it charged is then unknown)."""
    reason, detail = _problem(status, payload)
    transient = status in TRANSIENT_STATUSES and reason not in permanent_reasons
    if 400 <= status < 500 and not transient:
        return PaymentRefusedError(reason, detail, status=status)
    return PaymentUnavailableError(f"the payment service answered {status} ({reason}): {detail}")


def _text(value: dict[str, Any], name: str, max_length: int) -> str:
    text = value.get(name)
    if not isinstance(text, str) or not 1 <= len(text) <= max_length or not text.isprintable():
        raise ValueError(f"{name} must be a printable string of 1 to {max_length} characters")
    return text


def _problem(status: int, payload: bytes | None) -> tuple[str, str]:
    """(reason, description) of an RFC 7807 problem body; the status when it is not one."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown status"
    reason, detail = f"http-{status}", phrase
    try:
        body = decode_untrusted_json(payload) if payload is not None else None
    except UntrustedJsonError:
        body = None
    if isinstance(body, dict):
        kind = body.get("type")
        if isinstance(kind, str):
            slug = re.split(r"[:/]", kind)[-1].lower()
            if REASON.fullmatch(slug):
                reason = slug
        text = body.get("detail") or body.get("title")
        if isinstance(text, str) and text:
            detail = text
    shown = detail[:MAX_DESCRIPTION_LENGTH]
    return reason, "".join(char if char.isprintable() else "?" for char in shown)
