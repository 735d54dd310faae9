"""The HTTP API (FastAPI): decode the request, call the intake or the lookup, map the result.

Served by uvicorn (`orders serve`) and by the Functions host (`func.AsgiFunctionApp` in
function_app.py). The host's routePrefix is `api` and it hands the app the full path, so the
routes carry `/api` themselves and the paths agree in both hosts. Clients are built on the first
request, never at import: importing function_app.py must not need settings or a network.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from starlette.exceptions import HTTPException as StarletteHTTPException

from orders import __version__
from orders.bootstrap import HttpRuntime, Lazy, http_runtime_from_env
from orders.domain.idempotency import MAX_KEY_LENGTH, StoredResponse, validate_idempotency_key
from orders.domain.messages import (
    MAX_BODY_BYTES,
    MAX_REPORTED_ERRORS,
    DeadLetterReason,
    MessageRejected,
    parse_order,
)
from orders.domain.model import EntityId, OrderPlaced
from orders.entrypoints.http_contract import (
    ACCEPTED_RETRY_AFTER,
    IDEMPOTENCY_KEY_HEADER,
    PRINCIPAL_HEADER,
    REPLAYED_HEADER,
    accepted_body,
    accepted_response,
)
from orders.exceptions import (
    IdempotencyKeyReusedError,
    InvalidIdempotencyKeyError,
    OrderIdConflictError,
    PublishError,
    RequestInProgressError,
    ServiceNotReadyError,
    StoreError,
    TransientPublishError,
    TransientStoreError,
)
from orders.service.order_lookup import OrderState

logger = logging.getLogger("orders.http")

PROBLEM_JSON = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:orders:problem:"
# While a dependency is unavailable or an order is still queued: poll again soon.
UNAVAILABLE_RETRY_AFTER = 5

RuntimeFactory = Callable[[], Awaitable[HttpRuntime]]


# --- Response shapes (for the OpenAPI document; the handlers build plain dicts) -------------


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


class StoredOrder(WireModel):
    order_id: str
    status: str = Field(description="`placed`: stored by the consumer")
    customer_id: str
    currency: str
    total_amount: str = Field(description="Decimal string")
    total_quantity: int
    processed_at: str
    lines: list[StoredOrderLine]


PROBLEM_RESPONSE = {"model": Problem, "content": {PROBLEM_JSON: {}}}


# --- Problems -------------------------------------------------------------------------------


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    *,
    headers: dict[str, str] | None = None,
    errors: list[dict[str, str]] | None = None,
    error_count: int | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + slug,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
        body["errorCount"] = error_count if error_count is not None else len(errors)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def field_errors(error: ValidationError | RequestValidationError) -> list[dict[str, str]]:
    """The first `MAX_REPORTED_ERRORS` errors: a hostile body can have tens of thousands."""
    return [
        {
            "location": ".".join(str(part) for part in item["loc"]) or "body",
            "message": str(item["msg"])[:200],
        }
        for item in list(error.errors())[:MAX_REPORTED_ERRORS]
    ]


def rejected_body_problem(rejection: MessageRejected) -> JSONResponse:
    match rejection.reason:
        case DeadLetterReason.ORDER_TOO_LARGE:
            return problem(413, "order-too-large", "Order too large", rejection.description)
        case DeadLetterReason.INVALID_JSON:
            return problem(400, "invalid-json", "Body is not JSON", rejection.description)
        case _:
            cause = rejection.__cause__
            if not isinstance(cause, ValidationError):
                return problem(
                    400,
                    "invalid-order",
                    "Order does not match the OrderPlaced schema",
                    rejection.description,
                )
            return problem(
                400,
                "invalid-order",
                "Order does not match the OrderPlaced schema",
                rejection.description,
                errors=field_errors(cause),
                error_count=cause.error_count(),
            )


def key_problem(error: InvalidIdempotencyKeyError) -> JSONResponse:
    if error.missing:
        return problem(400, "missing-idempotency-key", "Idempotency-Key required", str(error))
    return problem(400, "invalid-idempotency-key", "Invalid Idempotency-Key", str(error))


RETRY_WITH_SAME_KEY = "a dependency is unavailable; retry with the same Idempotency-Key"
RETRY_LATER = "a dependency is unavailable; retry later"


def failure_problem(error: Exception, retry_advice: str = RETRY_LATER) -> JSONResponse:
    """Server-side failures: 503 when a retry may succeed, 500 otherwise (never a client 4xx)."""
    if isinstance(error, TransientStoreError | TransientPublishError | ServiceNotReadyError):
        logger.warning("dependency unavailable: %s", error)
        return problem(
            503,
            "service-unavailable",
            "Service temporarily unavailable",
            retry_advice,
            headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER)},
        )
    logger.error("request failed: %s", error, exc_info=error)
    return problem(500, "internal-error", "Internal error", "the request could not be completed")


def replay(response: StoredResponse, *, replayed: bool) -> JSONResponse:
    headers = dict(response.headers)
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    return JSONResponse(response.body, status_code=response.status_code, headers=headers)


def caller_scope(request: Request, services: HttpRuntime) -> str:
    """The caller's key scope: its Entra principal where the platform vouches for it.

    With App Service authentication on (`WEBSITE_AUTH_ENABLED`, set by `infra/` when
    `AZURE_AUTH_CLIENT_ID` is given), the platform validates the caller's token, strips any
    principal header a client sent and sets its own. Anywhere else the header is whatever the
    caller typed, so it is ignored: every caller shares the configured scope, and a function
    key holder cannot pick someone else's.
    """
    principal = request.headers.get(PRINCIPAL_HEADER, "").strip()
    if principal and services.trust_principal_header:
        return f"principal:{principal}"
    return f"app:{services.default_scope}"


# --- The app --------------------------------------------------------------------------------


def create_app(runtime_factory: RuntimeFactory | None = None) -> FastAPI:
    """The ASGI app; `runtime_factory` defaults to building real clients from the environment."""
    runtime = Lazy(runtime_factory or http_runtime_from_env, "HTTP API's clients")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await runtime.close()

    app = FastAPI(
        title="Orders API",
        version=__version__,
        description=(
            "Idempotent order intake: POST with an `Idempotency-Key`, poll GET for the result."
        ),
        lifespan=lifespan,
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
    )
    install_problem_handlers(app)

    @app.post(
        "/api/orders",
        status_code=202,
        summary="Place an order (idempotent)",
        response_model=AcceptedOrder,
        responses={
            202: {
                "description": "Accepted and queued; a replay also carries "
                "`Idempotent-Replayed: true`",
                "headers": {
                    "Location": {"schema": {"type": "string"}},
                    REPLAYED_HEADER: {"schema": {"type": "string", "enum": ["true"]}},
                },
            },
            400: PROBLEM_RESPONSE | {"description": "Missing/invalid key, invalid body"},
            409: PROBLEM_RESPONSE
            | {
                "description": "Same key still in progress (`request-in-progress`, Retry-After), "
                "or the orderId was accepted with a different payload (`order-id-conflict`)"
            },
            413: PROBLEM_RESPONSE | {"description": "Order too large"},
            422: PROBLEM_RESPONSE | {"description": "Same key, different body"},
            503: PROBLEM_RESPONSE | {"description": "Dependency unavailable (Retry-After)"},
        },
        openapi_extra={
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
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/OrderPlaced"}}
                },
            },
        },
    )
    async def place_order(request: Request) -> Response:
        try:
            key = validate_idempotency_key(single_header(request, IDEMPOTENCY_KEY_HEADER))
        except InvalidIdempotencyKeyError as error:
            return key_problem(error)
        try:
            order = parse_order(await capped_body(request))
        except MessageRejected as rejection:
            return rejected_body_problem(rejection)
        try:
            services = await runtime.get()
            result = await services.intake.submit(
                caller_scope(request, services),
                key,
                order,
                first_response=lambda accepted: accepted_response(accepted.order_id),
            )
        except IdempotencyKeyReusedError as error:
            return problem(422, "idempotency-key-reused", "Idempotency-Key reused", str(error))
        except OrderIdConflictError as error:
            return problem(
                409, "order-id-conflict", "orderId taken by a different order", str(error)
            )
        except RequestInProgressError as error:
            return problem(
                409,
                "request-in-progress",
                "A request with this Idempotency-Key is in progress",
                str(error),
                headers={"Retry-After": str(error.retry_after)},
            )
        except (StoreError, PublishError, ServiceNotReadyError) as error:
            return failure_problem(error, RETRY_WITH_SAME_KEY)
        return replay(result.response, replayed=result.replayed)

    @app.get(
        "/api/orders/{orderId}",
        summary="The order: stored, accepted (queued), rejected or unknown",
        response_model=StoredOrder | RejectedOrder,
        responses={
            200: {"description": "Stored (`placed`), or rejected by the consumer (`rejected`)"},
            202: {"model": AcceptedOrder, "description": "Accepted, not yet stored (Retry-After)"},
            404: PROBLEM_RESPONSE | {"description": "Unknown order"},
            503: PROBLEM_RESPONSE | {"description": "Dependency unavailable (Retry-After)"},
        },
    )
    async def get_order(request: Request, orderId: str) -> Response:
        try:
            EntityIdCheck.model_validate({"value": orderId})
        except ValidationError:
            return unknown_order(orderId)
        try:
            services = await runtime.get()
            found = await services.lookup.find(caller_scope(request, services), orderId)
        except (StoreError, ServiceNotReadyError) as error:
            return failure_problem(error)
        match found.state:
            case OrderState.STORED | OrderState.REJECTED:
                return JSONResponse(found.body)
            case OrderState.ACCEPTED:
                return JSONResponse(
                    accepted_body(orderId),
                    status_code=202,
                    headers={"Retry-After": str(ACCEPTED_RETRY_AFTER)},
                )
            case _:
                return unknown_order(orderId)

    app.openapi = lambda: openapi_document(app)  # type: ignore[method-assign]
    return app


def single_header(request: Request, name: str) -> str | None:
    """The header's one value; sent twice it is ambiguous, so it is refused, never guessed."""
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise InvalidIdempotencyKeyError(f"the {name} header was sent {len(values)} times")
    return values[0] if values else None


