"""JSON a client sent, decoded so that every way it can be wrong is a 400 naming the reason.

Cosmos stores JSON whose numbers are finite IEEE 754 doubles and whose objects and arrays nest
at most 128 deep. Python's `json` accepts `NaN`, `Infinity` and `1e400` (as inf), recurses
until `RecursionError` on deep nesting and refuses integers over 4300 digits with a bare
`ValueError`; here each of those is refused up front, cheaply, before anything else runs.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

from .errors import CosmosError, bad_request

MAX_JSON_DEPTH = 128  # Cosmos: "maximum level of nesting for embedded objects / arrays"
# A run of this many digits can be an integer too large for a double (1.8e308 has 309).
_LONG_DIGIT_RUN = re.compile(r"(?<![0-9])[0-9]{309}")
_DOUBLE_LIMIT = 2**1024  # an integer this large or larger overflows a double
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")
_STEP = [0] * 256
_STEP[0x01], _STEP[0xFF] = 1, -1


class _Refused(Exception):
    """Raised from inside the decoder's hooks, which must not look like a syntax error."""


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number (Cosmos numbers are finite doubles)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is outside the range of a double")
    return value


def parse_json(raw: bytes | str, what: str) -> Any:
    """`raw` decoded; CosmosError 400 '<what> ...' for bad UTF-8, bad JSON or out-of-range."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise bad_request(f"{what} is not UTF-8 ({exc.reason} at byte {exc.start}).") from None
    try:
        value = json.loads(
            text,
            parse_float=_finite_float,
            parse_constant=_no_constant,
        )
    except _Refused as exc:
        raise bad_request(f"{what} is not valid Cosmos JSON: {exc}.") from None
    except json.JSONDecodeError as exc:
        raise bad_request(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None
    except RecursionError:
        raise _too_deep(what) from None
    except ValueError as exc:  # an integer literal over Python's 4300-digit limit
        raise bad_request(f"{what} holds a number outside the range of a double ({exc}).") from None
    check_depth(value, text, what)
    if _LONG_DIGIT_RUN.search(text):  # rare: only then are the integers worth a walk
        _check_integers(value, what)
    return value


def check_depth(value: Any, text: str, what: str) -> None:
    """400 when objects and arrays nest deeper than Cosmos allows; `text` is value's JSON.

    Measured on the text, not by walking the objects: strings removed, then the running
    bracket balance in C (itertools), which costs less than decoding the same text did.
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return  # too few brackets to nest too deep: the usual case costs two C scans
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).encode("ascii")
    steps = map(_STEP.__getitem__, brackets.translate(_BRACKET_STEPS))
    if max(itertools.accumulate(steps), default=0) > MAX_JSON_DEPTH:
        raise _too_deep(what)


def _check_integers(value: Any, what: str) -> None:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, int) and abs(node) >= _DOUBLE_LIMIT:
            raise bad_request(f"{what} holds an integer outside the range of a double.")


def check_document(doc: Any, what: str) -> str:
    """The compact JSON of `doc` built in memory (e.g. by a patch), checked like input.

    Non-ASCII characters stay as they are (not `\\uXXXX`), so the UTF-8 encoding of the text
    is the item's size as Cosmos counts it."""
    try:
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except ValueError:
        raise bad_request(f"{what} would hold a number outside the range of a double.") from None
    except RecursionError:
        raise _too_deep(what) from None
    check_depth(doc, text, what)
    return text


def dump_json(payload: Any) -> bytes:
    """What the emulator sends: always valid JSON (a NaN here is an emulator bug, said loudly)."""
    return json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()


def _too_deep(what: str) -> CosmosError:
    return bad_request(
        f"{what} nests objects or arrays more than {MAX_JSON_DEPTH} levels deep (the Cosmos limit)."
    )
