"""Messages as the broker stores them: encoded sections kept as received, broker state beside.

The bare message (properties, application properties, body, footer) is forwarded byte for byte;
only the header and the message annotations are rebuilt for each delivery, so a delivery costs
a few small encodes however large the body is. The sender's delivery annotations (broker-owned
keys dropped) are delivered in the specification's place, wherever the sender wrote them.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from .codec import (
    DecodeError,
    Symbol,
    compound_span,
    decode_value,
    encode_value,
    skip_value,
)
from .frames import descriptor_code, uint_bytes

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, SEQUENCE, VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78
_SECTION_SYMBOLS = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": SEQUENCE,
    "amqp:amqp-value:*": VALUE,
    "amqp:footer:map": FOOTER,
}

BATCH_FORMAT = 0x80013700

AVAILABLE, LOCKED, DEFERRED, SCHEDULED, GONE = range(5)
STATE_ANNOTATION = {AVAILABLE: 0, LOCKED: 0, DEFERRED: 1, SCHEDULED: 2, GONE: 0}

# Annotations the broker owns: a sender's values for them are dropped.
_BROKER_ANNOTATIONS = frozenset(
    {
        "x-opt-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-locked-until",
        "x-opt-lock-token",
        "x-opt-message-state",
        "x-opt-enqueue-sequence-number",
        "x-opt-deadletter-source",
    }
)


def _key(name: str) -> bytes:
    out = bytearray()
    encode_value(out, Symbol(name))
    return bytes(out)


_K_SEQ = _key("x-opt-sequence-number")
_K_ENQ = _key("x-opt-enqueued-time")
_K_LOCKED = _key("x-opt-locked-until")
_K_STATE = _key("x-opt-message-state")
_K_DLSOURCE = _key("x-opt-deadletter-source")
_K_ENQ_SEQ = _key("x-opt-enqueue-sequence-number")
_long = struct.Struct(">q").pack
_map8_head = struct.Struct(">BBB").pack
_map32_head = struct.Struct(">BII").pack
_SECTION_DA = b"\x00\x53\x71"
_SECTION_MA = b"\x00\x53\x72"
_SECTION_AP = b"\x00\x53\x74"


def _ts(value: int) -> bytes:
    return b"\x83" + _long(value)


def _map(body: bytes | bytearray, count: int) -> bytes:
    if len(body) + 1 < 256 and count < 256:
        return _map8_head(0xC1, len(body) + 1, count) + body
    return _map32_head(0xD1, len(body) + 4, count) + body


class ParsedMessage:
    """The sections of an incoming message that the broker needs."""

    __slots__ = (
        "annotation_count",
        "annotations_raw",
        "app_count",
        "app_raw",
        "body_raw",
        "dead_letter_source",
        "delivery_annotation_count",
        "delivery_annotations_raw",
        "enqueue_seq",
        "header",
        "message_id",
        "properties",
        "properties_raw",
        "scheduled_ms",
        "session_id",
        "size",
    )

    def __init__(self) -> None:
        self.header: list[Any] = []
        self.delivery_annotations_raw = b""
        self.delivery_annotation_count = 0
        self.annotations_raw = b""
        self.annotation_count = 0
        self.properties: list[Any] = []
        self.properties_raw = b""
        self.app_raw = b""
        self.app_count = 0
        self.body_raw = b""
        self.message_id: str | None = None
        self.scheduled_ms: int | None = None
        self.session_id: str | None = None  # properties.group-id
        self.size = 0
        # Set by auto-forwarding only (see forwarded_copy); never read from a sender.
        self.enqueue_seq: int | None = None
        self.dead_letter_source: str | None = None


def _filtered_pairs(buf: bytes, start: int) -> tuple[bytes, int, dict[str, Any]]:
    """Raw key/value pairs of the map at `start` without broker-owned keys, plus decoded keys
    of interest (only x-opt-scheduled-enqueue-time today)."""
    count, pos, end = compound_span(buf, start)
    if count % 2:
        raise DecodeError("map with odd element count")
    kept = bytearray()
    kept_count = 0
    seen: dict[str, Any] = {}
    for _ in range(count // 2):
        key, value_pos = decode_value(buf, pos)
        value_end = skip_value(buf, value_pos)
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
        if name == "x-opt-scheduled-enqueue-time":
            seen[name], _ = decode_value(buf, value_pos)
        if value_end > end:
            raise DecodeError("map entry runs past the map")
        if name not in _BROKER_ANNOTATIONS:
            kept += buf[pos:value_end]
            kept_count += 2
        pos = value_end
    if pos != end:
        raise DecodeError("map size mismatch")
    return bytes(kept), kept_count, seen


def parse_message(payload: bytes) -> ParsedMessage:
    """Split an encoded message into sections; raises DecodeError when malformed."""
    msg = ParsedMessage()
    msg.size = len(payload)
    pos = 0
    n = len(payload)
    body_start = -1
    last_code = 0
    bare_end = 0
    seen_codes: set[int] = set()
    body_kind = 0
    trailing_delivery_annotations = False
    while pos < n:
        if payload[pos] != 0x00:
            raise DecodeError("message section is not described")
        if trailing_delivery_annotations:
            raise DecodeError("a message section after out-of-place delivery annotations")
        descriptor, value_pos = decode_value(payload, pos + 1)
        code = descriptor_code(descriptor)
        if isinstance(descriptor, str):
            code = _SECTION_SYMBOLS.get(descriptor, -1)
        if code < HEADER or code > FOOTER:
            raise DecodeError(f"unexpected message section {descriptor!r}")
        if code in seen_codes and code not in (DATA, SEQUENCE):
            raise DecodeError(f"message section {descriptor!r} appears twice")
        if code in (DATA, SEQUENCE, VALUE):
            if body_kind and body_kind != code:
                raise DecodeError("a message body mixes data, sequence and value sections")
            body_kind = code
        if code == DELIVERY_ANNOTATIONS and code < last_code:
            # The SDK writes delivery annotations after the body and footer (a choice of its
            # encoder that Service Bus accepts): out of the specification's place, only last.
            trailing_delivery_annotations = True
        elif code < last_code:
            raise DecodeError(f"message section {descriptor!r} out of order")
        else:
            last_code = code
        seen_codes.add(code)
        end = skip_value(payload, value_pos)
        if code != DELIVERY_ANNOTATIONS:
            bare_end = end
        if code == HEADER:
            value, _ = decode_value(payload, value_pos)
            msg.header = value if isinstance(value, list) else []
        elif code == DELIVERY_ANNOTATIONS:
            raw, count, _ = _filtered_pairs(payload, value_pos)
            msg.delivery_annotations_raw, msg.delivery_annotation_count = raw, count
        elif code == MESSAGE_ANNOTATIONS:
            msg.annotations_raw, msg.annotation_count, seen = _filtered_pairs(payload, value_pos)
            scheduled = seen.get("x-opt-scheduled-enqueue-time")
            if isinstance(scheduled, int) and scheduled > 0:
                msg.scheduled_ms = int(scheduled)
        elif code == PROPERTIES:
            value, _ = decode_value(payload, value_pos)
            msg.properties = value if isinstance(value, list) else []
            msg.properties_raw = payload[pos:end]
            mid = msg.properties[0] if msg.properties else None
            if mid is not None:
                msg.message_id = mid if isinstance(mid, str) else str(mid)
            group = msg.properties[10] if len(msg.properties) > 10 else None
            if isinstance(group, str):
                msg.session_id = group
        elif code == APPLICATION_PROPERTIES:
            msg.app_raw, msg.app_count, _ = _filtered_pairs(payload, value_pos)
        elif code >= DATA and body_start < 0:
            body_start = pos
        pos = end
    if body_start >= 0:  # the body sections and the footer, without trailing delivery annotations
        msg.body_raw = payload[body_start:bare_end]
    return msg


_PROPERTIES_DESCRIPTOR = b"\x00\x53\x73"


def assign_message_id(parsed: ParsedMessage) -> None:
    """Give a message sent without a MessageId one, as Service Bus does: a new GUID as 32
    lowercase hex digits (.NET's `Guid.ToString("N")`). Clients rely on every received
    message having one (the JavaScript SDK's lock renewal is keyed by it).

    Only the message-id field of the properties section changes; every other field keeps its
    encoded bytes, whatever types the sender chose for them.
    """
    if parsed.message_id is not None:
        return
    message_id = uuid.uuid4().hex
    encoded_id = bytearray()
    encode_value(encoded_id, message_id)
    raw = parsed.properties_raw
    count, rest, head = 0, b"", _PROPERTIES_DESCRIPTOR
    if raw:
        _, list_pos = decode_value(raw, 1)
        head = raw[:list_pos]
        if raw[list_pos] in (0x45, 0xC0, 0xD0):  # anything else holds no field to keep
            count, first, end = compound_span(raw, list_pos)
            rest = raw[skip_value(raw, first) : end] if count else b""
    items = bytes(encoded_id) + rest
    count = max(count, 1)
    if len(items) + 1 < 256 and count < 256:
        encoded_list = bytes((0xC0, len(items) + 1, count)) + items
    else:
        encoded_list = struct.pack(">BII", 0xD0, len(items) + 4, count) + items
    parsed.properties_raw = head + encoded_list
    parsed.properties = [message_id, *parsed.properties[1:]]
    parsed.message_id = message_id
    parsed.size += len(parsed.properties_raw) - len(raw)


def header_ttl_ms(header: list[Any]) -> int | None:
    ttl = header[2] if len(header) > 2 else None
    return ttl if isinstance(ttl, int) and ttl > 0 else None


class StoredMessage:
    """A message in a queue (or its dead-letter sub-queue) with its broker state."""

    __slots__ = (
        "annotation_count",
        "annotations_raw",
        "app_count",
        "app_raw",
        "bare",
        "body_raw",
        "dead_letter_source",
        "delivery_annotation_count",
        "delivery_annotations_raw",
        "delivery_count",
        "durable",
        "enqueue_seq",
        "enqueued_ms",
        "expires_ms",
        "lock_owner",
        "lock_token",
        "locked_until_ms",
        "message_id",
        "priority",
        "properties_raw",
        "scheduled_ms",
        "seq",
        "session_id",
        "size",
        "state",
        "ttl_ms",
    )

    def __init__(self, parsed: ParsedMessage, seq: int, now_ms: int, ttl_ms: int) -> None:
        self.seq = seq
        self.enqueued_ms = now_ms
        self.message_id = parsed.message_id
        self.session_id = parsed.session_id
        self.size = parsed.size
        header = parsed.header
        self.durable = header[0] if header and isinstance(header[0], bool) else None
        self.priority = header[1] if len(header) > 1 and isinstance(header[1], int) else None
        self.ttl_ms = ttl_ms
        self.scheduled_ms = parsed.scheduled_ms
        self.expires_ms = (parsed.scheduled_ms or now_ms) + ttl_ms
        self.delivery_annotations_raw = parsed.delivery_annotations_raw
        self.delivery_annotation_count = parsed.delivery_annotation_count
        self.annotations_raw = parsed.annotations_raw
        self.annotation_count = parsed.annotation_count
        self.properties_raw = parsed.properties_raw
        self.app_raw = parsed.app_raw
        self.app_count = parsed.app_count
        self.body_raw = parsed.body_raw
        self.bare = b""
        self._rebuild_bare()
        self.delivery_count = 0
        self.state = AVAILABLE
        self.lock_token: uuid.UUID | None = None
        self.locked_until_ms = 0
        self.lock_owner: Any = None
        self.dead_letter_source = parsed.dead_letter_source
        self.enqueue_seq = parsed.enqueue_seq

    def _rebuild_bare(self) -> None:
        app = _SECTION_AP + _map(self.app_raw, self.app_count) if self.app_count else b""
        self.bare = self.properties_raw + app + self.body_raw

    def add_application_properties(
        self, values: dict[str, Any], remove: list[str] | tuple[str, ...] = ()
    ) -> None:
        """Set application properties (replacing same-named ones), e.g. DeadLetterReason, and
        drop the ones named in `remove`."""
        buf = _map(self.app_raw, self.app_count)
        count, pos, _ = compound_span(buf, 0)
        kept = bytearray()
        kept_count = 0
        for _ in range(count // 2):
            key, value_pos = decode_value(buf, pos)
            value_end = skip_value(buf, value_pos)
            if key not in values and key not in remove:
                kept += buf[pos:value_end]
                kept_count += 2
            pos = value_end
        for key, value in values.items():
            encode_value(kept, key)
            encode_value(kept, value)
            kept_count += 2
        self.app_raw = bytes(kept)
        self.app_count = kept_count
        self._rebuild_bare()

    def _header(self, out: bytearray) -> None:
        # [durable, priority, ttl, first-acquirer, delivery-count], built by hand (hot path).
        items = bytearray(b"\x40" if self.durable is None else b"\x41" if self.durable else b"\x42")
        items += b"\x40" if self.priority is None else bytes((0x50, self.priority & 0xFF))
        items += uint_bytes(self.ttl_ms) if self.ttl_ms < 2**32 else b"\x40"
        items += b"\x40"
        items += uint_bytes(self.delivery_count)
        out += b"\x00\x53\x70\xc0"
        out.append(len(items) + 1)
        out.append(5)
        out += items

    def _annotations(self, out: bytearray, lock: bool) -> None:
        body = bytearray(self.annotations_raw)
        count = self.annotation_count + 6
        body += _K_SEQ + b"\x81" + _long(self.seq)
        body += _K_ENQ + _ts(self.enqueued_ms)
        body += _K_STATE + b"\x81" + _long(STATE_ANNOTATION[self.state])
        if lock and self.lock_token is not None:
            # The lock token itself travels as the delivery tag (or, for deferred messages, in
            # the management reply), as Service Bus sends it.
            body += _K_LOCKED + _ts(self.locked_until_ms)
            count += 2
        if self.dead_letter_source:
            body += _K_DLSOURCE
            encode_value(body, self.dead_letter_source)
            count += 2
        if self.enqueue_seq is not None:
            body += _K_ENQ_SEQ + b"\x81" + _long(self.enqueue_seq)
            count += 2
        out += _SECTION_MA
        out += _map(body, count)

    def encode(self, lock: bool) -> bytes:
        """The message as delivered: header and annotations rebuilt, the bare message as sent."""
        out = bytearray()
        self._header(out)
        if self.delivery_annotation_count:  # the sender's, in the specification's place
            out += _SECTION_DA
            out += _map(self.delivery_annotations_raw, self.delivery_annotation_count)
        self._annotations(out, lock)
        out += self.bare
        return bytes(out)


def forwarded_copy(msg: StoredMessage, dead_letter_source: str | None = None) -> ParsedMessage:
    """The message as auto-forwarding hands it to the next entity.

    Its bare message (MessageId, properties, body), the sender's annotations and its
    time-to-live travel unchanged; the next entity gives it a sequence number, enqueued time
    and delivery count of its own, as Service Bus does. `x-opt-enqueue-sequence-number` keeps
    the number it got where it was first enqueued; `x-opt-deadletter-source` names the entity
    that dead-lettered it when its dead-letter queue forwards it.
    """
    parsed = parse_message(msg.encode(lock=False))
    parsed.scheduled_ms = None  # it was activated in the source already
    parsed.enqueue_seq = msg.seq if msg.enqueue_seq is None else msg.enqueue_seq
    parsed.dead_letter_source = dead_letter_source or msg.dead_letter_source
    return parsed
