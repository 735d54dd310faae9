"""The order's events, published through the transactional outbox.

`OrderAccepted` is written in the order's batch; `OrderCancelled` in the cancel's batch, with the
order document's If-Match replace that decides the cancel (`domain/saga.py`).

The outbox document is written in the same transactional batch as the order, so an order is
stored if and only if its event will be published. Its id is the event id: deterministic, what
the saga verifies an event by and what billing's and shipping's records are keyed on, so a copy
of an event is the same event to every subscriber however it arrived.

The MessageId the dispatcher publishes with is NOT the bare event id. The topic's duplicate
detection remembers every MessageId it accepted, from any sender: had the MessageId been the
predictable event id, anyone able to send to the topic could publish a forgery under it first;
the forgery is dead-lettered, but the real event, published later inside the window, is dropped
as its duplicate. So the MessageId is the event id followed by a random 128-bit nonce drawn once,
when the outbox document is written (in the batch that decides the event), stored on that
document and reused on every dispatch of it: the dispatcher's retries are still one message to
duplicate detection, and nobody else can know it before it is published. Its shape is the
Cosmos adapter's (`adapters/cosmos_layout.py`), which hands the dispatcher the event it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, BaseModel, Field, StrictInt

from orders.domain.ids import MAX_ID_LENGTH, nonce_after, with_nonce
from orders.domain.messages import (
    DeadLetterReason,
    MessageRejected,
    decode_small_message,
    validate_document,
    validate_small_message,
)
from orders.domain.model import WIRE_NAMES, CurrencyCode, EntityId, OrderPlaced
from orders.domain.received import ReceivedOrderMessage

ORDER_ACCEPTED: Final = "OrderAccepted"
ORDER_CANCELLED: Final = "OrderCancelled"
# An event is a few hundred bytes; anything near this is not one of ours.
MAX_EVENT_BODY_BYTES = 4096
# The largest total: 98 lines of 1,000,000 units at 11 integer digits, with 4 decimals.
_AMOUNT_TEXT = re.compile(r"(0|[1-9][0-9]{0,23})(\.[0-9]{1,4})?")


def order_event_id(order_id: str, event_type: str = ORDER_ACCEPTED) -> str:
    """The id of the order's one event of this type: what an event is verified by
    (`domain/saga.py`) and the prefix of the MessageId it is published with
    (`new_event_message_id`). The outbox entry is stored under it."""
    return f"{order_id}:outbox:{event_type}"


def new_event_message_id(event_id: str) -> str:
    """A MessageId for the event `event_id` that no other sender can guess: the event id (so the
    dead-letter tools and logs still name the event) and a fresh random 128-bit nonce. Drawn
    once per outbox document; at most 88 + 33 characters, inside Service Bus's 128."""
    return with_nonce(event_id)


def message_id_names_event(
    message_id: str | None, event_id: str, *, bare_allowed: bool = True
) -> bool:
    """Whether `message_id` is one the dispatcher publishes `event_id` under: the event id and a
    nonce, or, while `bare_allowed`, the bare event id (outbox documents written before the
    nonce, see `adapters/cosmos_layout.pending_event`)."""
    named = nonce_after(message_id, event_id)
    return named is True or (named is False and bare_allowed)


@dataclass(frozen=True)
class BareEventIdCutover:
    """From when an event under its bare eventId is refused. Before the nonce, the dispatcher
    published every event under its bare eventId, which anyone can guess; outbox documents
    written then still are (and copies of them wait in subscriptions). Once they are all
    consumed, the operator sets the cut-over (`BARE_EVENT_ID_CUTOVER`): an event the broker
    took in at or after it must carry the nonce. None: bare eventIds are still accepted."""

    refused_from: datetime | None = None

    def allows_bare(self, enqueued_at: datetime) -> bool:
        """Whether an event taken in at `enqueued_at` may still come under its bare eventId."""
        return self.refused_from is None or enqueued_at < self.refused_from


NO_CUTOVER = BareEventIdCutover()


def require_amount_text(value: str) -> str:
    if not _AMOUNT_TEXT.fullmatch(value):
        raise ValueError("must be a non-negative decimal string such as '12.5'")
    return value


AmountText = Annotated[str, Field(max_length=30), AfterValidator(require_amount_text)]
EventId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH + 24)]


