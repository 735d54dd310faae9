"""The one id grammar (`orders/domain/ids.py`): the OpenAPI pattern says exactly what the check
enforces, and every id the app accepts is one every other party accepts too.

Readers and generators (schemathesis) take the pattern as the contract; a pattern that admits an
id the app refuses, or refuses one it takes, would tell them something false. And an id the app
takes that the payment provider, Cosmos DB, Service Bus or a URL refuses or rewrites breaks the
saga halfway: the API once took `" abc"`, the provider refused to charge it (400), billing
dead-lettered the event and shipping shipped the order anyway.
"""

from __future__ import annotations

import re

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cosmos_emulator.errors import CosmosError
from cosmos_emulator.ids import validate_id as cosmos_validate_id
from orders.domain.events import ORDER_CANCELLED, order_event_id
from orders.domain.ids import (
    ID_PATTERN,
    ID_RULE,
    MAX_ID_LENGTH,
    InvalidIdError,
    check_id,
    is_entity_id,
)
from orders.domain.inbox import payment_key, refund_key
from orders.domain.status import status_message_id
from payments_standin import validation as standin

PATTERN = re.compile(ID_PATTERN)
# Service Bus caps a MessageId at 128 characters.
MAX_MESSAGE_ID_LENGTH = 128


def app_accepts(value: str) -> bool:
    try:
        check_id(value)
    except InvalidIdError:
        return False
    return True


# Characters drawn where the rules bite: the allowed punctuation, the separators and escapes of
# URLs and Cosmos ids, spaces and other whitespace, zero-width and format characters, letters
# that are not ASCII, controls and a lone surrogate.
id_characters = (
    st.sampled_from(
        [*"ab Z9-_.:@/\\?#%+&=~\t\n\x00\x7f\x85\x9f\xa0\u200b\u2003\u3000\ufeff\u00e9", "\ud800"]
    )
    | st.characters()
)


@given(st.text(id_characters, min_size=0, max_size=MAX_ID_LENGTH + 2))
@settings(max_examples=400, deadline=None)
@example(" abc")
@example("a\u00a0b")
@example("a\u200bb")
@example(".")
@example("..")
@example("a" * MAX_ID_LENGTH)
@example("a" * (MAX_ID_LENGTH + 1))
def test_the_pattern_matches_exactly_the_ids_the_app_accepts(value: str) -> None:
    accepted = app_accepts(value)
    assert bool(PATTERN.fullmatch(value)) == accepted == is_entity_id(value), repr(value)


valid_ids = st.from_regex(PATTERN, fullmatch=True)


@given(valid_ids)
@settings(max_examples=300, deadline=None)
@example("a" * MAX_ID_LENGTH)
@example("0")
@example("o-1:x@y_z.q")
def test_every_party_accepts_every_id_the_app_accepts(order_id: str) -> None:
    check_id(order_id)
    # The payment stand-in (which never imports orders): the orderId and both keys.
    assert standin.order_id(order_id) == order_id
    assert standin.idempotency_key([payment_key(order_id)]) == f"billing:{order_id}"
    assert standin.idempotency_key([refund_key(order_id)]) == f"refund:{order_id}"
    # Cosmos DB: the order's id and every id derived from it.
    for derived in (order_id, order_event_id(order_id, ORDER_CANCELLED), f"{order_id}:line:098"):
        assert cosmos_validate_id(derived) == derived
    # Service Bus: the order's MessageId and its events' and status updates' MessageIds.
    for message_id in (order_id, order_event_id(order_id), status_message_id(order_id, 6)):
        assert len(message_id) <= MAX_MESSAGE_ID_LENGTH
    # A URL path segment and a query value, sent as they are: nothing escaped or resolved away.
    url = httpx.URL(f"http://127.0.0.1/api/orders/{order_id}?orderId={order_id}")
    assert url.raw_path == f"/api/orders/{order_id}?orderId={order_id}".encode()
    assert url.params["orderId"] == order_id


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("order-1", True),
        ("o-1:shard@eu_west.2", True),
        ("9", True),
        (" abc", False),  # a leading space: the payment provider refuses it
        ("a\u00a0b", False),  # a no-break space
        ("a\u200bb", False),  # a zero-width space: invisible in every log and console
        ("a ", False),  # a trailing space: Cosmos DB refuses it
        ("caf\u00e9", False),  # not ASCII (NFC and NFD would be two ids)
        (".", False),  # a dot-segment: URL clients resolve it away
        ("-a", False),  # must start with a letter or a digit
        ("a/b", False),
        ("a%20b", False),  # would be unescaped on the way in
        ("a+b", False),  # a space in a query string
        ("", False),
        ("a" * (MAX_ID_LENGTH + 1), False),
    ],
)
def test_the_grammar_on_the_boundary_cases(value: str, accepted: bool) -> None:
    assert bool(PATTERN.fullmatch(value)) is accepted
    assert app_accepts(value) is accepted


def test_a_refusal_names_the_rule_and_the_character_that_broke_it() -> None:
    with pytest.raises(InvalidIdError) as refused:
        check_id("a\u200bb")

    assert str(refused.value) == f"{ID_RULE}; U+200B at index 1 is not allowed"


def test_the_cosmos_emulator_itself_still_refuses_what_cosmos_refuses() -> None:
    # The grammar is narrower than Cosmos DB's rule, not a stand-in for it.
    with pytest.raises(CosmosError):
        cosmos_validate_id("a/b")
