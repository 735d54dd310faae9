"""AMQP 1.0 framing: performative codes, frame headers and performative encoding."""

from __future__ import annotations

import struct
from typing import Any

from .codec import (
    DecodeError,
    Described,
    Symbol,
    ULong,
    compound_span,
    decode_value,
    encode_value,
)

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"

FRAME_AMQP = 0
FRAME_SASL = 1

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
ERROR = 0x1D
RECEIVED, ACCEPTED, REJECTED, RELEASED, MODIFIED = range(0x23, 0x28)
SOURCE, TARGET = 0x28, 0x29
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)

# Peers may describe a type by symbol instead of by code; normalise to the code.
_SYMBOLIC = {
    "amqp:open:list": OPEN,
    "amqp:begin:list": BEGIN,
    "amqp:attach:list": ATTACH,
    "amqp:flow:list": FLOW,
    "amqp:transfer:list": TRANSFER,
    "amqp:disposition:list": DISPOSITION,
    "amqp:detach:list": DETACH,
    "amqp:end:list": END,
    "amqp:close:list": CLOSE,
    "amqp:error:list": ERROR,
    "amqp:received:list": RECEIVED,
    "amqp:accepted:list": ACCEPTED,
    "amqp:rejected:list": REJECTED,
    "amqp:released:list": RELEASED,
    "amqp:modified:list": MODIFIED,
    "amqp:source:list": SOURCE,
    "amqp:target:list": TARGET,
    "amqp:sasl-mechanisms:list": SASL_MECHANISMS,
    "amqp:sasl-init:list": SASL_INIT,
    "amqp:sasl-response:list": SASL_RESPONSE,
    "amqp:sasl-outcome:list": SASL_OUTCOME,
}

_frame_head = struct.Struct(">IBBH")
EMPTY_FRAME = _frame_head.pack(8, 2, FRAME_AMQP, 0)


def descriptor_code(descriptor: Any) -> int:
    if isinstance(descriptor, int):
        return descriptor
    if isinstance(descriptor, str):
        return _SYMBOLIC.get(descriptor, -1)
    return -1


def described_code(value: Any) -> int:
    """The numeric code of a described list (outcome, source, error), or -1."""
    if isinstance(value, Described):
        return descriptor_code(value.descriptor)
    return -1


def decode_performative(body: bytes) -> tuple[int, list[Any], int]:
    """Decode the performative at the start of a frame body.

    Returns (code, fields, end position); the bytes after `end` are a transfer's payload.
    """
    if not body or body[0] != 0x00:
        raise DecodeError("frame body is not a described performative")
    descriptor, pos = decode_value(body, 1)
    code = descriptor_code(descriptor)
    compound_span(body, pos)  # must be a list (or list0)
    fields, end = decode_value(body, pos)
    if not isinstance(fields, list):
        raise DecodeError("performative body is not a list")
    return code, fields, end


def field(fields: list[Any], index: int, default: Any = None) -> Any:
    """Field `index` of a performative list; absent trailing fields read as `default`."""
    if index < len(fields):
        value = fields[index]
        return default if value is None else value
    return default


class InvalidField(ValueError):
    """A performative field has the wrong type (AMQP `amqp:invalid-field`)."""


def uint(fields: list[Any], index: int, default: int | None = None) -> int:
    """An unsigned integer field; a missing one is `default` (None: the field is mandatory)."""
    value = field(fields, index)
    if value is None:
        if default is None:
            raise InvalidField(f"mandatory field {index} is missing")
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**64:
        raise InvalidField(f"field {index} must be an unsigned integer, not {value!r}")
    return value


def described_list(code: int, fields: list[Any]) -> bytes:
    """Encode `fields` as a described list with a small-ulong descriptor, trailing nulls dropped."""
    end = len(fields)
    while end and fields[end - 1] is None:
        end -= 1
    out = bytearray((0x00, 0x53, code))
    encode_value(out, list(fields[:end]))
    return bytes(out)


def uint_bytes(value: int) -> bytes:
    """Compact AMQP uint encoding (the hot-path twin of codec's UInt encoder)."""
    if value == 0:
        return b"\x43"
    if value < 256:
        return bytes((0x52, value))
    return b"\x70" + value.to_bytes(4, "big")


_SETTLED = {True: b"\x41", False: b"\x42"}


def transfer_head(
    channel: int,
    handle: int,
    delivery_id: int,
    tag: bytes,
    settled: bool,
    more: bool | None,
    payload_size: int,
) -> bytes:
    """Frame header and transfer performative for a payload of `payload_size` bytes.

    Built by hand because it runs once per delivered message; equivalent to
    performative_frame(channel, TRANSFER, [handle, delivery_id, tag, 0, settled, more]).
    """
    items = (
        uint_bytes(handle)
        + uint_bytes(delivery_id)
        + bytes((0xA0, len(tag)))
        + tag
        + b"\x43"
        + _SETTLED[settled]
    )
    count = 5
    if more is not None:
        items += _SETTLED[more]
        count = 6
    body = b"\x00\x53\x14\xc0" + bytes((len(items) + 1, count)) + items
    return _frame_head.pack(8 + len(body) + payload_size, 2, FRAME_AMQP, channel) + body


def settled_disposition(channel: int, from_receiver: bool, delivery_id: int, state: bytes) -> bytes:
    """A settled disposition of one delivery; `state` is the encoded outcome.

    Built by hand because one is written per sent and per settled message; equivalent to
    performative_frame(channel, DISPOSITION, [from_receiver, delivery_id, None, True, state]).
    """
    items = _SETTLED[from_receiver] + uint_bytes(delivery_id) + b"\x40\x41" + state
    if len(items) < 255:
        body = b"\x00\x53\x15\xc0" + bytes((len(items) + 1, 5)) + items
    else:  # a long error description: list32
        body = b"\x00\x53\x15\xd0" + struct.pack(">II", len(items) + 4, 5) + items
    return _frame_head.pack(8 + len(body), 2, FRAME_AMQP, channel) + body


def frame(channel: int, body: bytes, frame_type: int = FRAME_AMQP) -> bytes:
    return _frame_head.pack(8 + len(body), 2, frame_type, channel) + body


def performative_frame(channel: int, code: int, fields: list[Any], payload: bytes = b"") -> bytes:
    body = described_list(code, fields)
    return _frame_head.pack(8 + len(body) + len(payload), 2, FRAME_AMQP, channel) + body + payload


def error_value(condition: str, description: str | None = None, info: Any = None) -> Described:
    """An AMQP `error`; all three fields are always written (the SDK indexes info)."""
    return Described(ULong(ERROR), [Symbol(condition), description, info])


def outcome(code: int, fields: list[Any] | None = None) -> Described:
    """A delivery state such as accepted or rejected."""
    return Described(ULong(code), fields or [])
