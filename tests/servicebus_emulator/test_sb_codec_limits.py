"""Hostile encodings: every count, size and nesting depth is checked before any work is done.

The decoder runs on bytes from the network, so a count that promises more elements than bytes
remain, a depth beyond the limit, or any other malformed input must end in `DecodeError` at
once: never a loop over a 4-byte count, a `RecursionError` or another exception type.
"""

from __future__ import annotations

import contextlib
import struct
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servicebus_emulator.codec import (
    MAX_DEPTH,
    DecodeError,
    compound_span,
    decode_value,
    encode,
    skip_value,
)
from servicebus_emulator.message import parse_message

ZERO_WIDTH_CONSTRUCTORS = {
    "null": 0x40,
    "true": 0x41,
    "false": 0x42,
    "uint0": 0x43,
    "ulong0": 0x44,
    "list0": 0x45,
}


def array32(count: int, element: int, elements: bytes = b"") -> bytes:
    body = struct.pack(">I", count) + bytes((element,)) + elements
    return b"\xf0" + struct.pack(">I", len(body)) + body


def compound32(code: int, count: int, items: bytes) -> bytes:
    body = struct.pack(">I", count) + items
    return bytes((code,)) + struct.pack(">I", len(body)) + body


def nested_lists(depth: int) -> bytes:
    """`depth` list32s, each holding the next; the innermost holds an empty list."""
    heads = []
    inner_size = 1  # the innermost list0
    for _ in range(depth):
        heads.append(b"\xd0" + struct.pack(">II", 4 + inner_size, 1))
        inner_size += 9
    return b"".join(reversed(heads)) + b"\x45"


def _refused_quickly(raw: bytes) -> None:
    started = time.monotonic()
    with pytest.raises(DecodeError):
        decode_value(raw)
    # skip_value walks sizes only, so a well-sized encoding may pass it; it must not loop.
    with contextlib.suppress(DecodeError):
        skip_value(raw, 0)
    assert time.monotonic() - started < 1.0  # generous: the point is "no 2**31-step loop"


@pytest.mark.parametrize("name", sorted(ZERO_WIDTH_CONSTRUCTORS))
@pytest.mark.parametrize("count", [1, 255, 0x7FFFFFFF, 0xFFFFFFFF])
def test_zero_width_arrays_cannot_claim_more_elements_than_bytes(name: str, count: int) -> None:
    with pytest.raises(DecodeError, match="count exceeds size"):
        decode_value(array32(count, ZERO_WIDTH_CONSTRUCTORS[name]))
    _refused_quickly(array32(count, ZERO_WIDTH_CONSTRUCTORS[name]))


def test_the_memory_bomb_begin_field_is_refused() -> None:
    # The array32 of null with count 0x7FFFFFFF from the memory-bomb begin frame.
    field = bytes.fromhex("f0000000057fffffff40")
    with pytest.raises(DecodeError):
        decode_value(field)


def test_array8_counts_are_checked_too() -> None:
    with pytest.raises(DecodeError):
        decode_value(b"\xe0\x01\xff\x40")  # 255 nulls in zero bytes
    with pytest.raises(DecodeError):
        decode_value(b"\xe0\x03\xff\x81\x00")  # 255 longs in one byte


def test_empty_arrays_and_real_arrays_still_decode() -> None:
    assert decode_value(b"\xe0\x02\x00\x40") == ([], 4)
    assert decode_value(b"\xe0\x01\x00") == ([], 3)  # as the SDK writes an empty array
    assert decode_value(array32(2, 0x56, b"\x01\x00"))[0] == [True, False]


@pytest.mark.parametrize("code", [0xD0, 0xD1])
@pytest.mark.parametrize("count", [3, 0x7FFFFFFF, 0xFFFFFFFF])
def test_list32_and_map32_counts_beyond_their_bytes_are_refused(code: int, count: int) -> None:
    raw = compound32(code, count, b"\x40\x40")
    with pytest.raises(DecodeError, match="count exceeds size"):
        decode_value(raw)
    with pytest.raises(DecodeError, match="count exceeds size"):
        compound_span(raw, 0)
    _refused_quickly(raw)


@pytest.mark.parametrize("code", [0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0])
def test_sizes_beyond_the_buffer_are_refused(code: int) -> None:
    raw = bytes((code,)) + struct.pack(">I", 0xFFFFFFF0) + b"\x00" * 16
    with pytest.raises(DecodeError, match="truncated"):
        decode_value(raw)
    with pytest.raises(DecodeError, match="truncated"):
        skip_value(raw, 0)


def test_nesting_beyond_the_limit_is_a_decode_error_not_a_recursion_error() -> None:
    assert decode_value(nested_lists(MAX_DEPTH))[1] == len(nested_lists(MAX_DEPTH))
    for depth in (MAX_DEPTH + 1, 5000, 100_000):
        with pytest.raises(DecodeError, match="too deep"):
            decode_value(nested_lists(depth))


def test_deeply_described_values_are_bounded_in_decode_and_skip() -> None:
    for depth in (MAX_DEPTH + 1, 50_000):
        raw = b"\x00" * depth + b"\x53\x01" + b"\x40" * depth
        with pytest.raises(DecodeError, match="too deep"):
            decode_value(raw)
        with pytest.raises(DecodeError, match="too deep"):
            skip_value(raw, 0)
        with pytest.raises(DecodeError, match="too deep"):
            parse_message(b"\x00\x53\x77" + raw)


def test_nested_arrays_are_bounded() -> None:
    value = b"\x40"
    for _ in range(200):  # arrays of one array of one array ...
        body = struct.pack(">I", 1) + value[:1] + value[1:]
        value = b"\xf0" + struct.pack(">I", len(body)) + body
    with pytest.raises(DecodeError):
        decode_value(value)


def test_uuid_map_keys_with_colliding_hashes_are_refused_without_hashing_them() -> None:
    # uuid hashes as its integer: every key below lands in one hash bucket.
    mersenne = 2**61 - 1
    items = b"".join(b"\x98" + uuid.UUID(int=7 + k * mersenne).bytes + b"\x40" for k in range(3000))
    raw = compound32(0xD1, 6000, items)
    started = time.monotonic()
    with pytest.raises(DecodeError, match="uuid map keys"):
        decode_value(raw)
    assert time.monotonic() - started < 1.0


def test_values_decoded_from_the_wire_can_be_written_back() -> None:
    # The broker echoes an attach's source and target: a ulong above the long range and a
    # non-ASCII symbol must encode again rather than fail.
    for raw in (b"\x80" + b"\xff" * 8, b"\xa3\x02\xc3\xa9"):
        value, _ = decode_value(raw)
        assert decode_value(encode(value))[0] == value


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_ever_raise_decode_error(raw: bytes) -> None:
    for parse in (lambda: decode_value(raw), lambda: skip_value(raw, 0)):
        with contextlib.suppress(DecodeError):
            parse()
    with contextlib.suppress(DecodeError):
        parse_message(raw)
