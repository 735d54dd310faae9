"""AMQP 1.0 type system: a decoder and an encoder written for the broker's hot paths.

Decoded values map onto plain Python objects (ints, str, bytes, lists, dicts) plus the marker
types below where the AMQP type matters when the broker writes a value back (a `Symbol` key, a
`Timestamp` annotation, a `UInt` handle). Message bodies are never decoded: the broker keeps
them as the encoded bytes it received (see `skip_value`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any


class DecodeError(ValueError):
    """The bytes are not valid AMQP 1.0 encoding."""


class Symbol(str):
    """AMQP symbol (ASCII identifier); a `str` so lookups by plain text work."""

    __slots__ = ()


class UInt(int):
    __slots__ = ()


class ULong(int):
    __slots__ = ()


class UByte(int):
    __slots__ = ()


class UShort(int):
    __slots__ = ()


class Int(int):
    __slots__ = ()


class Timestamp(int):
    """Milliseconds since the Unix epoch (the SDK requires this type for time annotations)."""

    __slots__ = ()


class Described:
    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"


class Array:
    """A homogeneous AMQP array; `element` names the element type ("uuid", "long", ...)."""

    __slots__ = ("element", "items")

    def __init__(self, element: str, items: list[Any]) -> None:
        self.element = element
        self.items = items


class Raw(bytes):
    """Bytes that are already AMQP-encoded and are written verbatim."""

    __slots__ = ()


# --------------------------------------------------------------------------- decoding

_u8 = struct.Struct(">B").unpack_from
_i8 = struct.Struct(">b").unpack_from
_u16 = struct.Struct(">H").unpack_from
_i16 = struct.Struct(">h").unpack_from
_u32 = struct.Struct(">I").unpack_from
_i32 = struct.Struct(">i").unpack_from
_u64 = struct.Struct(">Q").unpack_from
_i64 = struct.Struct(">q").unpack_from
_f32 = struct.Struct(">f").unpack_from
_f64 = struct.Struct(">d").unpack_from

# Nesting limit for lists, maps, arrays and described values: a peer's bytes decide how deep
# the decoder recurses, and a bound keeps that far below Python's recursion limit.
MAX_DEPTH = 32
# Fixed-width constructors: code -> payload width (used by `skip_value`).
_FIXED_WIDTH: dict[int, int] = {
    0x40: 0,
    0x41: 0,
    0x42: 0,
    0x43: 0,
    0x44: 0,
    0x45: 0,
    0x50: 1,
    0x51: 1,
    0x52: 1,
    0x53: 1,
    0x54: 1,
    0x55: 1,
    0x56: 1,
    0x60: 2,
    0x61: 2,
    0x70: 4,
    0x71: 4,
    0x72: 4,
    0x73: 4,
    0x74: 4,
    0x80: 8,
    0x81: 8,
    0x82: 8,
    0x83: 8,
    0x84: 8,
    0x94: 16,
    0x98: 16,
}
_VAR8 = frozenset((0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0))
_VAR32 = frozenset((0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0))

Decoder = Callable[[bytes, int, int], tuple[Any, int]]


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise DecodeError("truncated value")


def _d_null(b: bytes, p: int, d: int) -> tuple[Any, int]:
    return None, p


def _d_true(b: bytes, p: int, d: int) -> tuple[Any, int]:
    return True, p


def _d_false(b: bytes, p: int, d: int) -> tuple[Any, int]:
    return False, p


def _d_zero(b: bytes, p: int, d: int) -> tuple[Any, int]:
    return 0, p


def _d_list0(b: bytes, p: int, d: int) -> tuple[Any, int]:
    return [], p


def _d_bool(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 1)
    return b[p] != 0, p + 1


def _d_u8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 1)
    return b[p], p + 1


def _d_i8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 1)
    return _i8(b, p)[0], p + 1


def _d_u16(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 2)
    return _u16(b, p)[0], p + 2


def _d_i16(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 2)
    return _i16(b, p)[0], p + 2


def _d_u32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 4)
    return _u32(b, p)[0], p + 4


def _d_i32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 4)
    return _i32(b, p)[0], p + 4


def _d_f32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 4)
    return _f32(b, p)[0], p + 4


def _d_char(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 4)
    try:
        return chr(_u32(b, p)[0]), p + 4
    except (ValueError, OverflowError) as exc:
        raise DecodeError("invalid char") from exc


def _d_u64(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 8)
    return _u64(b, p)[0], p + 8


def _d_i64(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 8)
    return _i64(b, p)[0], p + 8


def _d_f64(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 8)
    return _f64(b, p)[0], p + 8


def _d_ts(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 8)
    return Timestamp(_i64(b, p)[0]), p + 8


def _d_raw4(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 4)
    return Raw(b[p - 1 : p + 4]), p + 4


def _d_raw8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 8)
    return Raw(b[p - 1 : p + 8]), p + 8


def _d_raw16(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 16)
    return Raw(b[p - 1 : p + 16]), p + 16


def _d_uuid(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 16)
    return uuid.UUID(bytes=bytes(b[p : p + 16])), p + 16


def _d_bin8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 1)
    end = p + 1 + b[p]
    _need(b, end)
    return bytes(b[p + 1 : end]), end


def _d_bin32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 4)
    end = p + 4 + _u32(b, p)[0]
    _need(b, end)
    return bytes(b[p + 4 : end]), end


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("invalid utf-8 string") from exc


def _d_str8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    raw, end = _d_bin8(b, p, d)
    return _utf8(raw), end


def _d_str32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    raw, end = _d_bin32(b, p, d)
    return _utf8(raw), end


def _d_sym8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    raw, end = _d_bin8(b, p, d)
    return Symbol(_utf8(raw)), end


def _d_sym32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    raw, end = _d_bin32(b, p, d)
    return Symbol(_utf8(raw)), end


def _items(b: bytes, p: int, end: int, count: int, d: int) -> list[Any]:
    if d >= MAX_DEPTH:
        raise DecodeError("nesting too deep")
    if count > end - p:  # every element takes at least one byte
        raise DecodeError("element count exceeds size")
    out: list[Any] = []
    append = out.append
    for _ in range(count):
        if p >= end:
            raise DecodeError("truncated compound")
        v, p = _DECODERS[b[p]](b, p + 1, d + 1)
        append(v)
    if p != end:
        raise DecodeError("compound size mismatch")
    return out


def _d_list8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 2)
    end = p + 1 + b[p]
    _need(b, end)
    return _items(b, p + 2, end, b[p + 1], d), end


def _d_list32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 8)
    end = p + 4 + _u32(b, p)[0]
    _need(b, end)
    return _items(b, p + 8, end, _u32(b, p + 4)[0], d), end


def _pairs(items: list[Any]) -> dict[Any, Any]:
    if len(items) % 2:
        raise DecodeError("map with odd element count")
    keys = items[0::2]
    # A uuid hashes as its 128-bit integer, so a peer can pick thousands of keys with one hash
    # and make building the dict quadratic; Service Bus maps are keyed by strings and symbols.
    if any(type(key) is uuid.UUID for key in keys):
        raise DecodeError("uuid map keys are not supported")
    try:
        return dict(zip(keys, items[1::2], strict=True))
    except TypeError as exc:
        raise DecodeError("unhashable map key") from exc


def _d_map8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    items, end = _d_list8(b, p, d)
    return _pairs(items), end


def _d_map32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    items, end = _d_list32(b, p, d)
    return _pairs(items), end


def _array_items(b: bytes, p: int, end: int, count: int, d: int) -> list[Any]:
    if d >= MAX_DEPTH:
        raise DecodeError("nesting too deep")
    if count == 0 and p == end:
        return []  # the SDK writes an empty array without an element constructor
    _need(b, p + 1)
    code = b[p]
    p += 1
    descriptor = None
    if code == 0x00:
        descriptor, p = decode_value(b, p, d + 1)
        _need(b, p + 1)
        code = b[p]
        p += 1
    dec = _DECODERS[code]
    # Every element is charged at least one byte, zero-width ones (null, true, false, uint0,
    # ulong0, list0) included: otherwise a 4-byte count makes the loop below run 2**32 times
    # without consuming input. No AMQP client sends non-empty arrays of a zero-width type.
    if count > end - p:
        raise DecodeError("array count exceeds size")
    out: list[Any] = []
    for _ in range(count):
        v, p = dec(b, p, d + 1)
        out.append(v if descriptor is None else Described(descriptor, v))
    if p != end:
        raise DecodeError("array size mismatch")
    return out


def _d_array8(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 2)
    end = p + 1 + b[p]
    _need(b, end)
    return _array_items(b, p + 2, end, b[p + 1], d), end


def _d_array32(b: bytes, p: int, d: int) -> tuple[Any, int]:
    _need(b, p + 8)
    end = p + 4 + _u32(b, p)[0]
    _need(b, end)
    return _array_items(b, p + 8, end, _u32(b, p + 4)[0], d), end


def _d_described(b: bytes, p: int, d: int) -> tuple[Any, int]:
    if d >= MAX_DEPTH:
        raise DecodeError("nesting too deep")
    descriptor, p = decode_value(b, p, d + 1)
    value, p = decode_value(b, p, d + 1)
    return Described(descriptor, value), p


def _d_invalid(b: bytes, p: int, d: int) -> tuple[Any, int]:
    raise DecodeError(f"invalid constructor 0x{b[p - 1]:02x}")


_DECODERS: list[Decoder] = [_d_invalid] * 256
for _code, _fn in {
    0x00: _d_described,
    0x40: _d_null,
    0x41: _d_true,
    0x42: _d_false,
    0x43: _d_zero,
    0x44: _d_zero,
    0x45: _d_list0,
    0x56: _d_bool,
    0x50: _d_u8,
    0x51: _d_i8,
    0x52: _d_u8,
    0x53: _d_u8,
    0x54: _d_i8,
    0x55: _d_i8,
    0x60: _d_u16,
    0x61: _d_i16,
    0x70: _d_u32,
    0x71: _d_i32,
    0x72: _d_f32,
    0x73: _d_char,
    0x74: _d_raw4,
    0x80: _d_u64,
    0x81: _d_i64,
    0x82: _d_f64,
    0x83: _d_ts,
    0x84: _d_raw8,
    0x94: _d_raw16,
    0x98: _d_uuid,
    0xA0: _d_bin8,
    0xB0: _d_bin32,
    0xA1: _d_str8,
    0xB1: _d_str32,
    0xA3: _d_sym8,
    0xB3: _d_sym32,
    0xC0: _d_list8,
    0xD0: _d_list32,
    0xC1: _d_map8,
    0xD1: _d_map32,
    0xE0: _d_array8,
    0xF0: _d_array32,
}.items():
    _DECODERS[_code] = _fn


def decode_value(buf: bytes, pos: int = 0, depth: int = 0) -> tuple[Any, int]:
    """Decode one value at `pos`; returns it and the position after it.

    Whatever the bytes, the only exception is `DecodeError`: input comes from the network.
    """
    if pos >= len(buf):
        raise DecodeError("truncated value")
    try:
        return _DECODERS[buf[pos]](buf, pos + 1, depth)
    except DecodeError:
        raise
    except Exception as exc:  # e.g. a struct or index error a check above failed to foresee
        raise DecodeError(f"malformed value: {exc!r}") from exc


def skip_value(buf: bytes, pos: int, depth: int = 0) -> int:
    """Return the position after the value at `pos` without building Python objects."""
    if pos >= len(buf):
        raise DecodeError("truncated value")
    code = buf[pos]
    if code == 0x00:
        if depth >= MAX_DEPTH:
            raise DecodeError("nesting too deep")
        return skip_value(buf, skip_value(buf, pos + 1, depth + 1), depth + 1)
    width = _FIXED_WIDTH.get(code)
    if width is not None:
        end = pos + 1 + width
    elif code in _VAR8:
        _need(buf, pos + 2)
        end = pos + 2 + buf[pos + 1]
    elif code in _VAR32:
        _need(buf, pos + 5)
        end = pos + 5 + _u32(buf, pos + 1)[0]
    else:
        raise DecodeError(f"invalid constructor 0x{code:02x}")
    _need(buf, end)
    return end


def compound_span(buf: bytes, pos: int) -> tuple[int, int, int]:
    """For a list/map at `pos`: (count, first element position, end position)."""
    code = buf[pos] if pos < len(buf) else -1
    if code == 0x45:
        return 0, pos + 1, pos + 1
    if code in (0xC0, 0xC1):
        _need(buf, pos + 3)
        end = pos + 2 + buf[pos + 1]
        count, first = buf[pos + 2], pos + 3
    elif code in (0xD0, 0xD1):
        _need(buf, pos + 9)
        end = pos + 5 + _u32(buf, pos + 1)[0]
        count, first = _u32(buf, pos + 5)[0], pos + 9
    else:
        raise DecodeError("expected a list or map")
    _need(buf, end)
    if count > end - first:  # callers loop `count` times: each element takes a byte at least
        raise DecodeError("element count exceeds size")
    return count, first, end


# --------------------------------------------------------------------------- encoding

_p8 = struct.Struct(">B").pack
_p16 = struct.Struct(">H").pack
_p32 = struct.Struct(">I").pack
_pi32 = struct.Struct(">i").pack
_p64 = struct.Struct(">Q").pack
_pi64 = struct.Struct(">q").pack
_pf64 = struct.Struct(">d").pack
_var32_head = struct.Struct(">BI").pack
_compound32_head = struct.Struct(">BII").pack


def _e_bytes(out: bytearray, v: bytes, small: int, large: int) -> None:
    n = len(v)
    if n < 256:
        out.append(small)
        out.append(n)
    else:
        out += _var32_head(large, n)
    out += v


def _e_str(out: bytearray, v: str) -> None:
    _e_bytes(out, v.encode("utf-8"), 0xA1, 0xB1)


def _e_symbol(out: bytearray, v: str) -> None:
    # Symbols are ASCII; the decoder reads them as UTF-8, so whatever it read can be echoed.
    _e_bytes(out, v.encode("utf-8"), 0xA3, 0xB3)


def _e_binary(out: bytearray, v: Any) -> None:
    _e_bytes(out, bytes(v), 0xA0, 0xB0)


def _e_long(out: bytearray, v: int) -> None:
    if -128 <= v <= 127:
        out.append(0x55)
        out += v.to_bytes(1, "big", signed=True)
    elif -(2**63) <= v < 2**63:
        out.append(0x81)
        out += _pi64(v)
    else:  # a decoded ulong above the long range, echoed back (an attach's terminus)
        out.append(0x80)
        out += _p64(v)


def _e_int(out: bytearray, v: int) -> None:
    if -128 <= v <= 127:
        out.append(0x54)
        out += v.to_bytes(1, "big", signed=True)
    else:
        out.append(0x71)
        out += _pi32(v)


def _e_uint(out: bytearray, v: int) -> None:
    if v == 0:
        out.append(0x43)
    elif v < 256:
        out.append(0x52)
        out.append(v)
    else:
        out.append(0x70)
        out += _p32(v)


def _e_ulong(out: bytearray, v: int) -> None:
    if v == 0:
        out.append(0x44)
    elif v < 256:
        out.append(0x53)
        out.append(v)
    else:
        out.append(0x80)
        out += _p64(v)


def _e_ubyte(out: bytearray, v: int) -> None:
    out.append(0x50)
    out.append(v)


def _e_ushort(out: bytearray, v: int) -> None:
    out.append(0x60)
    out += _p16(v)


def _e_timestamp(out: bytearray, v: int) -> None:
    out.append(0x83)
    out += _pi64(v)


def _e_uuid(out: bytearray, v: uuid.UUID) -> None:
    out.append(0x98)
    out += v.bytes


def _e_bool(out: bytearray, v: bool) -> None:
    out.append(0x41 if v else 0x42)


def _e_double(out: bytearray, v: float) -> None:
    out.append(0x82)
    out += _pf64(v)


def _compound(out: bytearray, body: bytearray, count: int, small: int, large: int) -> None:
    if len(body) + 1 < 256 and count < 256:
        out.append(small)
        out.append(len(body) + 1)
        out.append(count)
    else:
        out += _compound32_head(large, len(body) + 4, count)
    out += body


def _e_list(out: bytearray, v: list[Any] | tuple[Any, ...]) -> None:
    if not v:
        out.append(0x45)
        return
    body = bytearray()
    for item in v:
        encode_value(body, item)
    _compound(out, body, len(v), 0xC0, 0xD0)


def _e_map(out: bytearray, v: dict[Any, Any]) -> None:
    body = bytearray()
    for key, item in v.items():
        encode_value(body, key)
        encode_value(body, item)
    _compound(out, body, 2 * len(v), 0xC1, 0xD1)


_ARRAY_CODES: dict[str, tuple[int, Callable[[bytearray, Any], None]]] = {
    "uuid": (0x98, lambda o, v: o.extend(v.bytes)),
    "long": (0x81, lambda o, v: o.extend(_pi64(v))),
    "timestamp": (0x83, lambda o, v: o.extend(_pi64(v))),
    "string": (0xB1, lambda o, v: o.extend(_p32(len(v.encode())) + v.encode())),
    "symbol": (0xB3, lambda o, v: o.extend(_p32(len(v.encode())) + v.encode())),
    "binary": (0xB0, lambda o, v: o.extend(_p32(len(v)) + bytes(v))),
    "map": (0xD1, lambda o, v: o.extend(_map32_body(v))),
}


def _map32_body(v: dict[Any, Any]) -> bytes:
    body = bytearray()
    for key, item in v.items():
        encode_value(body, key)
        encode_value(body, item)
    return _p32(len(body) + 4) + _p32(2 * len(v)) + bytes(body)


def _e_array(out: bytearray, v: Array) -> None:
    code, write = _ARRAY_CODES[v.element]
    body = bytearray((code,))
    for item in v.items:
        write(body, item)
    if len(body) + 1 < 256 and len(v.items) < 256:
        out.append(0xE0)
        out.append(len(body) + 1)
        out.append(len(v.items))
    else:
        out += _compound32_head(0xF0, len(body) + 4, len(v.items))
    out += body


def _e_described(out: bytearray, v: Described) -> None:
    out.append(0x00)
    encode_value(out, v.descriptor)
    encode_value(out, v.value)


def _e_raw(out: bytearray, v: bytes) -> None:
    out += v


_ENCODERS: dict[type, Callable[[bytearray, Any], None]] = {
    type(None): lambda o, v: o.append(0x40),
    bool: _e_bool,
    int: _e_long,
    float: _e_double,
    str: _e_str,
    Symbol: _e_symbol,
    bytes: _e_binary,
    bytearray: _e_binary,
    memoryview: _e_binary,
    uuid.UUID: _e_uuid,
    list: _e_list,
    tuple: _e_list,
    dict: _e_map,
    UInt: _e_uint,
    ULong: _e_ulong,
    UByte: _e_ubyte,
    UShort: _e_ushort,
    Int: _e_int,
    Timestamp: _e_timestamp,
    Array: _e_array,
    Described: _e_described,
    Raw: _e_raw,
}


def encode_value(out: bytearray, value: Any) -> None:
    """Append the AMQP encoding of `value` to `out`."""
    try:
        _ENCODERS[type(value)](out, value)
    except KeyError:
        raise TypeError(f"cannot encode {type(value).__name__} as AMQP") from None


def encode(value: Any) -> bytes:
    out = bytearray()
    encode_value(out, value)
    return bytes(out)
