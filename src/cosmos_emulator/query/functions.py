"""The query language's built-in scalar functions, as Microsoft documents them.

Each takes its already evaluated arguments. As in Cosmos, an argument of the wrong type makes
the result `undefined` (which a projection then omits), never an error; a wrong number of
arguments is a 400 when the query is checked, before anything runs.

Bounds on hostile input (the work per call stays small whatever the arguments):
- strings a function builds are capped like `||`: REPLICATE at Cosmos's documented 10,000
  characters (longer is undefined), CONCAT / REPLACE at MAX_STRING_CHARS (a 400);
- numbers are doubles: POWER, EXP, SQUARE ... that overflow are undefined (never a huge
  integer), and the Int* functions wrap to 64 bits with shifts of 64 or more giving 0 / -1;
- RegexMatch: see `_regex` (pattern length, no shapes that backtrack exponentially, and a work
  bound on polynomial ones).
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import CosmosError, bad_request
from ..untrusted_json import parse_json
from .values import MAX_STRING_CHARS, UNDEFINED, deep_equal, equals, is_number, to_double, type_rank

Fn = Callable[[list[Any]], Any]


@dataclass(frozen=True)
class Builtin:
    fn: Fn
    low: int
    high: int | None  # None: any number of arguments from `low`


FUNCTIONS: dict[str, Builtin] = {}


def check_arity(name: str, count: int) -> None:
    builtin = FUNCTIONS[name]
    if count < builtin.low or (builtin.high is not None and count > builtin.high):
        if builtin.high is None:
            wanted = f"at least {builtin.low}"
        elif builtin.low == builtin.high:
            wanted = str(builtin.low)
        else:
            wanted = f"{builtin.low} to {builtin.high}"
        raise bad_request(
            f"The function {name} takes {wanted} argument(s), and {count} were given."
        )


def _register(name: str, low: int, high: int | None = -1) -> Callable[[Fn], Fn]:
    def add(fn: Fn) -> Fn:
        FUNCTIONS[name] = Builtin(fn, low, low if high == -1 else high)
        return fn

    return add


def _int(value: Any) -> bool:
    return is_number(value) and float(value).is_integer()


# -- type checking ---------------------------------------------------------------------------
def _type_check(name: str, test: Callable[[Any], bool]) -> None:
    FUNCTIONS[name] = Builtin(lambda args: test(args[0]), 1, 1)


_type_check("IS_DEFINED", lambda v: v is not UNDEFINED)
_type_check("IS_NULL", lambda v: v is None)
_type_check("IS_STRING", lambda v: isinstance(v, str))
_type_check("IS_NUMBER", is_number)
_type_check("IS_BOOL", lambda v: isinstance(v, bool))
_type_check("IS_ARRAY", lambda v: isinstance(v, list))
_type_check("IS_OBJECT", lambda v: isinstance(v, dict))
_type_check("IS_PRIMITIVE", lambda v: type_rank(v) in (1, 2, 4, 5))
# Every number this emulator holds is a finite double (non-finite ones are refused on input).
_type_check("IS_FINITE_NUMBER", lambda v: is_number(v) and math.isfinite(v))
# Cosmos: "a 64-bit signed integer". Numbers are kept as JSON gives them, so 2.0 counts too.
_type_check("IS_INTEGER", lambda v: _int(v) and -(2**63) <= v < 2**63)


# -- mathematical ----------------------------------------------------------------------------
def _math(name: str, fn: Callable[..., float], arity: int = 1) -> None:
    def call(args: list[Any]) -> Any:
        if not all(is_number(a) for a in args):
            return UNDEFINED
        try:
            return to_double(fn(*(float(a) for a in args)))
        except (ValueError, OverflowError, ZeroDivisionError):
            return UNDEFINED  # outside the function's domain, or no double holds the result

    FUNCTIONS[name] = Builtin(call, arity, arity)


def _round_half_away(x: float) -> float:
    # Cosmos rounds midpoints away from zero (ROUND(-6.5) = -7), not to even as Python does.
    return math.copysign(math.floor(abs(x) + 0.5), x)


_math("ABS", abs)
_math("CEILING", math.ceil)
_math("FLOOR", math.floor)
_math("ROUND", _round_half_away)
_math("TRUNC", math.trunc)
_math("SIGN", lambda x: (x > 0) - (x < 0))
_math("SQRT", math.sqrt)
_math("SQUARE", lambda x: x * x)
_math("POWER", math.pow, 2)
_math("EXP", math.exp)
_math("LOG10", math.log10)
_math("SIN", math.sin)
_math("COS", math.cos)
_math("TAN", math.tan)
_math("COT", lambda x: 1 / math.tan(x))
_math("ASIN", math.asin)
_math("ACOS", math.acos)
_math("ATAN", math.atan)
# ATN2(x, y) is the angle of the point (x, y): atan2(y, x) (Microsoft's example agrees).
_math("ATN2", lambda x, y: math.atan2(y, x), 2)
_math("DEGREES", math.degrees)
_math("RADIANS", math.radians)


@_register("LOG", 1, 2)
def _log(args: list[Any]) -> Any:
    if not all(is_number(a) for a in args):
        return UNDEFINED
    try:
        value = math.log(args[0]) if len(args) == 1 else math.log(args[0], args[1])
    except (ValueError, ZeroDivisionError):
        return UNDEFINED
    return to_double(value)


@_register("PI", 0)
def _pi(args: list[Any]) -> Any:
    return math.pi


@_register("RAND", 0)
def _rand(args: list[Any]) -> Any:
    return random.random()


@_register("NUMBERBIN", 1, 2)
def _number_bin(args: list[Any]) -> Any:
    value = args[0]
    size = args[1] if len(args) == 2 else 1
    if not is_number(value) or not is_number(size) or size <= 0:
        return UNDEFINED
    try:
        # Rounded to 15 significant digits, as a double's decimal form is: 377 * 0.1 is 37.7.
        return to_double(float(f"{math.floor(value / size) * size:.15g}"))
    except OverflowError:
        return UNDEFINED


_INT64 = 2**64


def _wrap64(value: int) -> int:
    value %= _INT64
    return value - _INT64 if value >= 2**63 else value


def _int_fn(name: str, fn: Callable[[int, int], int | None]) -> None:
    def call(args: list[Any]) -> Any:
        if not all(_int(a) for a in args):
            return UNDEFINED
        result = fn(*(_wrap64(int(a)) for a in args))
        return UNDEFINED if result is None else _wrap64(result)

    FUNCTIONS[name] = Builtin(call, 2, 2)


def _int_div(a: int, b: int) -> int | None:
    if b == 0:
        return None
    quotient = abs(a) // abs(b)  # truncates toward zero, as 64-bit integer division does
    return quotient if (a < 0) == (b < 0) else -quotient


def _int_mod(a: int, b: int) -> int | None:
    quotient = _int_div(a, b)
    return None if quotient is None else a - b * quotient  # the sign of the dividend


def _shift_left(a: int, n: int) -> int | None:
    if n < 0:
        return None
    return 0 if n >= 64 else a << n  # a bounded shift: 1 << 10**9 would allocate 125 MB


def _shift_right(a: int, n: int) -> int | None:
    if n < 0:
        return None
    return (-1 if a < 0 else 0) if n >= 64 else a >> n


_int_fn("INTADD", lambda a, b: a + b)
_int_fn("INTSUB", lambda a, b: a - b)
_int_fn("INTMUL", lambda a, b: a * b)
_int_fn("INTDIV", _int_div)
_int_fn("INTMOD", _int_mod)
_int_fn("INTBITAND", lambda a, b: a & b)
_int_fn("INTBITOR", lambda a, b: a | b)
_int_fn("INTBITXOR", lambda a, b: a ^ b)
_int_fn("INTBITLEFTSHIFT", _shift_left)
_int_fn("INTBITRIGHTSHIFT", _shift_right)


@_register("INTBITNOT", 1)
def _int_bit_not(args: list[Any]) -> Any:
    return _wrap64(~int(args[0])) if _int(args[0]) else UNDEFINED


# -- string ----------------------------------------------------------------------------------
REPLICATE_MAX_CHARS = 10_000  # Cosmos: REPLICATE's result is undefined beyond this


def _capped(length: int, name: str) -> None:
    if length > MAX_STRING_CHARS:
        raise bad_request(f"A string built by {name} exceeds {MAX_STRING_CHARS} characters.")


def _strings(args: list[Any]) -> bool:
    return all(isinstance(a, str) for a in args)


def _ignore_case(args: list[Any], at: int) -> bool | None:
    """The optional boolean at `at`: None when it is there but not a boolean."""
    if len(args) <= at:
        return False
    return args[at] if isinstance(args[at], bool) else None


def _string_test(name: str, test: Callable[[str, str], bool]) -> None:
    def call(args: list[Any]) -> Any:
        ignore_case = _ignore_case(args, 2)
        if not _strings(args[:2]) or ignore_case is None:
            return UNDEFINED
        text, other = args[0], args[1]
        if ignore_case:
            text, other = text.casefold(), other.casefold()
        return test(text, other)

    FUNCTIONS[name] = Builtin(call, 2, 3)


_string_test("STARTSWITH", lambda s, p: s.startswith(p))
_string_test("ENDSWITH", lambda s, p: s.endswith(p))
_string_test("CONTAINS", lambda s, p: p in s)
_string_test("STRINGEQUALS", lambda s, p: s == p)


def _string_fn(name: str, fn: Callable[[str], Any]) -> None:
    FUNCTIONS[name] = Builtin(
        lambda args: fn(args[0]) if isinstance(args[0], str) else UNDEFINED, 1, 1
    )


_string_fn("LOWER", str.lower)
_string_fn("UPPER", str.upper)
_string_fn("LENGTH", len)
_string_fn("REVERSE", lambda s: s[::-1])


def _trim(name: str, strip: Callable[[str, str | None], str]) -> None:
    # Whitespace by default; an optional second argument names the characters to trim.
    def call(args: list[Any]) -> Any:
        if not _strings(args):
            return UNDEFINED
        return strip(args[0], args[1] if len(args) == 2 else None)

    FUNCTIONS[name] = Builtin(call, 1, 2)


_trim("LTRIM", str.lstrip)
_trim("RTRIM", str.rstrip)
_trim("TRIM", str.strip)


@_register("CONCAT", 2, None)
def _concat(args: list[Any]) -> Any:
    if not _strings(args):
        return UNDEFINED
    _capped(sum(len(a) for a in args), "CONCAT")
    return "".join(args)


@_register("INDEX_OF", 2, 3)
def _index_of(args: list[Any]) -> Any:
    if not _strings(args[:2]) or (len(args) == 3 and not _int(args[2])):
        return UNDEFINED
    start = int(args[2]) if len(args) == 3 else 0
    if start < 0 or start > len(args[0]):
        return -1
    return args[0].find(args[1], start)


def _counted(args: list[Any]) -> tuple[str, int] | None:
    if not isinstance(args[0], str) or not is_number(args[1]):
        return None
    return args[0], int(max(0, min(args[1], len(args[0]))))


@_register("LEFT", 2)
def _left(args: list[Any]) -> Any:
    counted = _counted(args)
    return UNDEFINED if counted is None else counted[0][: counted[1]]


@_register("RIGHT", 2)
def _right(args: list[Any]) -> Any:
    counted = _counted(args)
    if counted is None:
        return UNDEFINED
    text, count = counted
    return text[len(text) - min(count, len(text)) :]


@_register("SUBSTRING", 3)
def _substring(args: list[Any]) -> Any:
    text, start, length = args
    if not isinstance(text, str) or not is_number(start) or not is_number(length):
        return UNDEFINED
    first = int(max(0, min(start, len(text))))
    return text[first : first + int(max(0, min(length, len(text))))]


@_register("REPLACE", 3)
def _replace(args: list[Any]) -> Any:
    if not _strings(args):
        return UNDEFINED
    text, old, new = args
    if not old:
        return text  # nothing to find: Python would insert `new` between every character
    _capped(len(text) + text.count(old) * (len(new) - len(old)), "REPLACE")
    return text.replace(old, new)


@_register("REPLICATE", 2)
def _replicate(args: list[Any]) -> Any:
    text, times = args
    if not isinstance(text, str) or not is_number(times) or times < 0:
        return UNDEFINED
    # Checked before building: REPLICATE('x', 1e15) costs nothing.
    if times > REPLICATE_MAX_CHARS or len(text) * int(times) > REPLICATE_MAX_CHARS:
        return UNDEFINED
    return text * int(times)


@_register("TOSTRING", 1)
def _to_string(args: list[Any]) -> Any:
    value = args[0]
    if value is UNDEFINED:
        return UNDEFINED
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _from_json(
    name: str, wanted: Callable[[Any], bool], convert: Callable[[Any], Any] = lambda v: v
) -> None:
    def call(args: list[Any]) -> Any:
        if not isinstance(args[0], str):
            return UNDEFINED
        try:
            # The same bounded decoder as request bodies: depth, size, finite numbers.
            value = parse_json(args[0], name)
        except CosmosError:
            return UNDEFINED
        return convert(value) if wanted(value) else UNDEFINED

    FUNCTIONS[name] = Builtin(call, 1, 1)


_from_json("STRINGTOARRAY", lambda v: isinstance(v, list))
_from_json("STRINGTOBOOLEAN", lambda v: isinstance(v, bool))
_from_json("STRINGTONULL", lambda v: v is None)
# A double printed without a trailing `.0`, like every number a query returns.
_from_json("STRINGTONUMBER", is_number, to_double)
_from_json("STRINGTOOBJECT", lambda v: isinstance(v, dict))


# RegexMatch bounds, chosen here (Cosmos documents none; Python's `re` backtracks and cannot be
# interrupted): a pattern of at most REGEX_MAX_PATTERN characters; no back-references and no
# repeated group that itself repeats, alternates or is optional (the shapes that backtrack
# exponentially, like `(a+)+` or `(a|a)*`), refused with a 400; and a work bound for the
# polynomial rest: a search tries every start, and each unbounded repetition can try every
# length, so the worst case is about len(pattern) * len(subject) ** (repetitions + 1) (one
# less when anchored with `^`). Past REGEX_MAX_WORK (about a quarter of a second) it is a 400
# naming the bound: `\w+@` runs on subjects up to about 2,700 characters, a literal pattern of
# ten characters on 3 million.
REGEX_MAX_PATTERN = 1000
REGEX_MAX_WORK = 3 * 10**7
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
_BACKREFERENCE = re.compile(r"\\(?:[1-9]|k<|g)|\(\?P=")
# Repetitions without a small bound (`*`, `+`, `{n,}`, `{n,m}`), counted on the pattern's
# structure (escapes and classes blanked first).
_QUANTIFIER = re.compile(r"(?<!\\)(?:[*+]|\{\d*,\d*\})")
_OPTIONAL = re.compile(r"(?<!\()\?")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str, modifiers: str) -> tuple[re.Pattern[str], int, int]:
    """The compiled pattern, its length and the exponent of its worst case (see above), or a
    400 saying why not."""
    if len(pattern) > REGEX_MAX_PATTERN:
        raise bad_request(f"RegexMatch: the pattern is longer than {REGEX_MAX_PATTERN} characters.")
    if _BACKREFERENCE.search(pattern):
        raise bad_request("RegexMatch: back-references are not supported by this emulator.")
    flags = 0
    for modifier in modifiers:
        if modifier not in _REGEX_FLAGS:
            raise bad_request(f"RegexMatch: unknown modifier {modifier!r} (use m, s, i or x).")
        flags |= _REGEX_FLAGS[modifier]
    body = _without_classes(pattern)
    _refuse_nested_repetition(body)
    try:
        compiled = re.compile(pattern, flags)
    except (re.error, RecursionError, OverflowError) as err:
        raise bad_request(f"RegexMatch: invalid regular expression ({err}).") from None
    repetitions = len(_QUANTIFIER.findall(body))
    anchored = body.startswith("^") and not flags & re.MULTILINE
    return compiled, len(pattern), (max(1, repetitions) if anchored else repetitions + 1)


def _without_classes(pattern: str) -> str:
    """The pattern with escapes and `[...]` classes blanked, so only its structure is left."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            out.append("e")
            i += 2
            continue
        if char == "[":
            end = i + 1
            if end < n and pattern[end] == "^":
                end += 1
            if end < n and pattern[end] == "]":
                end += 1
            while end < n and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            out.append("e")
            i = end + 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _refuse_nested_repetition(body: str) -> None:
    stack: list[int] = []
    for i, char in enumerate(body):
        if char == "(":
            stack.append(i)
        elif char == ")" and stack:
            start = stack.pop()
            after = body[i + 1 : i + 2]
            repeated = after in ("*", "+", "{")  # `(a?){30}a{30}` backtracks 2**30 ways too
            inner = body[start:i]  # from the "(", so a group's own "(?:" is not an optional
            if repeated and (_QUANTIFIER.search(inner) or "|" in inner or _OPTIONAL.search(inner)):
                raise bad_request(
                    "RegexMatch: a repeated group that itself repeats or alternates (like "
                    "'(a+)+' or '(a|b)*') can backtrack exponentially; this emulator refuses it."
                )


