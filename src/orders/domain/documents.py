"""How amounts are spelt in the stored documents.

The documents themselves (the order document, its outbox event, one per line, all in the
partition `/orderId` so they go in one transactional batch) are the Cosmos adapter's
(`adapters/cosmos_layout.py`), written through the `exactly_once` core's document store.
Amounts are stored as decimal strings: JSON numbers are doubles and money must stay exact.
"""

from __future__ import annotations

from decimal import Decimal


def decimal_text(value: Decimal) -> str:
    """Plain notation without trailing zeros (`1E+2` -> "100", `3.750` -> "3.75").

    Every spelling of one amount hashes alike, so it must be stored alike too: otherwise
    whichever copy of a message arrived first would decide how the amounts read.
    """
    if value.is_zero():
        return "0"  # not "-0": one amount, one spelling
    return format(value.normalize(), "f")
