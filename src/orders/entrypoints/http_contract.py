"""The HTTP shapes of the intake: header names, the order route and the 202 it answers.

Next to the routes, not in the domain: the domain keeps the key rules and stores whatever
response the first request got, without knowing it is HTTP.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from orders.domain.idempotency import StoredResponse

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# Set by App Service authentication (which strips any value a client sends) when it is on.
PRINCIPAL_HEADER = "X-MS-CLIENT-PRINCIPAL-ID"
# Where a caller polls for the order; the Functions host's routePrefix is `api` too.
ORDER_PATH_TEMPLATE = "/api/orders/{order_id}"
ORDER_STATUS_ACCEPTED = "accepted"
# While an order is still queued: poll again soon.
ACCEPTED_RETRY_AFTER = 1


def order_location(order_id: str) -> str:
    return ORDER_PATH_TEMPLATE.format(order_id=quote(order_id, safe=""))


def accepted_body(order_id: str) -> dict[str, Any]:
    return {
        "orderId": order_id,
        "status": ORDER_STATUS_ACCEPTED,
        "location": order_location(order_id),
    }


def accepted_response(order_id: str) -> StoredResponse:
    """The first answer to a new order, stored and replayed verbatim to every retry."""
    return StoredResponse(
        status_code=202,
        body=accepted_body(order_id),
        headers={"Location": order_location(order_id)},
    )


CANCEL_STATUS_CANCELLED = "cancelled"


def cancel_response(order_id: str) -> StoredResponse:
    """The answer to a cancel that took effect, stored and replayed verbatim to every retry."""
    return StoredResponse(
        status_code=200,
        body={
            "orderId": order_id,
            "status": CANCEL_STATUS_CANCELLED,
            "location": order_location(order_id),
        },
        headers={"Location": order_location(order_id)},
    )