@_register("REGEXMATCH", 2, 3)
def _regex_match(args: list[Any]) -> Any:
    if not _strings(args):
        return UNDEFINED
    compiled, length, exponent = _compiled(args[1], args[2] if len(args) == 3 else "")
    text = args[0]
    if length * max(1, len(text)) ** exponent > REGEX_MAX_WORK:
        raise bad_request(
            f"RegexMatch: the pattern {args[1][:40]!r} on a string of {len(text)} characters "
            f"could backtrack past this emulator's work bound ({REGEX_MAX_WORK:,} steps)."
        )
    return compiled.search(text) is not None


# -- array -----------------------------------------------------------------------------------
@_register("ARRAY_LENGTH", 1)
def _array_length(args: list[Any]) -> Any:
    return len(args[0]) if isinstance(args[0], list) else UNDEFINED


def _contains(array: list[Any], needle: Any, partial: bool) -> bool:
    for item in array:
        if partial and isinstance(item, dict) and isinstance(needle, dict):
            if all(k in item and equals(item[k], v) is True for k, v in needle.items()):
                return True
        elif equals(item, needle) is True:
            return True
    return False


@_register("ARRAY_CONTAINS", 2, 3)
def _array_contains(args: list[Any]) -> Any:
    partial = _ignore_case(args, 2)
    if not isinstance(args[0], list) or partial is None:
        return UNDEFINED
    return _contains(args[0], args[1], partial)


