"""Decoding untrusted JSON bytes: total (every failure is `UntrustedJsonError`) and bounded.

Python's `json` is linear in the input, except in three places this module closes:
integer literals (`int()` of a long digit string is quadratic, and over 4300 digits it raises
`ValueError`), nesting (about 1000 levels raise `RecursionError`) and the non-JSON constants
`NaN` / `Infinity` it accepts by default. Floats are kept as `Decimal` so amounts stay exact;
a huge exponent costs nothing until something turns it into an int, which validation never does.
Duplicate object keys keep the last value, as `JSON.parse` does; nothing downstream reads the raw
bytes again, so every reader of the message sees the same value.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

# No field of ours needs more; a longer literal can only be an attack or a bug.
MAX_INTEGER_DIGITS = 40


class UntrustedJsonError(ValueError):
    """The bytes are not a JSON document we accept; the message says why."""


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise UntrustedJsonError(
            f"an integer literal has {len(literal.lstrip('-'))} digits; "
            f"at most {MAX_INTEGER_DIGITS} are accepted"
        )
    return int(literal)


def _refuse_constant(name: str) -> Any:
    raise UntrustedJsonError(f"{name} is not JSON")


def decode_untrusted_json(body: bytes) -> Any:
    """The JSON value of `body` (strict UTF-8), or `UntrustedJsonError` with the reason."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedJsonError(f"body is not UTF-8: {exc}") from None
    try:
        return json.loads(
            text,
            parse_float=Decimal,
            parse_int=_bounded_int,
            parse_constant=_refuse_constant,
        )
    except UntrustedJsonError:
        raise
    except RecursionError:
        raise UntrustedJsonError("body is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise UntrustedJsonError(f"body is not JSON: {exc}") from None
    except Exception as exc:
        # Total by rule: whatever the decoder raises on hostile bytes is a rejection.
        raise UntrustedJsonError(f"body is not JSON: {type(exc).__name__}: {exc}") from None
