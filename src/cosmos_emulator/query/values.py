"""JSON values as Cosmos SQL sees them: `undefined`, type ordering and comparison."""

from __future__ import annotations

import math
from typing import Any, Final

# No stored item holds a longer string (2 MB limit), so no query needs to build one.
MAX_STRING_CHARS = 2 * 1024 * 1024


class _Undefined:
    """A missing property: distinct from JSON null and dropped from projections."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "undefined"

    def __bool__(self) -> bool:
        return False


UNDEFINED: Final = _Undefined()


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def type_rank(value: Any) -> int:
    """Cross-type sort order of ORDER BY, the same ranks the SDK merges with."""
    if value is UNDEFINED:
        return 0
    if value is None:
        return 1
    if isinstance(value, bool):
        return 2
    if is_number(value):
        return 4
    if isinstance(value, str):
        return 5
    if isinstance(value, list):
        return 6
    return 7


def same_kind(a: Any, b: Any) -> bool:
    return type_rank(a) == type_rank(b)


def equals(a: Any, b: Any) -> Any:
    """`=`: undefined when either side is undefined, false across types."""
    if a is UNDEFINED or b is UNDEFINED:
        return UNDEFINED
    return deep_equal(a, b)


def deep_equal(a: Any, b: Any) -> bool:
    """JSON equality without Python's `1 == True` (Cosmos never equates a bool and a number)."""
    if not same_kind(a, b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def compare(a: Any, b: Any) -> int | None:
    """`<`, `>` ...: only numbers, strings and booleans of one kind compare (else undefined)."""
    if a is UNDEFINED or b is UNDEFINED or not same_kind(a, b):
        return None
    if a is None:
        return 0
    if isinstance(a, bool | str) or is_number(a):
        return int((a > b) - (a < b))
    return None


def order_key(value: Any) -> tuple[int, Any]:
    """A total order for ORDER BY: by type rank, then by value within scalar types."""
    rank = type_rank(value)
    if rank in (2, 4, 5):
        return (rank, value)
    return (rank, 0)


def to_double(value: int | float) -> Any:
    """`value` as Cosmos holds it: integers beyond 2**53 become doubles; inf is undefined."""
    if isinstance(value, int):
        if abs(value) <= 2**53:
            return value
        try:
            value = float(value)
        except OverflowError:  # past the largest double
            return UNDEFINED
    if not math.isfinite(value):
        return UNDEFINED
    return tidy(value)


def tidy(value: float | int) -> float | int:
    """Cosmos numbers are doubles printed without a trailing `.0` when integral."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value
