"""Turning a received message body into a validated order, or a specific rejection."""

from __future__ import annotations

import json
from decimal import Decimal
from enum import StrEnum

from pydantic import ValidationError

from orders.domain.model import OrderPlaced
from orders.exceptions import OrdersError

# Service Bus Standard caps a message at 256 KB; a larger body cannot be a real producer's.
MAX_BODY_BYTES = 256 * 1024
# A transactional batch holds at most 100 operations: the order document plus its lines.
MAX_BATCH_OPERATIONS = 100
MAX_LINES_PER_ORDER = MAX_BATCH_OPERATIONS - 1
# Service Bus limits the dead-letter description; keep ours well inside it.
MAX_DESCRIPTION_CHARS = 1024


class DeadLetterReason(StrEnum):
    INVALID_JSON = "InvalidJson"
    SCHEMA_VIOLATION = "SchemaViolation"
    MESSAGE_ID_MISMATCH = "MessageIdMismatch"
    ORDER_TOO_LARGE = "OrderTooLarge"
    REQUEST_HASH_MISMATCH = "RequestHashMismatch"


class MessageRejected(OrdersError):
    """The message can never be processed; it belongs in the dead-letter queue."""

    def __init__(self, reason: DeadLetterReason, description: str) -> None:
        super().__init__(f"{reason}: {description}")
        self.reason = reason
        self.description = truncate(description)


def truncate(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        location = ".".join(str(part) for part in item["loc"]) or "body"
        parts.append(f"{location}: {item['msg']}")
    return "; ".join(parts)


def parse_order(body: bytes) -> OrderPlaced:
    """Validate an `OrderPlaced` body; raise `MessageRejected` with the specific reason."""
    if len(body) > MAX_BODY_BYTES:
        raise MessageRejected(
            DeadLetterReason.ORDER_TOO_LARGE,
            f"body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}",
        )
    try:
        # Decimal keeps prices exact until validation; floats would round before we look.
        document = json.loads(body.decode("utf-8"), parse_float=Decimal)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageRejected(DeadLetterReason.INVALID_JSON, f"body is not JSON: {exc}") from exc
    try:
        order = OrderPlaced.model_validate(document)
    except ValidationError as exc:
        raise MessageRejected(
            DeadLetterReason.SCHEMA_VIOLATION, describe_validation_error(exc)
        ) from exc
    if len(order.lines) > MAX_LINES_PER_ORDER:
        raise MessageRejected(
            DeadLetterReason.ORDER_TOO_LARGE,
            f"order has {len(order.lines)} lines; one transactional batch holds the order "
            f"and at most {MAX_LINES_PER_ORDER} lines",
        )
    return order


def parse_order_message(body: bytes, message_id: str | None) -> OrderPlaced:
    """Validate the body and the producer's contract that MessageId equals orderId."""
    order = parse_order(body)
    if message_id != order.orderId:
        raise MessageRejected(
            DeadLetterReason.MESSAGE_ID_MISMATCH,
            f"MessageId {message_id!r} differs from orderId {order.orderId!r}; "
            "producers must set MessageId to the orderId",
        )
    return order
