"""The OpenAPI pattern for ids says what `check_cosmos_id` enforces, but for what JSON Schema
cannot say (Unicode NFC, lone surrogates) and the length (minLength/maxLength carry it).

Readers and generators (schemathesis) take the pattern as the contract; a pattern that admits an
id the app refuses, or refuses one it takes, would tell them something false.
"""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from orders.domain.model import ID_JSON_SCHEMA_PATTERN, MAX_ID_LENGTH, check_cosmos_id

PATTERN = re.compile(ID_JSON_SCHEMA_PATTERN)


def app_accepts(value: str) -> bool:
    try:
        check_cosmos_id(value)
    except ValueError:
        return False
    return True


def encodable(value: str) -> bool:
    """A lone surrogate is no Unicode text: no UTF-8 request carries one, and what a pattern
    says of it depends on the regex engine (UTF-16 code units or code points)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Ids drawn where the rules bite: the forbidden characters, spaces and other whitespace, NFC-stable
# letters, controls and a lone surrogate.
id_characters = (
    st.sampled_from([*"ab Z9-_./\\?#\t\n\x00\x7f\x85\x9f\xa0\u2003\u3000\ufeff\u00e9", "\ud800"])
    | st.characters()
)


@given(st.text(id_characters, min_size=1, max_size=MAX_ID_LENGTH))
@settings(max_examples=400, deadline=None)
@example(" ")
@example("\u3000")
@example("a\u3000")
@example("\u3000a")
@example("a ")
@example("a\xa0")
@example(" a")
def test_the_pattern_matches_exactly_the_ids_the_app_accepts(value: str) -> None:
    if not unicodedata.is_normalized("NFC", value) or not encodable(value):
        return  # the two rules the pattern does not carry
    assert bool(PATTERN.fullmatch(value)) == app_accepts(value), repr(value)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("order-1", True),
        ("a\xa0", True),  # ends with whitespace that is not a space: Cosmos takes it
        ("\xa0a", True),
        ("a ", False),  # a trailing space
        ("\u3000", False),  # only whitespace
        ("a/b", False),
        ("a\x1fb", False),
    ],
)
def test_the_pattern_on_the_boundary_cases(value: str, accepted: bool) -> None:
    assert bool(PATTERN.fullmatch(value)) is accepted
    assert app_accepts(value) is accepted


def test_the_app_refuses_the_lone_surrogate_the_pattern_cannot_speak_of() -> None:
    assert not encodable("a\ud800")
    assert not app_accepts("a\ud800")
