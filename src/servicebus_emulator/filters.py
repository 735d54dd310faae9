"""Subscription rules: SQL and correlation filters, and SQL rule actions.

The SQL subset is the documented one (comparisons, AND / OR / NOT, IN, LIKE [ESCAPE],
IS [NOT] NULL, EXISTS, arithmetic, string / number / boolean / NULL constants) over user and
system properties. Everything else (functions such as `newid()`, unknown system properties,
system properties this emulator does not track) is refused when the config is loaded, so a
rule never fails while a message is routed. A missing user property is an unknown value:
comparisons with it are unknown, and an unknown predicate does not select the message.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .codec import DecodeError, decode_value


class FilterError(ValueError):
    """A filter or action expression outside the supported subset (a config error)."""


# System properties this emulator can evaluate: name (lower case) -> AMQP properties index.
SYSTEM_PROPERTIES = {
    "messageid": 0,
    "to": 2,
    "label": 3,
    "subject": 3,
    "replyto": 4,
    "correlationid": 5,
    "contenttype": 6,
    "sessionid": 10,
    "replytosessionid": 12,
}
# Documented system properties that are refused with a clear message.
_UNTRACKED_SYSTEM = {
    "contentencoding",
    "deliverycount",
    "enqueuedsequencenumber",
    "enqueuedtimeutc",
    "expiresatutc",
    "lockeduntilutc",
    "locktoken",
    "partitionkey",
    "scheduledenqueuetimeutc",
    "sequencenumber",
    "size",
    "state",
    "timetolive",
    "viapartitionkey",
}

CORRELATION_FIELDS = {
    "ContentType": 6,
    "CorrelationId": 5,
    "Label": 3,
    "MessageId": 0,
    "ReplyTo": 4,
    "ReplyToSessionId": 12,
    "SessionId": 10,
    "To": 2,
}


class MessageView:
    """What a filter reads from a message: system properties and user properties."""

    __slots__ = ("_properties", "user")

    def __init__(self, properties: list[Any], app_raw: bytes, app_count: int) -> None:
        self._properties = properties
        self.user: dict[str, Any] = {}
        pos = 0
        try:
            for _ in range(app_count // 2):
                key, pos = decode_value(app_raw, pos)
                value, pos = decode_value(app_raw, pos)
                self.user[str(key)] = value
        except DecodeError:  # parse_message walked these bytes already; never expected
            self.user = {}

    def system(self, index: int) -> Any:
        props = self._properties
        value = props[index] if index < len(props) else None
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, uuid.UUID | int):
            return str(value)
        return value


# ---------------------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<string>'(?:[^']|'')*')
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<delimited>\[[^\]]*\])
    |(?P<quoted>"[^"]*")
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op><>|!=|>=|<=|[=<>(),+\-*/%.;])
    )""",
    re.VERBOSE,
)
_KEYWORDS = {
    "and",
    "or",
    "not",
    "is",
    "null",
    "in",
    "like",
    "escape",
    "exists",
    "true",
    "false",
    "set",
    "remove",
}


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # string, number, name, keyword, op, end
    text: str
    value: Any = None


def _tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise FilterError(f"unexpected character {text[pos:].lstrip()[:1]!r} in {text!r}")
        pos = match.end()
        kind = match.lastgroup or ""
        raw = match.group(kind)
        if kind == "string":
            tokens.append(_Tok("string", raw, raw[1:-1].replace("''", "'")))
        elif kind == "number":
            is_float = any(c in raw for c in ".eE")
            tokens.append(_Tok("number", raw, float(raw) if is_float else int(raw)))
        elif kind in ("delimited", "quoted"):
            tokens.append(_Tok("name", raw, raw[1:-1]))
        elif kind == "name":
            if raw.lower() in _KEYWORDS:
                tokens.append(_Tok("keyword", raw.lower()))
            else:
                tokens.append(_Tok("name", raw, raw))
        else:
            tokens.append(_Tok("op", raw))
    tokens.append(_Tok("end", ""))
    return tokens


