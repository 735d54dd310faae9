"""Effective partition keys (hash V2), for requests the SDK scopes by EPK range.

The SDK sends `x-ms-start-epk` / `x-ms-end-epk` instead of a partition key header for feed
ranges and for prefixes of hierarchical keys. Matching them needs each item's EPK: MurmurHash3
x64/128 over Cosmos's binary encoding of each key component, as the SDK computes it.
"""

from __future__ import annotations

import struct
from typing import Any

_MASK = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl(value: int, shift: int) -> int:
    return ((value << shift) | (value >> (64 - shift))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    k ^= k >> 33
    return k


def murmur3_128(data: bytes) -> tuple[int, int]:
    """(low, high) 64-bit halves of MurmurHash3 x64/128 with seed 0."""
    h1 = h2 = 0
    blocks = len(data) // 16
    for i in range(blocks):
        k1 = int.from_bytes(data[i * 16 : i * 16 + 8], "little")
        k2 = int.from_bytes(data[i * 16 + 8 : i * 16 + 16], "little")
        h1 ^= _rotl((k1 * _C1) & _MASK, 31) * _C2 & _MASK
        h1 = (_rotl(h1, 27) + h2) & _MASK
        h1 = (h1 * 5 + 0x52DCE729) & _MASK
        h2 ^= _rotl((k2 * _C2) & _MASK, 33) * _C1 & _MASK
        h2 = (_rotl(h2, 31) + h1) & _MASK
        h2 = (h2 * 5 + 0x38495AB5) & _MASK
    tail = data[blocks * 16 :]
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= _rotl((k2 * _C2) & _MASK, 33) * _C1 & _MASK
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        h1 ^= _rotl((k1 * _C1) & _MASK, 31) * _C2 & _MASK
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    return h1, h2


def _encode_component(value: Any) -> bytes:
    if value is True:
        return b"\x03"
    if value is False:
        return b"\x02"
    if value is None:
        return b"\x01"
    if isinstance(value, dict) and not value:  # the wire's spelling of "no value"
        return b"\x00"
    if isinstance(value, int | float):
        return b"\x05" + struct.pack("<d", float(value))
    if isinstance(value, str):
        # surrogatepass: JSON may carry lone surrogates, which strict UTF-8 cannot encode
        return b"\x08" + value.encode("utf-8", "surrogatepass") + b"\xff"
    raise ValueError(f"unsupported partition key component {value!r}")


def _hash_hex(data: bytes) -> str:
    low, high = murmur3_128(data)
    raw = bytearray(low.to_bytes(8, "little") + high.to_bytes(8, "little"))
    raw.reverse()
    raw[0] &= 0x3F  # keeps every EPK below the exclusive maximum "FF"
    return raw.hex().upper()


def effective_partition_key(values: list[Any], kind: str) -> str:
    """The hash-V2 EPK of a full (or, for MultiHash, prefix) partition key value."""
    if kind == "MultiHash":
        return "".join(_hash_hex(_encode_component(v)) for v in values)
    return _hash_hex(b"".join(_encode_component(v) for v in values))


def in_range(epk: str, start: str, end: str) -> bool:
    return start <= epk and (end == "" or epk < end)
