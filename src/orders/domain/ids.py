"""The one id grammar: what an orderId, a customerId and a sku may be, for every party at once.

An order's id travels far: it is the Cosmos DB item id and partition key, the Service Bus
MessageId, a URL path segment (`/api/orders/{orderId}`), the payment provider's orderId and the
tail of its Idempotency-Key (`billing:<orderId>`), and the stem of every id derived from it
(`<orderId>:outbox:<EventType>`, `<orderId>:line:001`, `refund:<orderId>`). Each of those
parties has its own rules, and an id one of them takes and another refuses breaks the saga in
the middle: the API once took `" abc"`, the payment provider refused to charge it, and shipping
shipped it anyway.

So the grammar is the intersection, kept conservative: ASCII letters and digits and `- _ . : @`,
1 to 64 characters, starting with a letter or a digit. Nothing in it needs escaping in a URL
path or a query, nothing in it is whitespace or a control, it is its own Unicode normal form, and
it never is a dot-segment (`.` or `..`, which URL clients resolve away). Nothing is normalised:
an id outside the grammar is refused with the rule, never trimmed or rewritten, because the
producer's MessageId must equal it.
"""

from __future__ import annotations

import re
import secrets
from typing import Final

from pydantic_core import PydanticCustomError

MAX_ID_LENGTH = 64
# The punctuation an id may hold besides letters and digits.
ID_PUNCTUATION = "-_.:@"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$"
# Every refusal quotes it, so a caller learns the rule, not only that it broke one.
ID_RULE = (
    f"the id rule: 1 to {MAX_ID_LENGTH} ASCII letters, digits and {' '.join(ID_PUNCTUATION)}, "
    "starting with a letter or a digit"
)
# The pydantic error type of an id outside the grammar: the consumer dead-letters a body whose
# only faults are such ids as `InvalidId`, the API answers them as `invalid-id`.
ID_ERROR_TYPE = "invalid_id"

_ID = re.compile(ID_PATTERN)
_ID_CHARACTER = re.compile(r"[A-Za-z0-9_.:@-]")


class InvalidIdError(ValueError):
    """A value outside the id grammar; the message names the rule and what broke it."""


def id_problem(value: object) -> str | None:
    """None for an id in the grammar, else why not: the rule, then the first thing that broke
    it (shown as a code point, so no hostile character reaches a log or a response as is)."""
    if not isinstance(value, str):
        return f"{ID_RULE}; this is not a string"
    if _ID.fullmatch(value):
        return None
    if not value:
        return f"{ID_RULE}; this one is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"{ID_RULE}; this one has {len(value)} characters"
    for index, char in enumerate(value):
        if not _ID_CHARACTER.fullmatch(char):
            return f"{ID_RULE}; U+{ord(char):04X} at index {index} is not allowed"
    return f"{ID_RULE}; this one starts with {value[0]!r}"


def check_id(value: str) -> str:
    """`value` if it is in the grammar, else `InvalidIdError` naming the rule."""
    problem = id_problem(value)
    if problem is not None:
        raise InvalidIdError(problem)
    return value


def is_entity_id(value: object) -> bool:
    """Whether `value` is in the grammar (e.g. a MessageId that may name an order)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def validate_entity_id(value: object) -> str:
    """The pydantic validator of `EntityId`: a custom error type, so a rejection can say the
    body's only fault is its ids."""
    problem = id_problem(value)
    if problem is not None:
        raise PydanticCustomError(ID_ERROR_TYPE, "{rule}", {"rule": problem})
    assert isinstance(value, str)
    return value


# Hex digits of the nonce a MessageId carries after the id it names: 128 random bits. Events and
# status updates are published under such ids (`domain/events.py`, `domain/status.py`), so no
# other sender can send first under the id and have the broker's duplicate detection drop ours.
MESSAGE_ID_NONCE_HEX_DIGITS: Final = 32
_MESSAGE_ID_NONCE = re.compile(rf":[0-9a-f]{{{MESSAGE_ID_NONCE_HEX_DIGITS}}}")


def with_nonce(named: str) -> str:
    """`named` followed by ':' and a fresh random 128-bit nonce (32 lowercase hex digits)."""
    return f"{named}:{secrets.token_hex(MESSAGE_ID_NONCE_HEX_DIGITS // 2)}"


def nonce_after(message_id: str | None, named: str) -> bool | None:
    """Whether `message_id` is `named` with a nonce (True) or bare (False); None when it is
    neither."""
    if message_id is None or not message_id.startswith(named):
        return None
    rest = message_id[len(named) :]
    if rest == "":
        return False
    return True if _MESSAGE_ID_NONCE.fullmatch(rest) is not None else None
