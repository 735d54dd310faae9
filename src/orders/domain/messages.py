"""Turning a received message body into a validated order, or a specific rejection."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orders.domain.ids import ID_ERROR_TYPE
from orders.domain.model import OrderPlaced
from orders.domain.received import BodyKind, ReceivedOrderMessage
from orders.domain.untrusted_json import UntrustedJsonError, decode_untrusted_json
from orders.exceptions import OrdersError

# Service Bus Standard caps a message at 256 KB; a larger body cannot be a real producer's.
MAX_BODY_BYTES = 256 * 1024
# A transactional batch holds at most 100 operations: the order document, its outbox event
# and its lines.
MAX_BATCH_OPERATIONS = 100
MAX_LINES_PER_ORDER = MAX_BATCH_OPERATIONS - 2
# Service Bus limits the dead-letter description; keep ours well inside it.
MAX_DESCRIPTION_CHARS = 1024
# Commas, `{` and `[` a valid order can hold: its ~800 structural ones, plus every character
# of its at most 102 ids of 64 characters. Decoding costs per element, counting bytes does not,
# so a body past this budget is refused before it is decoded.
MAX_STRUCTURAL_BYTES = 8192
# A rejection names this many validation errors and counts the rest.
MAX_REPORTED_ERRORS = 10


class DeadLetterReason(StrEnum):
    INVALID_JSON = "InvalidJson"
    SCHEMA_VIOLATION = "SchemaViolation"
    # A schema violation whose only faults are ids outside the one id grammar (`domain/ids.py`).
    INVALID_ID = "InvalidId"
    MESSAGE_ID_MISMATCH = "MessageIdMismatch"
    ORDER_TOO_LARGE = "OrderTooLarge"
    REQUEST_HASH_MISMATCH = "RequestHashMismatch"
    PAYMENT_REFUSED = "PaymentRefused"
    ILLEGAL_STATUS_TRANSITION = "IllegalStatusTransition"
    # An event no stored order vouches for: forged, misrouted or from another namespace.
    UNKNOWN_ORDER = "UnknownOrder"
    EVENT_MISMATCH = "EventMismatch"
    REFUND_REFUSED = "RefundRefused"


class MessageRejected(OrdersError):
    """The message can never be processed; it belongs in the dead-letter queue."""

    def __init__(
        self, reason: DeadLetterReason, description: str, *, order_id: str | None = None
    ) -> None:
        super().__init__(f"{reason}: {description}")
        self.reason = reason
        self.description = truncate(description)
        self.order_id = order_id  # the body's valid orderId, when the body got that far


def truncate(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_messages(error: ValidationError) -> list[tuple[str, str]]:
    """(location, message) per error, at most `MAX_REPORTED_ERRORS` of them.

    Bounded because one hostile body can hold tens of thousands of errors; the message never
    repeats the input, so no rejected value is echoed into logs or responses.
    """
    return [
        (".".join(str(part) for part in item["loc"]) or "body", str(item["msg"])[:200])
        for item in error.errors(include_url=False, include_input=False, include_context=False)[
            :MAX_REPORTED_ERRORS
        ]
    ]


def describe_validation_error(error: ValidationError) -> str:
    listed = validation_messages(error)
    text = "; ".join(f"{location}: {message}" for location, message in listed)
    if error.error_count() > len(listed):
        text += f"; and {error.error_count() - len(listed)} more error(s)"
    return text


def check_line_count(decoded: Any) -> None:
    """Refuse too many lines before validating them: validation costs per line, counting doesn't."""
    lines = decoded.get("lines") if isinstance(decoded, dict) else None
    if isinstance(lines, list) and len(lines) > MAX_LINES_PER_ORDER:
        raise MessageRejected(
            DeadLetterReason.ORDER_TOO_LARGE,
            f"order has {len(lines)} lines; one transactional batch holds the order, "
            f"its event and at most {MAX_LINES_PER_ORDER} lines",
        )


