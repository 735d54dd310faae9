"""What the consumer remembers of an order it refused, so the caller can learn why.

A dead letter is visible to operators only; the rejection document puts the reason where the
order would have been (the order's own partition), so `GET /api/orders/{orderId}` can answer
"rejected, because ..." instead of "accepted" forever. One document per distinct payload: a
redelivery of the same rejected message rewrites the same document (upsert). Its shape and id
are the Cosmos adapter's (`adapters/cosmos_layout.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

ORDER_STATUS_REJECTED = "rejected"


@dataclass(frozen=True)
class OrderRejection:
    order_id: str  # the partition it is filed under: the body's orderId, else the MessageId
    reason: str
    description: str
    message_id: str | None
    request_hash: str | None  # only for a valid order (a reused orderId)
    body_digest: str  # SHA-256 of the raw body: names the payload when there is no hash
    rejected_at: datetime


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class FiledRejection:
    """A rejection as read back for GET: why, and when as it was stored (the text, unparsed)."""

    order_id: str
    reason: str
    description: str
    rejected_at: str
    request_hash: str | None  # which payload it refused, when it was a valid order


def rejection_view(rejection: FiledRejection) -> dict[str, Any]:
    """The public view of a rejection (what GET answers)."""
    return {
        "orderId": rejection.order_id,
        "status": ORDER_STATUS_REJECTED,
        "reason": rejection.reason,
        "description": rejection.description,
        "rejectedAt": rejection.rejected_at,
    }
