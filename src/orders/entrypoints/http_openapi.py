"""The OpenAPI document: response shapes, route metadata, and the `OrderPlaced` schema.

Constants here, routes in http_api.py: the handlers build plain dicts, these describe them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from exactly_once.http import PROBLEM_JSON
from orders.domain.idempotency import MAX_KEY_LENGTH
from orders.domain.ids import ID_PATTERN, ID_RULE, MAX_ID_LENGTH
from orders.domain.messages import MAX_REPORTED_ERRORS
from orders.domain.model import OrderPlaced
from orders.entrypoints.http_contract import IDEMPOTENCY_KEY_HEADER, REPLAYED_HEADER

TITLE = "Orders API"
OPENAPI_URL = "/api/openapi.json"
DOCS_URL = "/api/docs"
REDOC_URL = "/api/redoc"
# Swagger UI's and ReDoc's scripts and styles, served by the app itself from the files the
# fastapi-offline package ships: the docs work offline and load nothing from a CDN.
DOCS_ASSETS_URL = "/api/docs-assets"
DESCRIPTION = "Idempotent order intake: POST with an `Idempotency-Key`, poll GET for the result."


class WireModel(BaseModel):
    """Response shapes for the OpenAPI document: snake_case here, camelCase on the wire."""

    model_config = ConfigDict(alias_generator=to_camel, serialize_by_alias=True)


class Problem(WireModel):
    """RFC 7807 problem details."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = Field(
        default=None,
        description=f"Per-field messages of a rejected body (at most {MAX_REPORTED_ERRORS})",
    )
    error_count: int | None = Field(default=None, description="How many errors the body has")


class AcceptedOrder(WireModel):
    order_id: str
    status: str = Field(description="`accepted`: queued, not yet stored by the consumer")
    location: str = Field(description="Where to GET the order")


class RejectedOrder(WireModel):
    order_id: str
    status: str = Field(description="`rejected`: the consumer dead-lettered it")
    reason: str = Field(description="The dead-letter reason, e.g. `RequestHashMismatch`")
    description: str
    rejected_at: str


class StoredOrderLine(WireModel):
    line_number: int
    sku: str
    quantity: int
    unit_price: str = Field(description="Decimal string")
    line_total: str = Field(description="Decimal string")


class StatusChange(WireModel):
    status: str
    version: int
    at: str


class StoredOrder(WireModel):
    order_id: str
    status: str = Field(
        description="`placed`, then `paid`, `shipped`, `delivered` or `cancelled` as absolute, "
        "versioned status updates are applied; `payment_failed` when the payment provider "
        "refused the charge for good (the order never ships)"
    )
    status_version: int = Field(description="The version of `status` (1: as placed)")
    status_history: list[StatusChange] = Field(
        description="Every change, oldest first, from `placed`; one that arrived after a newer "
        "one is kept in its place (the last 20)"
    )
    customer_id: str
    currency: str
    total_amount: str = Field(description="Decimal string")
    total_quantity: int
    processed_at: str
    lines: list[StoredOrderLine]


PROBLEM_RESPONSE = {"model": Problem, "content": {PROBLEM_JSON: {}}}

# A keyed POST's 503: retry with the same key, whether the request ran or not.
UNAVAILABLE_AFTER_KEY = (
    "Dependency unavailable (`service-unavailable`, Retry-After), or the request ran but its "
    "answer could not be recorded (`response-not-recorded`, Retry-After: the retry with the "
    "same key gets it, never a second run)"
)

PLACE_ORDER_RESPONSES: dict[int | str, dict[str, Any]] = {
    202: {
        "description": "Accepted and queued; a replay also carries `Idempotent-Replayed: true`",
        "headers": {
            "Location": {"schema": {"type": "string"}},
            REPLAYED_HEADER: {"schema": {"type": "string", "enum": ["true"]}},
        },
    },
    400: PROBLEM_RESPONSE
    | {"description": "Missing/invalid key, invalid body; `invalid-id`: an id breaks the id rule"},
    409: PROBLEM_RESPONSE
    | {
        "description": "Same key still in progress (`request-in-progress`, Retry-After), "
        "or the orderId was accepted with a different payload (`order-id-conflict`)"
    },
    413: PROBLEM_RESPONSE
    | {
        "description": "Body over 256 KB (`body-too-large`, judged from Content-Length before "
        "a byte is read), or an order over the batch's limits (`order-too-large`)"
    },
    422: PROBLEM_RESPONSE | {"description": "Same key, different body"},
    503: PROBLEM_RESPONSE | {"description": UNAVAILABLE_AFTER_KEY},
}