class OrderAccepted(BaseModel):
    """What billing, shipping and any later subscriber learn about a stored order."""

    model_config = WIRE_NAMES

    event_type: Literal["OrderAccepted"] = ORDER_ACCEPTED
    event_id: EventId
    order_id: EntityId
    customer_id: EntityId
    currency: CurrencyCode
    total_amount: AmountText
    line_count: Annotated[StrictInt, Field(ge=1, le=100)]
    accepted_at: Annotated[str, Field(max_length=40)]

    @property
    def amount(self) -> Decimal:
        return Decimal(self.total_amount)

    @classmethod
    def of(cls, order: OrderPlaced, *, total_amount: str, accepted_at: datetime) -> OrderAccepted:
        return cls.model_validate(
            {
                "eventId": order_event_id(order.order_id),
                "orderId": order.order_id,
                "customerId": order.customer_id,
                "currency": str(order.currency),
                "totalAmount": total_amount,
                "lineCount": len(order.lines),
                "acceptedAt": accepted_at.isoformat(),
            }
        )

    def body(self) -> bytes:
        return self.model_dump_json().encode("utf-8")


class OrderCancelled(BaseModel):
    """A cancel that took effect: billing refunds a charge it made, if it made one."""

    model_config = WIRE_NAMES

    event_type: Literal["OrderCancelled"] = ORDER_CANCELLED
    event_id: EventId
    order_id: EntityId
    cancelled_at: Annotated[str, Field(max_length=40)]
    reason: Annotated[str | None, Field(max_length=200)] = None

    @classmethod
    def of(cls, order_id: str, *, cancelled_at: datetime, reason: str | None) -> OrderCancelled:
        return cls.model_validate(
            {
                "eventId": order_event_id(order_id, ORDER_CANCELLED),
                "orderId": order_id,
                "cancelledAt": cancelled_at.isoformat(),
                "reason": reason,
            }
        )

    def body(self) -> bytes:
        return self.model_dump_json().encode("utf-8")


OrderEvent = OrderAccepted | OrderCancelled


class _AnyOrderEvent(BaseModel):
    """The envelope a subscriber validates: one of the order's events, told apart by type."""

    model_config = WIRE_NAMES

    event: Annotated[OrderEvent, Field(discriminator="event_type")]


def stored_event(data: object) -> OrderEvent:
    """An event as this app stored it (`model_dump(mode="json")`, in the outbox): written by
    us, so a failure here is a bug."""
    return _AnyOrderEvent.model_validate({"event": data}).event


def parse_order_accepted(message: ReceivedOrderMessage) -> OrderAccepted:
    """Validate a received `OrderAccepted`; total and bounded like `parse_order`."""
    event = validate_small_message(
        message, OrderAccepted, max_bytes=MAX_EVENT_BODY_BYTES, what="events"
    )
    _require_message_id(message, event)
    return event


def parse_order_event(message: ReceivedOrderMessage, *, bare_allowed: bool = True) -> OrderEvent:
    """Validate a received order event of either type, told apart by its `eventType`.

    Total and bounded like `parse_order`: decoded once, then validated as the one model its
    `eventType` names (an unknown type fails as an `OrderAccepted`, naming the field). Its
    MessageId must be its eventId and a nonce, or the bare eventId while `bare_allowed`
    (`BareEventIdCutover`).
    """
    document = decode_small_message(message, max_bytes=MAX_EVENT_BODY_BYTES, what="events")
    event = _event_of(document)
    _require_message_id(message, event, bare_allowed=bare_allowed)
    return event


def parse_order_event_body(body: bytes) -> OrderEvent:
    """An order event from its body alone, total and bounded like `parse_order_event`: the
    parser of a consumer written with the core's `@exactly_once`, which names the message's
    records by its MessageId itself. Failures are `MessageRejected`, naming the reason."""
    message = ReceivedOrderMessage(body=body, message_id=None)
    return _event_of(decode_small_message(message, max_bytes=MAX_EVENT_BODY_BYTES, what="events"))


def _event_of(decoded: object) -> OrderEvent:
    if isinstance(decoded, dict) and decoded.get("eventType") == ORDER_CANCELLED:
        return validate_document(OrderCancelled, decoded)
    return validate_document(OrderAccepted, decoded)


def _require_message_id(
    message: ReceivedOrderMessage, event: OrderEvent, *, bare_allowed: bool = True
) -> None:
    if not message_id_names_event(message.message_id, event.event_id, bare_allowed=bare_allowed):
        after_cutover = (
            " (a bare eventId is refused after the cut-over, BARE_EVENT_ID_CUTOVER)"
            if message.message_id == event.event_id
            else ""
        )
        raise MessageRejected(
            DeadLetterReason.MESSAGE_ID_MISMATCH,
            f"MessageId {message.message_id!r} is not eventId {event.event_id!r} "
            f"followed by ':' and 32 lowercase hex digits{after_cutover}",
            order_id=event.order_id,
        )
