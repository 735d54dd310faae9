"""What the store holds of an order, as the consumer sees it: the write of a new order and
the record of one that exists.

The documents themselves (the order document, its outbox event, one per line, all in the
partition `/orderId` so they go in one transactional batch) are the Cosmos adapter's
(`adapters/cosmos_layout.py`). Amounts are stored as decimal strings: JSON numbers are doubles
and money must stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from orders.exceptions import OrdersError


def decimal_text(value: Decimal) -> str:
    """Plain notation without trailing zeros (`1E+2` -> "100", `3.750` -> "3.75").

    Every spelling of one amount hashes alike, so it must be stored alike too: otherwise
    whichever copy of a message arrived first would decide how the amounts read.
    """
    if value.is_zero():
        return "0"  # not "-0": one amount, one spelling
    return format(value.normalize(), "f")


@dataclass(frozen=True)
class OrderRecord:
    """What the store tells us about an order that already exists."""

    order_id: str
    request_hash: str


class OrderAlreadyExistsError(OrdersError):
    """An order with this id is already stored; carries the existing record. It lives beside
    the record it carries, so `orders.exceptions` stays a leaf."""

    def __init__(self, existing: OrderRecord) -> None:
        super().__init__(f"order {existing.order_id!r} already exists")
        self.existing = existing


@dataclass(frozen=True)
class OrderWrite:
    """Everything one new order writes, order document first, in one transactional batch."""

    order_id: str
    request_hash: str
    documents: tuple[dict[str, Any], ...]
