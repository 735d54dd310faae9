"""The `OrderPlaced` message contract.

Ids (orderId, customerId, every sku) follow the one id grammar of `domain/ids.py`, the ids every
party accepts: an id outside it is a schema violation at once (`InvalidId`), never a store or
payment error found halfway through the saga. Nothing is normalised: we never rewrite an id the
producer chose (MessageId must equal it).

Types are strict, as the OpenAPI document says: `quantity` is a JSON integer (not `2.0`, `"2"`
or `true`), `unitPrice` a JSON number (not `"1.25"`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
)
from pydantic.alias_generators import to_camel
from pydantic_extra_types.currency_code import ISO4217

from orders.domain.ids import ID_PATTERN, ID_RULE, MAX_ID_LENGTH, validate_entity_id

MAX_QUANTITY = 1_000_000

EntityId = Annotated[
    str,
    AfterValidator(validate_entity_id),
    Field(
        json_schema_extra={
            "pattern": ID_PATTERN,
            "minLength": 1,
            "maxLength": MAX_ID_LENGTH,
            "description": ID_RULE[0].upper() + ID_RULE[1:],
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
