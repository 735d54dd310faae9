"""A message's key and request hash: what names its records, and what a mismatch compares.

A consumer's key function reads the delivered message (`Delivered`: parsed, and as sent) and
returns its key, or None when the message carries none (it is dead-lettered on its first
delivery, `MissingIdempotencyKey`). The default is the MessageId. Ready-made: `from_message`
(a business key of the parsed message) and `cloud_event_key` (a CloudEvent's source and id, in
the AMQP binding's structured or binary mode). The key is scoped by the consumer's name (or its
`key_prefix`) in every record id, as the MessageId always was.

A payload projection (`PayloadOf`) picks the part of the parsed message whose hash tells a
duplicate from a mismatch; without one the whole body is hashed (`records.body_fingerprint`).
No broker SDK here: `exactly_once.servicebus` builds the `Delivered` from a received message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from exactly_once._records import JsonInput

Message = TypeVar("Message")

# The AMQP protocol binding of CloudEvents 1.0.2: in binary mode each attribute is an
# application property named with this prefix (section 3.1.3.1); a content type starting with
# the CloudEvents media type means structured mode (section 3).
CLOUD_EVENTS_PROPERTY_PREFIX = "cloudEvents:"
CLOUD_EVENTS_MEDIA_TYPE = "application/cloudevents"


@dataclass(frozen=True)
class Delivered(Generic[Message]):
    """One delivered message as a key function sees it: `message` parsed by the consumer's
    parser, and what the broker delivered (its MessageId, body bytes, application properties
    with their names as text, and content type)."""

    message: Message
    message_id: str
    body: bytes
    properties: Mapping[str, object] = field(default_factory=dict)
    content_type: str | None = None


# A key function: the delivered message -> its key, or None (or "") when it carries none.
KeyOf = Callable[[Delivered[Message]], str | None]
# A payload projection: the parsed message -> the JSON whose hash a resend must match.
PayloadOf = Callable[[Message], JsonInput]


def message_id_key(delivered: Delivered[Any]) -> str | None:
    """The default key: the MessageId (the producer sets it to the business key it sends)."""
    return delivered.message_id


def from_message(key_of: Callable[[Message], str | None]) -> KeyOf[Message]:
    """A key function from a business key of the parsed message, e.g.
    `from_message(lambda invoice: invoice.invoice_id)`: every resend of the invoice, whatever
    its MessageId, is judged under the same key."""

    def key(delivered: Delivered[Message]) -> str | None:
        return key_of(delivered.message)

    return key


def cloud_event_key(delivered: Delivered[Any]) -> str | None:
    """A CloudEvent's key: its `source` and `id`, which together identify an event (the
    CloudEvents spec: a producer never reuses an id within one source).

    Structured mode (a content type `application/cloudevents...`) reads them from the JSON
    body; binary mode from the application properties `cloudEvents:source` and `cloudEvents:id`.
    A message with neither content type nor `cloudEvents:` properties is read as structured when
    its body is a JSON object with a `specversion` (a sender that set no content type). None
    when the event lacks either attribute."""
    if _is_structured(delivered):
        return _structured_key(delivered.body)
    source = _text(delivered.properties.get(f"{CLOUD_EVENTS_PROPERTY_PREFIX}source"))
    event_id = _text(delivered.properties.get(f"{CLOUD_EVENTS_PROPERTY_PREFIX}id"))
    return _joined(source, event_id)


def _is_structured(delivered: Delivered[Any]) -> bool:
    content_type = (delivered.content_type or "").strip().lower()
    if content_type:
        return content_type.startswith(CLOUD_EVENTS_MEDIA_TYPE)
    return not any(name.startswith(CLOUD_EVENTS_PROPERTY_PREFIX) for name in delivered.properties)


def _structured_key(body: bytes) -> str | None:
    try:
        event = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or "specversion" not in event:
        return None
    return _joined(_text(event.get("source")), _text(event.get("id")))


def _text(value: object) -> str | None:
    """An attribute as text: AMQP may carry a string attribute as binary (UTF-8)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _joined(source: str | None, event_id: str | None) -> str | None:
    """Source and id as one key; a JSON array, so ("a:b", "c") and ("a", "b:c") stay apart."""
    if not source or not event_id:
        return None
    return json.dumps([source, event_id], ensure_ascii=False, separators=(",", ":"))