# ---------------------------------------------------------------------------- expressions

Expr = Callable[[MessageView], Any]
_UNKNOWN = None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(op: str, left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return _UNKNOWN
    if _number(left) and _number(right):
        pass
    elif type(left) is not type(right) and not (isinstance(left, str) and isinstance(right, str)):
        return _UNKNOWN
    if isinstance(left, bool) and op not in ("=", "<>", "!="):
        return _UNKNOWN
    if op == "=":
        return bool(left == right)
    if op in ("<>", "!="):
        return bool(left != right)
    if op == ">":
        return bool(left > right)
    if op == ">=":
        return bool(left >= right)
    if op == "<":
        return bool(left < right)
    return bool(left <= right)


def _arith(op: str, left: Any, right: Any) -> Any:
    if not (_number(left) and _number(right)):
        return _UNKNOWN
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if right == 0:
        return _UNKNOWN
    if op == "/":
        return left // right if isinstance(left, int) and isinstance(right, int) else left / right
    return left % right


def _not(value: Any) -> bool | None:
    return None if value is None else not value


def _and(left: Any, right: Any) -> bool | None:
    if left is False or right is False:
        return False
    if left is None or right is None:
        return None
    return True


def _or(left: Any, right: Any) -> bool | None:
    if left is True or right is True:
        return True
    if left is None or right is None:
        return None
    return False


def _like_tokens(pattern: str, escape: str | None) -> list[str | None]:
    """The pattern as characters to match; None for `%`, "" for `_`."""
    tokens: list[str | None] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape and i + 1 < len(pattern):
            tokens.append(pattern[i + 1])
            i += 2
            continue
        tokens.append(None if ch == "%" else "" if ch == "_" else ch)
        i += 1
    return tokens


def _like(value: str, tokens: list[str | None]) -> bool:
    """Wildcard match in O(len(value) * len(tokens)) at worst: a regex could backtrack
    exponentially on a hostile message value."""
    v = t = 0
    star_t, star_v = -1, 0
    while v < len(value):
        if t < len(tokens) and tokens[t] is not None and tokens[t] in ("", value[v]):
            v += 1
            t += 1
        elif t < len(tokens) and tokens[t] is None:
            star_t, star_v = t, v
            t += 1
        elif star_t >= 0:
            star_v += 1
            v, t = star_v, star_t + 1
        else:
            return False
    while t < len(tokens) and tokens[t] is None:
        t += 1
    return t == len(tokens)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    # helpers
    def peek(self, offset: int = 0) -> _Tok:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def next(self) -> _Tok:
        tok = self.peek()
        self.pos += 1
        return tok

    def accept(self, kind: str, text: str) -> bool:
        tok = self.peek()
        if tok.kind == kind and tok.text == text:
            self.pos += 1
            return True
        return False

    def expect(self, kind: str, text: str) -> None:
        if not self.accept(kind, text):
            raise self.error(f"expected {text!r}")

    def error(self, what: str) -> FilterError:
        tok = self.peek()
        found = "the end" if tok.kind == "end" else repr(tok.text)
        return FilterError(f"{what} at {found} in {self.text!r}")

    def end(self) -> None:
        if self.peek().kind != "end":
            raise self.error("unexpected input")

    # predicates
    def predicate(self) -> Expr:
        left = self.conjunction()
        while self.accept("keyword", "or"):
            right = self.conjunction()
            left = (lambda a, b: lambda m: _or(a(m), b(m)))(left, right)
        return left

    def conjunction(self) -> Expr:
        left = self.negation()
        while self.accept("keyword", "and"):
            right = self.negation()
            left = (lambda a, b: lambda m: _and(a(m), b(m)))(left, right)
        return left

    def negation(self) -> Expr:
        if self.accept("keyword", "not"):
            inner = self.negation()
            return lambda m: _not(inner(m))
        return self.comparison()

    def comparison(self) -> Expr:
        if self.accept("keyword", "exists"):
            self.expect("op", "(")
            getter = self.property_reference()
            self.expect("op", ")")
            return lambda m: getter(m) is not None or (getattr(getter, "user_name", None) in m.user)
        left = self.expression()
        tok = self.peek()
        if tok.kind == "op" and tok.text in ("=", "<>", "!=", ">", ">=", "<", "<="):
            self.pos += 1
            right = self.expression()
            op = tok.text
            return lambda m: _compare(op, left(m), right(m))
        if self.accept("keyword", "is"):
            negate = self.accept("keyword", "not")
            self.expect("keyword", "null")
            if negate:
                return lambda m: left(m) is not None
            return lambda m: left(m) is None
        negate = self.accept("keyword", "not")
        if self.accept("keyword", "in"):
            self.expect("op", "(")
            options = [self.expression()]
            while self.accept("op", ","):
                options.append(self.expression())
            self.expect("op", ")")

            def is_in(m: MessageView) -> bool | None:
                value = left(m)
                if value is None:
                    return None
                return any(_compare("=", value, option(m)) for option in options)

            return (lambda m: _not(is_in(m))) if negate else is_in
        if self.accept("keyword", "like"):
            pattern = self.expression()
            escape: Expr | None = None
            if self.accept("keyword", "escape"):
                escape = self.expression()

            def like(m: MessageView) -> bool | None:
                value, text = left(m), pattern(m)
                esc = escape(m) if escape is not None else None
                if not isinstance(value, str) or not isinstance(text, str):
                    return None
                if esc is not None and (not isinstance(esc, str) or len(esc) != 1):
                    return None
                return _like(value, _like_tokens(text, esc))

            return (lambda m: _not(like(m))) if negate else like
        if negate:
            raise self.error("expected IN or LIKE after NOT")
        return left  # a bare boolean expression (a property holding a boolean, TRUE)

    # expressions
    def expression(self) -> Expr:
        left = self.term()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.next().text
            right = self.term()
            left = (lambda a, b, o: lambda m: _arith(o, a(m), b(m)))(left, right, op)
        return left

    def term(self) -> Expr:
        left = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "%"):
            op = self.next().text
            right = self.unary()
            left = (lambda a, b, o: lambda m: _arith(o, a(m), b(m)))(left, right, op)
        return left

    def unary(self) -> Expr:
        if self.accept("op", "-"):
            inner = self.unary()
            return lambda m: _arith("-", 0, inner(m))
        if self.accept("op", "+"):
            inner = self.unary()
            return lambda m: _arith("+", 0, inner(m))
        return self.primary()

    def primary(self) -> Expr:
        tok = self.peek()
        if self.accept("op", "("):
            inner = self.predicate()
            self.expect("op", ")")
            return inner
        if tok.kind in ("string", "number"):
            self.pos += 1
            value = tok.value
            return lambda m: value
        if tok.kind == "keyword" and tok.text in ("true", "false", "null"):
            self.pos += 1
            constant = {"true": True, "false": False, "null": None}[tok.text]
            return lambda m: constant
        if tok.kind == "name":
            return self.property_reference()
        raise self.error("expected a value or a property")

    def property_reference(self) -> Expr:
        scope, name = self.property_name()
        if scope == "sys":
            index = SYSTEM_PROPERTIES[name.lower()]
            return lambda m: m.system(index)

        def user(m: MessageView) -> Any:
            return m.user.get(name)

        user.user_name = name  # type: ignore[attr-defined]
        return user

    def property_name(self) -> tuple[str, str]:
        tok = self.next()
        if tok.kind != "name":
            self.pos -= 1
            raise self.error("expected a property name")
        scope = "user"
        name = str(tok.value)
        if self.peek(0).kind == "op" and self.peek(0).text == "(":
            raise FilterError(
                f"function {name}() is not supported by this emulator in {self.text!r}"
            )
        if name.lower() in ("sys", "user") and self.accept("op", "."):
            scope = name.lower()
            part = self.next()
            if part.kind not in ("name", "keyword"):
                self.pos -= 1
                raise self.error("expected a property name")
            name = str(part.value if part.kind == "name" else part.text)
        if scope == "sys":
            lowered = name.lower()
            if lowered in _UNTRACKED_SYSTEM:
                raise FilterError(
                    f"system property sys.{name} is not supported by this emulator in {self.text!r}"
                )
            if lowered not in SYSTEM_PROPERTIES:
                raise FilterError(f"unknown system property sys.{name} in {self.text!r}")
        return scope, name