@_register("ARRAY_CONTAINS_ANY", 2, None)
def _array_contains_any(args: list[Any]) -> Any:
    if not isinstance(args[0], list):
        return UNDEFINED
    return any(_contains(args[0], needle, False) for needle in args[1:])


@_register("ARRAY_CONTAINS_ALL", 2, None)
def _array_contains_all(args: list[Any]) -> Any:
    if not isinstance(args[0], list):
        return UNDEFINED
    return all(_contains(args[0], needle, False) for needle in args[1:])


@_register("ARRAY_CONCAT", 2, None)
def _array_concat(args: list[Any]) -> Any:
    if not all(isinstance(a, list) for a in args):
        return UNDEFINED
    return [item for array in args for item in array]


@_register("ARRAY_SLICE", 2, 3)
def _array_slice(args: list[Any]) -> Any:
    array, start = args[0], args[1]
    if not isinstance(array, list) or not _int(start):
        return UNDEFINED
    if len(args) == 3 and not _int(args[2]):
        return UNDEFINED
    first = int(start)
    if first < 0:
        first = max(0, len(array) + first)
    if len(args) == 2:
        return array[first:]
    length = int(args[2])
    return array[first : first + length] if length > 0 else []


def _distinct(values: list[Any]) -> list[Any]:
    unique: list[Any] = []
    for value in values:
        if not any(deep_equal(value, seen) for seen in unique):
            unique.append(value)
    return unique


