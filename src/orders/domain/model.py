"""The `OrderPlaced` message contract.

Ids become Cosmos DB item ids, so the id rules are exactly the ones Cosmos enforces (plus a
64-character cap that leaves room for line-document ids): a message Cosmos would refuse is a
schema violation at once, never a store error retried until the broker gives up.

Unicode policy for ids: compared and stored code point for code point, never normalised. Two
spellings of one visible id (NFC "é" and NFD "e" + combining acute) would otherwise be two
orders, so an id that is not in NFC is refused: the producer normalises, we never rewrite an id
it chose (MessageId must equal it, and a changed id would break that contract).

Types are strict, as the OpenAPI document says: `quantity` is a JSON integer (not `2.0`, `"2"`
or `true`), `unitPrice` a JSON number (not `"1.25"`).
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
)
from pydantic.alias_generators import to_camel
from pydantic_extra_types.currency_code import ISO4217

MAX_ID_LENGTH = 64
MAX_QUANTITY = 1_000_000

# Cosmos refuses these in ids (they are URL path separators in its REST API).
FORBIDDEN_ID_CHARACTERS = frozenset("/\\?#")


# One scan for every refused character (this runs for each id of every message); which rule
# failed is worked out only for the message of a rejection.
_REFUSED_ID_CHARACTER = re.compile("[/\\\\?#\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")


def check_cosmos_id(value: str) -> str:
    refused = _REFUSED_ID_CHARACTER.search(value)
    if refused is not None:
        if any(char in FORBIDDEN_ID_CHARACTERS for char in value):
            raise ValueError(
                "must not contain '/', '\\', '?' or '#' (Cosmos DB refuses them in ids)"
            )
        if _CONTROL_CHARACTER.search(value):
            # C0, DEL and C1 controls: Cosmos refuses them, and they forge log lines and paths.
            raise ValueError("must not contain control characters")
        raise ValueError("must not contain unpaired surrogates (not encodable as UTF-8)")
    if value.endswith(" "):
        raise ValueError("must not end with a space (Cosmos DB refuses such ids)")
    if not value.strip():
        raise ValueError("must not be only whitespace")
    if not unicodedata.is_normalized("NFC", value):
        raise ValueError("must be in Unicode normalisation form NFC")
    return value


def is_entity_id(value: object) -> bool:
    """Whether `value` passes the id rules (e.g. a MessageId that may name an order)."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH:
        return False
    try:
        check_cosmos_id(value)
    except ValueError:
        return False
    return True


# The same rules for OpenAPI readers and generators (JSON Schema cannot say "NFC"): allowed
# characters, one of them not whitespace, and no trailing space. Written without a lookahead:
# generators such as schemathesis draw strings for a lookahead pattern by trial and error (seconds
# per 64-character boundary case), and this form says the same thing (tests/unit/test_model.py).
ID_JSON_SCHEMA_PATTERN = (
    r"^[^/\\?#\x00-\x1f\x7f-\x9f]*[^/\\?#\x00-\x1f\x7f-\x9f\s]"
    r"(?:[^/\\?#\x00-\x1f\x7f-\x9f]*[^/\\?#\x00-\x1f\x7f-\x9f ])?$"
)

EntityId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_ID_LENGTH),
    AfterValidator(check_cosmos_id),
    Field(
        json_schema_extra={
            "pattern": ID_JSON_SCHEMA_PATTERN,
            "description": "A Cosmos DB id: none of / \\ ? # or control characters, no "
            "trailing space, not only whitespace, Unicode NFC",
        }
    ),
]


def require_currency_code(value: object) -> object:
    # ISO4217 alone would accept "eur" and upper-case it: the contract is the code as listed.
    if (
        not isinstance(value, str)
        or len(value) != 3
        or not ("A" <= min(value) <= max(value) <= "Z")
    ):
        raise ValueError("must be an ISO 4217 code in capital letters")
    return value


CurrencyCode = Annotated[ISO4217, BeforeValidator(require_currency_code)]


def require_json_number(value: object) -> object:
    """Only what `json.loads(..., parse_float=Decimal)` makes of a JSON number passes."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise ValueError("must be a JSON number")
    return Decimal(value) if isinstance(value, int) else value


def without_negative_zero(value: Decimal) -> Decimal:
    # -0 and 0 are one amount; they must be stored alike (they already hash alike).
    return Decimal(0) if value.is_zero() else value


# 15 significant digits round-trip exactly through an IEEE double, which is how RFC 8785
# canonicalises numbers: two different prices can therefore never share a request hash.
Money = Annotated[
    Decimal,
    BeforeValidator(require_json_number),
    Field(ge=0, max_digits=15, decimal_places=4, allow_inf_nan=False),
    AfterValidator(without_negative_zero),
]


# snake_case in Python, camelCase on the wire (and only camelCase: an input spelled
# `order_id` is an unknown field, like any other).
WIRE_NAMES = ConfigDict(
    extra="forbid",
    frozen=True,
    strict=True,
    alias_generator=to_camel,
    validate_by_alias=True,
    validate_by_name=False,
    serialize_by_alias=True,
)


class OrderLine(BaseModel):
    model_config = WIRE_NAMES

    sku: EntityId
    quantity: Annotated[StrictInt, Field(gt=0, le=MAX_QUANTITY)]
    unit_price: Money

    @property
    def line_total(self) -> Decimal:
        return self.unit_price * self.quantity


class OrderPlaced(BaseModel):
    """An order as the producer publishes it (MessageId = orderId)."""

    model_config = WIRE_NAMES

    order_id: EntityId
    customer_id: EntityId
    currency: CurrencyCode
    lines: Annotated[list[OrderLine], Field(min_length=1)]

    @property
    def total_amount(self) -> Decimal:
        return sum((line.line_total for line in self.lines), Decimal(0))

    def canonical_payload(self) -> dict[str, Any]:
        """The validated payload in JSON types, the input of the request hash.

        Decimals become floats here on purpose: RFC 8785 defines number canonicalisation on
        IEEE doubles, so `1`, `1.0` and `1.00` all hash alike.
        """
        return {
            "orderId": self.order_id,
            "customerId": self.customer_id,
            "currency": str(self.currency),
            "lines": [
                {"sku": line.sku, "quantity": line.quantity, "unitPrice": float(line.unit_price)}
                for line in self.lines
            ],
        }
