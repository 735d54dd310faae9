"""The subscribers' parser of `OrderAccepted` bodies: total and bounded like `parse_order`,
with the hostile cases of the order corpus that apply to an event."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orders.domain.events import (
    MAX_EVENT_BODY_BYTES,
    ORDER_CANCELLED,
    OrderAccepted,
    new_event_message_id,
    order_event_id,
    parse_order_accepted,
)
from orders.domain.ids import MAX_ID_LENGTH
from orders.domain.messages import MessageRejected
from orders.domain.model import OrderPlaced
from orders.domain.received import BodyKind, ReceivedOrderMessage

FUZZ = settings(
    max_examples=200,
    deadline=None,  # a timed assertion: costs are printed by scripts/bench_poison.py
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def valid_event() -> dict[str, object]:
    order = OrderPlaced.model_validate(
        {
            "orderId": "o-1",
            "customerId": "c-1",
            "currency": "EUR",
            "lines": [{"sku": "s", "quantity": 2, "unitPrice": Decimal("1.25")}],
        }
    )
    event = OrderAccepted.of(order, total_amount="2.5", accepted_at=datetime.now(UTC))
    return dict(event.model_dump(mode="json"))


def received(
    body: bytes, message_id: str | None = "o-1:outbox:OrderAccepted"
) -> ReceivedOrderMessage:
    return ReceivedOrderMessage(body=body, message_id=message_id)


def test_a_valid_event_round_trips() -> None:
    event = parse_order_accepted(received(json.dumps(valid_event()).encode()))
    assert (event.order_id, event.amount, event.line_count) == ("o-1", Decimal("2.5"), 1)


HOSTILE: list[tuple[str, bytes, str]] = [
    ("not-utf8", b"\xff\xfe", "InvalidJson"),
    (
        "nan",
        json.dumps(valid_event()).replace('"lineCount": 1', '"lineCount": NaN').encode(),
        "InvalidJson",
    ),
    ("deep", b"[" * 1500 + b"]" * 1500, "InvalidJson"),
    (
        "huge-int",
        json.dumps(valid_event()).replace('"lineCount": 1', '"lineCount": ' + "9" * 100).encode(),
        "InvalidJson",
    ),
    ("too-large", b" " * (MAX_EVENT_BODY_BYTES + 1), "OrderTooLarge"),
    (
        "amount-exponent",
        json.dumps({**valid_event(), "totalAmount": "1E+999999999"}).encode(),
        "SchemaViolation",
    ),
    (
        "amount-number",
        json.dumps({**valid_event(), "totalAmount": 2.5}).encode(),
        "SchemaViolation",
    ),
    (
        "negative-amount",
        json.dumps({**valid_event(), "totalAmount": "-1"}).encode(),
        "SchemaViolation",
    ),
    (
        "lowercase-currency",
        json.dumps({**valid_event(), "currency": "eur"}).encode(),
        "SchemaViolation",
    ),
    ("unknown-field", json.dumps({**valid_event(), "extra": 1}).encode(), "SchemaViolation"),
    (
        "wrong-type",
        json.dumps({**valid_event(), "eventType": "OrderPlaced"}).encode(),
        "SchemaViolation",
    ),
    ("id-with-slash", json.dumps({**valid_event(), "orderId": "a/b"}).encode(), "InvalidId"),
    ("array", b"[]", "SchemaViolation"),
]


@pytest.mark.parametrize(
    ("body", "reason"), [(b, r) for _, b, r in HOSTILE], ids=[k for k, _, _ in HOSTILE]
)
def test_hostile_bodies_are_rejected_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(MessageRejected) as caught:
        parse_order_accepted(received(body))
    assert caught.value.reason.value == reason


@pytest.mark.parametrize(
    "message_id",
    [
        "o-1",
        "o-2:outbox:OrderAccepted",
        "o-1:outbox:OrderAccepted:",
        "o-1:outbox:OrderAccepted:" + "a" * 31,
        "o-1:outbox:OrderAccepted:" + "A" * 32,
        "o-1:outbox:OrderAccepted:" + "a" * 33,
        "o-1:outbox:OrderAcceptedx:" + "a" * 32,
        None,
    ],
)
def test_a_message_id_that_does_not_name_the_event_is_refused(message_id: str | None) -> None:
    with pytest.raises(MessageRejected) as caught:
        parse_order_accepted(received(json.dumps(valid_event()).encode(), message_id=message_id))
    assert caught.value.reason.value == "MessageIdMismatch"


# The nonce is drawn in the test, never at collection: pytest-xdist's workers must collect the
# same test ids, and a random parameter differs between them.
@pytest.mark.parametrize("with_nonce", [True, False], ids=["with-its-nonce", "bare"])
def test_the_event_id_with_its_nonce_or_bare_is_accepted(with_nonce: bool) -> None:
    event_id = "o-1:outbox:OrderAccepted"
    # with a nonce: what the dispatcher sends now; bare: an outbox entry written before it
    message_id = new_event_message_id(event_id) if with_nonce else event_id
    event = parse_order_accepted(received(json.dumps(valid_event()).encode(), message_id))
    assert event.event_id == "o-1:outbox:OrderAccepted"


def test_the_longest_events_message_id_fits_service_bus() -> None:
    """Service Bus refuses a MessageId over 128 characters: the longest orderId's cancel event
    with its nonce must still fit."""
    longest = order_event_id("x" * MAX_ID_LENGTH, ORDER_CANCELLED)
    assert len(new_event_message_id(longest)) <= 128


def test_an_amqp_value_body_is_refused_by_kind() -> None:
    message = ReceivedOrderMessage(body=b"{}", message_id="x", body_kind=BodyKind.VALUE)
    with pytest.raises(MessageRejected):
        parse_order_accepted(message)


@FUZZ
@given(
    st.binary(max_size=600)
    | st.builds(
        lambda d: json.dumps(d).encode(),
        st.dictionaries(
            st.sampled_from(list(valid_event())),
            st.none() | st.integers() | st.text(max_size=20),
            max_size=9,
        ),
    )
)
def test_the_parser_is_total(body: bytes) -> None:
    with contextlib.suppress(MessageRejected):
        parse_order_accepted(received(body))