@_register("SETINTERSECT", 2)
def _set_intersect(args: list[Any]) -> Any:
    first, second = args
    if not isinstance(first, list) or not isinstance(second, list):
        return UNDEFINED
    return _distinct([v for v in first if any(deep_equal(v, w) for w in second)])


@_register("SETUNION", 2)
def _set_union(args: list[Any]) -> Any:
    if not isinstance(args[0], list) or not isinstance(args[1], list):
        return UNDEFINED
    return _distinct(args[0] + args[1])


# -- date and time ---------------------------------------------------------------------------
# Cosmos date-times are ISO 8601 UTC strings, `YYYY-MM-DDThh:mm:ss.fffffffZ`, to 100 ns ticks;
# they are handled here as integer ticks since the Unix epoch, so no precision is lost.
TICKS_PER_SECOND = 10_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,7}))?)?)?Z?", re.ASCII
)
_PARTS = {
    "year": "year", "yyyy": "year", "yy": "year",
    "month": "month", "mm": "month", "m": "month",
    "day": "day", "dd": "day", "d": "day",
    "hour": "hour", "hh": "hour",
    "minute": "minute", "mi": "minute", "n": "minute",
    "second": "second", "ss": "second", "s": "second",
    "millisecond": "millisecond", "ms": "millisecond",
    "microsecond": "microsecond", "mcs": "microsecond",
    "nanosecond": "nanosecond", "ns": "nanosecond",
}  # fmt: skip
_TICKS = {
    "day": 86_400 * TICKS_PER_SECOND,
    "hour": 3_600 * TICKS_PER_SECOND,
    "minute": 60 * TICKS_PER_SECOND,
    "second": TICKS_PER_SECOND,
    "millisecond": 10_000,
    "microsecond": 10,
    "nanosecond": 1,  # 100 ns is the finest a tick holds; a nanosecond count is ticks * 100
}