def compile_sql_filter(expression: Any) -> Callable[[MessageView], bool]:
    """A SQL filter expression as a predicate; FilterError for anything outside the subset."""
    if not isinstance(expression, str) or not expression.strip():
        raise FilterError("a SQL filter needs a non-empty SqlExpression")
    parser = _Parser(expression)
    try:
        predicate = parser.predicate()
    except RecursionError:
        raise FilterError(f"the expression is nested too deeply: {expression[:80]!r}") from None
    parser.end()
    return lambda m: predicate(m) is True


# ---------------------------------------------------------------------------- actions

Action = Callable[[MessageView], tuple[dict[str, Any], list[str]]]


def compile_sql_action(expression: Any) -> Action:
    """`SET name = expression` and `REMOVE name` statements (separated by `;`) on user
    properties; returns (properties to set, properties to remove) for a message."""
    if not isinstance(expression, str) or not expression.strip():
        raise FilterError("a SQL action needs a non-empty SqlExpression")
    parser = _Parser(expression)
    statements: list[tuple[str, str, Expr | None]] = []
    while True:
        if parser.accept("keyword", "set"):
            scope, name = parser.property_name()
            if scope == "sys":
                raise FilterError(
                    f"SET on system property sys.{name} is not supported by this emulator "
                    f"in {expression!r}"
                )
            parser.expect("op", "=")
            statements.append(("set", name, parser.expression()))
        elif parser.accept("keyword", "remove"):
            scope, name = parser.property_name()
            if scope == "sys":
                raise FilterError(f"cannot REMOVE system property sys.{name} in {expression!r}")
            statements.append(("remove", name, None))
        else:
            raise parser.error("expected SET or REMOVE")
        if not parser.accept("op", ";") or parser.peek().kind == "end":
            break
    parser.end()

    def apply(m: MessageView) -> tuple[dict[str, Any], list[str]]:
        updates: dict[str, Any] = {}
        removed: list[str] = []
        for kind, name, value in statements:
            if kind == "set" and value is not None:
                updates[name] = value(m)
                if name in removed:
                    removed.remove(name)
            else:
                updates.pop(name, None)
                removed.append(name)
        return updates, removed

    return apply


