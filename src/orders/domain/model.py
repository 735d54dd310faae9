"""The `OrderPlaced` message contract.

Ids become Cosmos DB item ids, so they must not contain the characters Cosmos forbids in ids
(`/ \\ ? #`); they are capped at 64 characters to leave room for line-document ids.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic_extra_types.currency_code import ISO4217

MAX_ID_LENGTH = 64

# Forbidden: Cosmos id separators and control characters (they break REST paths and logs).
_ID_PATTERN = r"^[^/\\?#\x00-\x1f\x7f]+$"

EntityId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_ID_LENGTH, pattern=_ID_PATTERN),
]

# 15 significant digits round-trip exactly through an IEEE double, which is how RFC 8785
# canonicalises numbers: two different prices can therefore never share a request hash.
Money = Annotated[Decimal, Field(ge=0, max_digits=15, decimal_places=4, allow_inf_nan=False)]


class OrderLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: EntityId
    quantity: Annotated[int, Field(gt=0, le=1_000_000)]
    unitPrice: Money

    @property
    def line_total(self) -> Decimal:
        return self.unitPrice * self.quantity


class OrderPlaced(BaseModel):
    """An order as the producer publishes it (MessageId = orderId)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    orderId: EntityId
    customerId: EntityId
    currency: ISO4217
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
            "orderId": self.orderId,
            "customerId": self.customerId,
            "currency": str(self.currency),
            "lines": [
                {"sku": line.sku, "quantity": line.quantity, "unitPrice": float(line.unitPrice)}
                for line in self.lines
            ],
        }