def _ticks(text: Any) -> int | None:
    """Ticks since the epoch of an ISO 8601 UTC date-time string, or None if it is not one."""
    if not isinstance(text, str):
        return None
    match = _DATETIME.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        when = datetime(
            int(year), int(month), int(day), int(hour or 0), int(minute or 0),
            int(second or 0), tzinfo=UTC,
        )  # fmt: skip
    except ValueError:
        return None
    whole = (when - _EPOCH) // timedelta(seconds=1)
    return whole * TICKS_PER_SECOND + int((fraction or "0").ljust(7, "0"))


def _format(ticks: int) -> Any:
    seconds, fraction = divmod(ticks, TICKS_PER_SECOND)
    try:
        when = _EPOCH + timedelta(seconds=seconds)
    except OverflowError:
        return UNDEFINED
    if not 1 <= when.year <= 9999:
        return UNDEFINED
    return f"{when:%Y-%m-%dT%H:%M:%S}.{fraction:07d}Z"


def _when(ticks: int) -> datetime:
    return _EPOCH + timedelta(seconds=ticks // TICKS_PER_SECOND)


def _part(raw: Any) -> str | None:
    return _PARTS.get(raw.lower()) if isinstance(raw, str) else None


def _now_ticks() -> int:
    return time.time_ns() // 100


@_register("GETCURRENTDATETIME", 0)
def _current_date_time(args: list[Any]) -> Any:
    return _format(_now_ticks())


@_register("GETCURRENTTICKS", 0)
def _current_ticks(args: list[Any]) -> Any:
    return _now_ticks()


@_register("GETCURRENTTIMESTAMP", 0)
def _current_timestamp(args: list[Any]) -> Any:
    # The server's clock, in milliseconds since the epoch: what lets a client judge a lease by
    # the database's time rather than its own.
    return time.time_ns() // 1_000_000


# The *Static forms return one value for the whole query in Cosmos; a query here runs at one
# instant anyway, so they share the functions above.
FUNCTIONS["GETCURRENTDATETIMESTATIC"] = FUNCTIONS["GETCURRENTDATETIME"]
FUNCTIONS["GETCURRENTTICKSSTATIC"] = FUNCTIONS["GETCURRENTTICKS"]
FUNCTIONS["GETCURRENTTIMESTAMPSTATIC"] = FUNCTIONS["GETCURRENTTIMESTAMP"]


def _add_months(ticks: int, months: int) -> int | None:
    when = _when(ticks)
    index = when.year * 12 + when.month - 1 + months
    year, month = divmod(index, 12)
    if not 1 <= year <= 9999:
        return None
    # The day is clamped to the new month's length (Jan 31 + 1 month = Feb 28 / 29), as .NET.
    next_month = datetime(year + (month == 11), (month + 1) % 12 + 1, 1, tzinfo=UTC)
    last_day = (next_month - timedelta(days=1)).day
    moved = when.replace(year=year, month=month + 1, day=min(when.day, last_day))
    return ticks + ((moved - when) // timedelta(seconds=1)) * TICKS_PER_SECOND


@_register("DATETIMEADD", 3)
def _date_time_add(args: list[Any]) -> Any:
    part, amount, ticks = _part(args[0]), args[1], _ticks(args[2])
    if part is None or not is_number(amount) or ticks is None or abs(amount) > 1e15:
        return UNDEFINED
    count = int(amount)
    if part in ("year", "month"):
        moved = _add_months(ticks, count * (12 if part == "year" else 1))
        return UNDEFINED if moved is None else _format(moved)
    if part == "nanosecond":
        return _format(ticks + count // 100)
    return _format(ticks + count * _TICKS[part])


def _truncated(ticks: int, part: str) -> int:
    """Whole `part`s since the epoch (months and years by the calendar)."""
    if part in ("year", "month"):
        when = _when(ticks)
        return when.year if part == "year" else when.year * 12 + when.month
    return ticks // _TICKS[part]


@_register("DATETIMEDIFF", 3)
def _date_time_diff(args: list[Any]) -> Any:
    # Counts the part's boundaries crossed from start to end, as Microsoft's examples show
    # (2019-02-04 to 2020-07-09: 1 year, 17 months).
    part, start, end = _part(args[0]), _ticks(args[1]), _ticks(args[2])
    if part is None or start is None or end is None:
        return UNDEFINED
    if part == "nanosecond":
        return (end - start) * 100
    return _truncated(end, part) - _truncated(start, part)


@_register("DATETIMEPART", 2)
def _date_time_part(args: list[Any]) -> Any:
    part, ticks = _part(args[0]), _ticks(args[1])
    if part is None or ticks is None:
        return UNDEFINED
    when = _when(ticks)
    fraction = ticks % TICKS_PER_SECOND
    values = {
        "year": when.year,
        "month": when.month,
        "day": when.day,
        "hour": when.hour,
        "minute": when.minute,
        "second": when.second,
        "millisecond": fraction // 10_000,
        "microsecond": fraction // 10,
        "nanosecond": fraction * 100,
    }
    return values[part]


@_register("DATETIMEFROMPARTS", 3, 7)
def _date_time_from_parts(args: list[Any]) -> Any:
    if not all(_int(a) for a in args) or not all(abs(a) < 10**10 for a in args):
        return UNDEFINED
    year, month, day, hour, minute, second, fraction = [int(a) for a in args] + [0] * (
        7 - len(args)
    )
    if not 0 <= fraction < TICKS_PER_SECOND:
        return UNDEFINED
    try:
        when = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return UNDEFINED
    return _format(((when - _EPOCH) // timedelta(seconds=1)) * TICKS_PER_SECOND + fraction)


@_register("DATETIMETOTICKS", 1)
def _date_time_to_ticks(args: list[Any]) -> Any:
    ticks = _ticks(args[0])
    return UNDEFINED if ticks is None else ticks


@_register("DATETIMETOTIMESTAMP", 1)
def _date_time_to_timestamp(args: list[Any]) -> Any:
    ticks = _ticks(args[0])
    return UNDEFINED if ticks is None else ticks // 10_000


@_register("TICKSTODATETIME", 1)
def _ticks_to_date_time(args: list[Any]) -> Any:
    return _format(int(args[0])) if _int(args[0]) and abs(args[0]) < 2**63 else UNDEFINED


@_register("TIMESTAMPTODATETIME", 1)
def _timestamp_to_date_time(args: list[Any]) -> Any:
    if not _int(args[0]) or abs(args[0]) >= 2**53:
        return UNDEFINED
    return _format(int(args[0]) * 10_000)


@_register("DATETIMEBIN", 2, 4)
def _date_time_bin(args: list[Any]) -> Any:
    ticks, part = _ticks(args[0]), _part(args[1])
    size = args[2] if len(args) >= 3 else 1
    origin = _ticks(args[3]) if len(args) == 4 else 0
    if ticks is None or part is None or origin is None or not _int(size) or size <= 0:
        return UNDEFINED
    if part in ("year", "month"):
        return UNDEFINED  # Cosmos bins by fixed-length parts only
    width = _TICKS[part] * int(size) // (100 if part == "nanosecond" else 1)
    if width <= 0:
        return UNDEFINED
    return _format(origin + (ticks - origin) // width * width)