# ---------------------------------------------------------------------------- correlation


def compile_correlation_filter(spec: dict[str, Any]) -> Callable[[MessageView], bool]:
    """Every given field equals the message's (exact, case-sensitive); Properties compare user
    properties by value."""
    system: list[tuple[int, str]] = []
    for key, value in spec.items():
        if key == "Properties":
            continue
        if key not in CORRELATION_FIELDS:
            raise FilterError(f"unknown CorrelationFilter field {key!r}")
        if not isinstance(value, str):
            raise FilterError(f"CorrelationFilter {key} must be a string")
        system.append((CORRELATION_FIELDS[key], value))
    user = spec.get("Properties", {})
    if not isinstance(user, dict):
        raise FilterError("CorrelationFilter Properties must be an object")
    for key, value in user.items():
        if not isinstance(value, str | int | float | bool):
            raise FilterError(
                f"CorrelationFilter property {key!r} must be a string, number or bool"
            )
    if not system and not user:
        raise FilterError("a CorrelationFilter needs at least one field")
    expected_user = dict(user)

    def matches(m: MessageView) -> bool:
        for index, value in system:
            if m.system(index) != value:
                return False
        for key, value in expected_user.items():
            if key not in m.user or _compare("=", m.user[key], value) is not True:
                return False
        return True

    return matches


__all__ = [
    "FilterError",
    "MessageView",
    "compile_correlation_filter",
    "compile_sql_action",
    "compile_sql_filter",
]
