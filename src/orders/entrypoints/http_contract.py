"""The HTTP shapes of the intake: header names, the order route and the 202 it answers.

Next to the routes, not in the domain: the first answer under a key is recorded and replayed
by the core's `Idempotency-Key` dependency, in the shape `StoredResponse` names, and only this
host uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from exactly_once.http import REPLAYED_HEADER as CORE_REPLAYED_HEADER
from exactly_once.store import JsonObject

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = CORE_REPLAYED_HEADER  # the core's marking, so the two cannot drift
# Set by App Service authentication (which strips any value a client sends) when it is on.
PRINCIPAL_HEADER = "X-MS-CLIENT-PRINCIPAL-ID"
# Where a caller polls for the order; the Functions host's routePrefix is `api` too.
ORDER_PATH_TEMPLATE = "/api/orders/{order_id}"
ORDER_STATUS_ACCEPTED = "accepted"
# While an order is still queued: poll again soon.
ACCEPTED_RETRY_AFTER = 1


@dataclass(frozen=True)
class StoredResponse:
    """The HTTP response of a key's first request, replayed verbatim to every retry. The
    core's dependency records it as this JSON (`to_json`) in the key's record, under
    `response`: the shape records have always had, which `orders keys show` and the console
    print."""

    status_code: int
    body: dict[str, Any]
    headers: dict[str, str]

    def to_json(self) -> JsonObject:
        return {"statusCode": self.status_code, "body": self.body, "headers": dict(self.headers)}

    @classmethod
    def of_json(cls, stored: JsonObject) -> StoredResponse:
        body, headers = stored.get("body"), stored.get("headers")
        return cls(
            status_code=int(str(stored["statusCode"])),
            body=dict(body) if isinstance(body, dict) else {},
            headers={str(k): str(v) for k, v in headers.items()}
            if isinstance(headers, dict)
            else {},
        )


def order_location(order_id: str) -> str:
    return ORDER_PATH_TEMPLATE.format(order_id=quote(order_id, safe=""))


def accepted_body(order_id: str) -> dict[str, Any]:
    return {
        "orderId": order_id,
        "status": ORDER_STATUS_ACCEPTED,
        "location": order_location(order_id),
    }


def accepted_response(order_id: str) -> JsonObject:
    """The first answer to a new order, stored and replayed verbatim to every retry."""
    return StoredResponse(
        status_code=202,
        body=accepted_body(order_id),
        headers={"Location": order_location(order_id)},
    ).to_json()


CANCEL_STATUS_CANCELLED = "cancelled"


def cancel_response(order_id: str) -> JsonObject:
    """The answer to a cancel that took effect, stored and replayed verbatim to every retry."""
    return StoredResponse(
        status_code=200,
        body={
            "orderId": order_id,
            "status": CANCEL_STATUS_CANCELLED,
            "location": order_location(order_id),
        },
        headers={"Location": order_location(order_id)},
    ).to_json()
