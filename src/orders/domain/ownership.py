"""Who an order belongs to: the caller scope that placed it, kept on the stored order.

API callers are told apart by their scope: `principal:<Entra object id>` where App Service
authentication vouches for the caller, else `app:<IDEMPOTENCY_SCOPE>`, which every caller of a
deployment without principals shares. The API publishes an order with its owner's scope in the
message's `orderOwner` application property; a producer that sends straight to the queue may set
it too. The consumer keeps it on the order document (`ownerScope`), and every later request
about the order (GET, cancel) is checked against that document, never against the orderId claim
or a key record: a caller whose own payload lost the race for an orderId owns nothing under it.

An order whose message named no owner belongs to no API caller: none may see or change it.
GET shows an order exactly to the callers that may cancel it, so the two always agree.

Orders stored before owners were recorded have no `ownerScope` field. For them the orderId claim
stands in, but only when it holds the payload that was stored (the claim's request hash is the
order's): the API placed that order for the claim's owner. Otherwise the order is nobody's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orders.domain.idempotency import OrderIdClaim
from orders.domain.messages import DeadLetterReason, MessageRejected

# The application property that names the owner of an order message (a string).
OWNER_PROPERTY = "orderOwner"
MAX_OWNER_LENGTH = 256
PRINCIPAL_SCHEME = "principal:"
APP_SCHEME = "app:"

# A scheme, then at least one character that is neither a control character nor whitespace at
# either end (the API strips the principal header, so no scope it builds has any).
_OWNER_SCOPE = re.compile(r"(?:principal|app):(?=\S)[^\x00-\x1f\x7f-\x9f]*(?<=\S)")


def app_scope(name: str) -> str:
    """The scope every caller shares where principals are not trusted (`IDEMPOTENCY_SCOPE`)."""
    return f"{APP_SCHEME}{name}"


@dataclass(frozen=True)
class RecordedOwner:
    """The owner the order's message named; None when it named none (no API caller owns it)."""

    scope: str | None


@dataclass(frozen=True)
class UnrecordedOwner:
    """An order stored before owners were recorded: an orderId claim holding this payload
    (`request_hash`, the stored order's) names its owner."""

    request_hash: str


StoredOwner = RecordedOwner | UnrecordedOwner

NO_OWNER = RecordedOwner(None)


def order_owner(stored: StoredOwner, claim: OrderIdClaim | None) -> str | None:
    """The scope that owns the stored order, or None when no API caller does. `claim` (the
    orderId's claim, if any) is read only for an order stored before owners were recorded."""
    if isinstance(stored, RecordedOwner):
        return stored.scope
    if claim is not None and claim.request_hash == stored.request_hash:
        return claim.owner_scope or None
    return None


def may_act(caller_scope: str, stored: StoredOwner, claim: OrderIdClaim | None) -> bool:
    """Whether the caller may see and change the stored order: only its owner may."""
    owner = order_owner(stored, claim)
    return owner is not None and owner == caller_scope


def message_owner(value: object) -> str | None:
    """The owner scope an order message names in its `orderOwner` property (None: absent).

    A value that is not a scope is refused (the message is dead-lettered with the rule), never
    dropped: an order stored without the owner its producer meant could not be cancelled by it.
    """
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or len(value) > MAX_OWNER_LENGTH
        or _OWNER_SCOPE.fullmatch(value) is None
    ):
        raise MessageRejected(
            DeadLetterReason.SCHEMA_VIOLATION,
            f"application property {OWNER_PROPERTY}: must be a caller scope, "
            f"{PRINCIPAL_SCHEME}<Entra object id> or {APP_SCHEME}<IDEMPOTENCY_SCOPE>, of at most "
            f"{MAX_OWNER_LENGTH} characters, without control characters or whitespace at the ends",
        )
    return value
