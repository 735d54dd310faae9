"""Tokens of Cosmos SQL."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import bad_request

KEYWORDS = frozenset(
    {
        "SELECT",
        "DISTINCT",
        "TOP",
        "VALUE",
        "AS",
        "FROM",
        "WHERE",
        "AND",
        "OR",
        "NOT",
        "IN",
        "BETWEEN",
        "ORDER",
        "BY",
        "ASC",
        "DESC",
        "OFFSET",
        "LIMIT",
        "TRUE",
        "FALSE",
        "NULL",
        "UNDEFINED",
        "JOIN",
        "GROUP",
        "EXISTS",
        "ARRAY",
        "LIKE",
        "ESCAPE",
        "HAVING",
    }
)
_PUNCT = (
    "!=",
    "<>",
    "<=",
    ">=",
    "||",
    "??",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ".",
    ":",
    "*",
    "+",
    "-",
    "/",
    "%",
    "=",
    "<",
    ">",
    "?",
)


@dataclass(frozen=True)
class Token:
    kind: str  # KW, IDENT, NUM, STR, PARAM, PUNCT, EOF
    text: str
    value: object = None
    pos: int = 0


# One pattern for every token, so the scan runs in C and a long query costs little per char.
_SCANNER = re.compile(
    r"""
    (?P<space>\s+|--[^\n]*)
    |(?P<word>[^\W\d]\w*)
    |(?P<param>@\w*)
    |(?P<number>\d(?:[\d.]|[eE][+-]?)*)
    |(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    |(?P<punct>"""
    + "|".join(re.escape(p) for p in _PUNCT)
    + r""")
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPE = re.compile(r"\\(?:u(?P<hex>[0-9A-Fa-f]{4})|(?P<char>.))", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
# A literal longer than this cannot be a finite double (1.8e308 has 309 digits) anyway.
_MAX_NUMBER_CHARS = 400
_DOUBLE_LIMIT = 2**1024


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(text)
    scan = _SCANNER.match
    while i < n:
        match = scan(text, i)
        if match is None:
            if text[i] in "'\"":
                raise bad_request("Syntax error, unclosed string literal.")
            raise bad_request(f"Syntax error, unexpected character {text[i]!r} at {i}.")
        kind = match.lastgroup
        raw = match.group()
        if kind == "word":
            upper = raw.upper()
            tokens.append(Token("KW" if upper in KEYWORDS else "IDENT", raw, upper, i))
        elif kind == "param":
            if raw == "@":
                raise bad_request(f"Syntax error, incorrect syntax near '@' at {i}.")
            tokens.append(Token("PARAM", raw, raw, i))
        elif kind == "number":
            tokens.append(Token("NUM", raw, _number(raw), i))
        elif kind == "string":
            tokens.append(Token("STR", raw, _unescape(raw[1:-1]), i))
        elif kind == "punct":
            tokens.append(Token("PUNCT", raw, raw, i))
        i = match.end()
    tokens.append(Token("EOF", "", None, n))
    return tokens


def _number(raw: str) -> int | float:
    """A numeric literal; Cosmos numbers are finite doubles, so others are refused."""
    if len(raw) > _MAX_NUMBER_CHARS:
        raise bad_request(f"Syntax error, the number '{raw[:40]}...' is too long.")
    try:
        value: int | float = float(raw) if any(c in raw for c in ".eE") else int(raw)
    except ValueError:
        raise bad_request(f"Syntax error, invalid number '{raw[:40]}'.") from None
    if abs(value) >= _DOUBLE_LIMIT or not math.isfinite(value):
        raise bad_request(f"The number '{raw[:40]}' is outside the range of a double.")
    return value


def _unescape(body: str) -> str:
    if "\\" not in body:
        return body

    def replace(match: re.Match[str]) -> str:
        if match.group("hex") is not None:
            return chr(int(match.group("hex"), 16))
        char = match.group("char")
        if char == "u":
            raise bad_request("Syntax error, a \\u escape needs four hex digits.")
        return _SIMPLE_ESCAPES.get(char, char)

    return _ESCAPE.sub(replace, body)
