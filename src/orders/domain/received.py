"""The broker-independent view of a received message that the core needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class BodyKind(StrEnum):
    """The AMQP body section a message arrived with; orders travel as data (bytes)."""

    DATA = "data"
    VALUE = "value"
    SEQUENCE = "sequence"


@dataclass(frozen=True)
class ReceivedOrderMessage:
    body: bytes
    message_id: str | None
    # As the SDK reports it: prior delivery attempts. None when the host's binding does not
    # carry it (the Functions Service Bus extension 1.0.0b2 cuts the AMQP header off): unknown,
    # never reported as a first delivery.
    delivery_count: int | None = 0
    correlation_id: str | None = None
    body_kind: BodyKind = BodyKind.DATA
    # W3C trace context the producer put on the message (traceparent, tracestate, Diagnostic-Id)
    trace_context: dict[str, str] = field(default_factory=dict)
    # The `orderOwner` application property as it arrived (None: absent); the consumer checks it
    # (`domain/ownership.py`), so a malformed one is a rejection with its rule, not a guess.
    owner_property: object = None
    # When the broker took the message in (None: the host did not say); what the bare-eventId
    # cut-over is judged by, since no sender can set it.
    enqueued_time: datetime | None = None
