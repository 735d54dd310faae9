"""Tokens of Cosmos SQL."""

from __future__ import annotations

import json
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


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == "-" and text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            upper = word.upper()
            tokens.append(Token("KW" if upper in KEYWORDS else "IDENT", word, upper, i))
            i = j
            continue
        if ch == "@":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            if j == i + 1:
                raise bad_request(f"Syntax error, incorrect syntax near '@' at {i}.")
            tokens.append(Token("PARAM", text[i:j], text[i:j], i))
            i = j
            continue
        if ch.isdigit():
            j = i
            while j < n and (
                text[j].isdigit() or text[j] in ".eE" or (text[j] in "+-" and text[j - 1] in "eE")
            ):
                j += 1
            raw = text[i:j]
            try:
                num: float | int = float(raw) if any(c in raw for c in ".eE") else int(raw)
            except ValueError:
                raise bad_request(f"Syntax error, invalid number '{raw}'.") from None
            tokens.append(Token("NUM", raw, num, i))
            i = j
            continue
        if ch in "'\"":
            value, j = _read_string(text, i)
            tokens.append(Token("STR", text[i:j], value, i))
            i = j
            continue
        for punct in _PUNCT:
            if text.startswith(punct, i):
                tokens.append(Token("PUNCT", punct, punct, i))
                i += len(punct)
                break
        else:
            raise bad_request(f"Syntax error, unexpected character '{ch}' at {i}.")
    tokens.append(Token("EOF", "", None, n))
    return tokens


def _read_string(text: str, start: int) -> tuple[str, int]:
    quote = text[start]
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u":
                out.append(json.loads('"' + text[i : i + 6] + '"'))
                i += 6
                continue
            out.append({"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    raise bad_request("Syntax error, unclosed string literal.")