def parse_order(body: bytes) -> OrderPlaced:
    """Validate an `OrderPlaced` body; raise `MessageRejected` with the specific reason.

    Total and bounded: every failure on untrusted bytes is a `MessageRejected`, and the cheap
    checks (size, element count, line count) run before the costly ones.
    """
    if len(body) > MAX_BODY_BYTES:
        raise MessageRejected(
            DeadLetterReason.ORDER_TOO_LARGE,
            f"body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}",
        )
    structural = body.count(b",") + body.count(b"{") + body.count(b"[")
    if structural > MAX_STRUCTURAL_BYTES:
        raise MessageRejected(
            DeadLetterReason.ORDER_TOO_LARGE,
            f"body holds {structural} commas and brackets; no order of at most "
            f"{MAX_LINES_PER_ORDER} lines needs more than {MAX_STRUCTURAL_BYTES}",
        )
    try:
        document = decode_untrusted_json(body)
    except UntrustedJsonError as exc:
        raise MessageRejected(DeadLetterReason.INVALID_JSON, str(exc)) from exc
    check_line_count(document)
    return validate_document(OrderPlaced, document)


def parse_received_order(message: ReceivedOrderMessage) -> OrderPlaced:
    """The whole contract of a received message: a data body holding a valid order whose
    orderId is the MessageId."""
    if message.body_kind is not BodyKind.DATA:
        raise MessageRejected(
            DeadLetterReason.INVALID_JSON,
            f"the body is an AMQP {message.body_kind.value} section; an order is sent as data "
            "(UTF-8 JSON bytes)",
        )
    return parse_order_message(message.body, message.message_id)


def parse_order_message(body: bytes, message_id: str | None) -> OrderPlaced:
    """Validate the body and the producer's contract that MessageId equals orderId."""
    order = parse_order(body)
    if message_id != order.order_id:
        raise MessageRejected(
            DeadLetterReason.MESSAGE_ID_MISMATCH,
            f"MessageId {message_id!r} differs from orderId {order.order_id!r}; "
            "producers must set MessageId to the orderId",
            order_id=order.order_id,
        )
    return order


Model = TypeVar("Model", bound=BaseModel)


def validate_small_message(
    message: ReceivedOrderMessage, model: type[Model], *, max_bytes: int, what: str
) -> Model:
    """A small JSON message (an event, a status update) as `model`: total and bounded.

    A data body, at most `max_bytes`, strict JSON, then the model; every failure is a
    `MessageRejected` with the reason, as for orders.
    """
    return validate_document(model, decode_small_message(message, max_bytes=max_bytes, what=what))


def decode_small_message(message: ReceivedOrderMessage, *, max_bytes: int, what: str) -> Any:
    """The decoded JSON of a small message, or `MessageRejected`: total and bounded."""
    if message.body_kind is not BodyKind.DATA:
        raise MessageRejected(
            DeadLetterReason.INVALID_JSON,
            f"the body is an AMQP {message.body_kind.value} section; {what} travel as data",
        )
    if len(message.body) > max_bytes:
        raise MessageRejected(
            DeadLetterReason.ORDER_TOO_LARGE,
            f"body is {len(message.body)} bytes; {what} are at most {max_bytes}",
        )
    try:
        document = decode_untrusted_json(message.body)
    except UntrustedJsonError as exc:
        raise MessageRejected(DeadLetterReason.INVALID_JSON, str(exc)) from exc
    return document


def validate_document(model: type[Model], decoded: Any) -> Model:
    """`model` from decoded JSON; any validation failure is a `SchemaViolation` rejection."""
    try:
        return model.model_validate(decoded)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        only_ids = all(error["type"] == ID_ERROR_TYPE for error in errors)
        reason = DeadLetterReason.INVALID_ID if only_ids else DeadLetterReason.SCHEMA_VIOLATION
        raise MessageRejected(reason, describe_validation_error(exc)) from exc
    except Exception as exc:
        # Total by rule: a validator failing in an unforeseen way on hostile input is still a
        # rejection with a reason, never the abandon-and-retry path.
        raise MessageRejected(
            DeadLetterReason.SCHEMA_VIOLATION, f"body could not be validated: {type(exc).__name__}"
        ) from exc