async def capped_body(request: Request) -> bytes:
    """The body, read no further than one byte past the limit (`parse_order` rejects it then).

    A client must not make the API buffer an arbitrarily large body just to be told it is
    too large.
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            break
    return b"".join(chunks)[: MAX_BODY_BYTES + 1]


class EntityIdCheck(BaseModel):
    value: EntityId


def unknown_order(order_id: str) -> JSONResponse:
    return problem(404, "order-not-found", "Order not found", f"no order {order_id!r} is known")


def install_problem_handlers(app: FastAPI) -> None:
    """FastAPI's own errors as problem+json too: 404/405 routes, validation, and the rest."""

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        return problem(
            exc.status_code,
            slug,
            str(exc.detail) if exc.status_code in (404, 405) else "HTTP error",
            str(exc.detail),
            headers=dict(exc.headers) if exc.headers else None,
        )

    async def validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem(
            400,
            "invalid-request",
            "Invalid request",
            "the request does not match the API description",
            errors=field_errors(exc),
        )

    async def unexpected_error(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # A middleware, not an exception handler: Starlette re-raises after running a handler
        # for `Exception`, which would log every answered failure twice.
        try:
            return await call_next(request)
        except Exception as exc:
            return failure_problem(exc)

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.middleware("http")(unexpected_error)


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
    app.openapi_schema = document
    return document