PLACE_ORDER_EXTRA: dict[str, Any] = {
    "parameters": [
        {
            "name": IDEMPOTENCY_KEY_HEADER,
            "in": "header",
            "required": True,
            "description": "Unique per order attempt; retries resend the same key",
            "schema": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_KEY_LENGTH,
                "pattern": "^[ -~]+$",
            },
        }
    ],
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OrderPlaced"}}},
    },
}


class CancelAccepted(WireModel):
    order_id: str
    status: str = Field(
        description="`cancelled`: the cancel took effect (now, or by an earlier request); a "
        "charge is refunded by billing"
    )
    location: str = Field(description="Where to GET the order and its status")


CANCEL_ORDER_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Cancelled: decided at once on the order document, before any "
        "shipment; a replay carries `Idempotent-Replayed: true`",
        "headers": {
            "Location": {"schema": {"type": "string"}},
            REPLAYED_HEADER: {"schema": {"type": "string", "enum": ["true"]}},
        },
    },
    400: PROBLEM_RESPONSE
    | {"description": "Missing/invalid key or body; `invalid-id`: the orderId breaks the id rule"},
    404: PROBLEM_RESPONSE
    | {"description": "Unknown order, or one the caller does not own (another's, or nobody's)"},
    409: PROBLEM_RESPONSE
    | {
        "description": "`order-already-shipped`: the shipment was reserved first (final); "
        "`order-not-stored-yet` or `request-in-progress` (Retry-After)"
    },
    413: PROBLEM_RESPONSE
    | {"description": "Body over 1 KB (`body-too-large`, judged from Content-Length first)"},
    422: PROBLEM_RESPONSE | {"description": "Same key, different request"},
    503: PROBLEM_RESPONSE | {"description": UNAVAILABLE_AFTER_KEY},
}

CANCEL_ORDER_EXTRA: dict[str, Any] = {
    "parameters": PLACE_ORDER_EXTRA["parameters"],
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"reason": {"type": "string", "maxLength": 200}},
                }
            }
        },
    },
}

GET_ORDER_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Stored (`placed`), or rejected by the consumer (`rejected`)"},
    202: {"model": AcceptedOrder, "description": "Accepted, not yet stored (Retry-After)"},
    400: PROBLEM_RESPONSE | {"description": "`invalid-id`: the orderId breaks the id rule"},
    404: PROBLEM_RESPONSE
    | {"description": "Unknown order, or one the caller does not own (another's, or nobody's)"},
    503: PROBLEM_RESPONSE | {"description": "Dependency unavailable (Retry-After)"},
}


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document plus the `OrderPlaced` schema the POST body is validated against.

    The body is parsed by the domain's `parse_order` (decimals stay exact, the same checks as
    the consumer), not by FastAPI, so its schema is added here by hand.
    """
    if app.openapi_schema:
        return app.openapi_schema
    document = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    order_schema = OrderPlaced.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(order_schema.pop("$defs", {}))
    schemas["OrderPlaced"] = order_schema
    # pydantic describes a Decimal as "number or any string"; the contract is a JSON number.
    # JSON Schema cannot say "at most 15 digits, 4 after the point" of a number, so the limit
    # is stated in words (a float `multipleOf` would be wrong: 3 * 0.0001 is not 0.0003).
    schemas["OrderLine"]["properties"]["unitPrice"] = {
        "type": "number",
        "minimum": 0,
        "maximum": 99999999999.9999,
        "title": "Unit price",
        "description": "Decimal >= 0, at most 15 significant digits and 4 after the point",
        "examples": [1.25],
    }
    describe_path_ids(document)
    app.openapi_schema = document
    return document


def describe_path_ids(document: dict[str, Any]) -> None:
    """Every `{orderId}` path parameter carries the id grammar the route checks (the route
    answers `invalid-id` itself, naming the rule, rather than FastAPI's generic 400)."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter.get("name") == "orderId":
                    parameter["description"] = ID_RULE[0].upper() + ID_RULE[1:]
                    parameter["schema"] = {
                        "type": "string",
                        "pattern": ID_PATTERN,
                        "minLength": 1,
                        "maxLength": MAX_ID_LENGTH,
                    }


def documented_app(**settings: Any) -> FastAPI:
    """A FastAPI app whose OpenAPI document, Swagger UI and ReDoc all live under /api (the
    Functions host's route prefix), with the UIs' assets served locally."""
    return FastAPIOffline(
        docs_url=DOCS_URL,
        redoc_url=REDOC_URL,
        static_url=DOCS_ASSETS_URL,
        openapi_url=OPENAPI_URL,
        swagger_ui_oauth2_redirect_url=f"{DOCS_URL}/oauth2-redirect",
        **settings,
    )
