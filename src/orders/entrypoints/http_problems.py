"""Every error the HTTP API answers, as RFC 7807 problem+json, from one table.

Routes raise; the handlers installed here map each exception to its problem. Client mistakes are
4xx, a dependency that may recover is 503 with Retry-After, anything else 500: never an HTML or
plain-text page.

The `Idempotency-Key` refusals (missing or invalid key, a key reused, a request in progress, a
body over the limit) are raised by the core's FastAPI dependency itself (`KeyProblem`) and
answered with its problem under this API's prefix: one behaviour, the core's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from exactly_once import StoreError, TransientStoreError
from exactly_once.http import PROBLEM_JSON, KeyProblem, Problem, problem_response
from orders.domain.ids import id_problem
from orders.domain.messages import MAX_REPORTED_ERRORS, DeadLetterReason, MessageRejected
from orders.exceptions import (
    InvalidCancelRequestError,
    OrderAlreadyShippedError,
    OrderIdConflictError,
    OrderNotStoredYetError,
    PublishError,
    ServiceNotReadyError,
    TransientPublishError,
    UnknownOrderError,
)
from orders.observability import HttpTelemetry

logger = logging.getLogger("orders.http")

PROBLEM_TYPE_PREFIX = "urn:orders:problem:"
# While a dependency is unavailable: poll again soon.
UNAVAILABLE_RETRY_AFTER = 5
RETRY_WITH_SAME_KEY = "a dependency is unavailable; retry with the same Idempotency-Key"
RETRY_LATER = "a dependency is unavailable; retry later"
# An id outside the one id grammar (`domain/ids.py`), in the body or the path.
INVALID_ID = "invalid-id"
INVALID_ID_TITLE = "Id outside the id rule"


class InvalidPathId(ValueError):
    """A path's id outside the one id grammar, found before the request's key is claimed."""

    def __init__(self, name: str, value: str) -> None:
        super().__init__(f"{name}: {id_problem(value)}")
        self.name = name
        self.value = value


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
    body: dict[str, Any] = Problem(status, slug, title, detail).body(PROBLEM_TYPE_PREFIX)
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
            slug, title = (
                (INVALID_ID, INVALID_ID_TITLE)
                if rejection.reason is DeadLetterReason.INVALID_ID
                else ("invalid-order", "Order does not match the OrderPlaced schema")
            )
            cause = rejection.__cause__
            if not isinstance(cause, ValidationError):
                return problem(400, slug, title, rejection.description)
            return problem(
                400,
                slug,
                title,
                rejection.description,
                errors=field_errors(cause),
                error_count=cause.error_count(),
            )


def invalid_id(name: str, value: str) -> JSONResponse:
    """A path's id outside the one id grammar: refused with the rule, never looked up (no
    order can have it) and never trimmed into one that can."""
    return problem(400, INVALID_ID, INVALID_ID_TITLE, f"{name}: {id_problem(value)}")


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


def unknown_order(order_id: str) -> JSONResponse:
    return problem(404, "order-not-found", "Order not found", f"no order {order_id!r} is known")


def _retry_advice(request: Request) -> str:
    # Only a POST has a key to resend; a GET is simply asked again.
    return RETRY_WITH_SAME_KEY if request.method == "POST" else RETRY_LATER


# exception type -> its problem; the first matching entry (in order) answers.
ProblemFor = Callable[[Request, Any], JSONResponse]
PROBLEMS: list[tuple[type[Exception], ProblemFor]] = [
    # The core's dependency sets the type prefix (this API's) on the problems it raises.
    (KeyProblem, lambda request, error: problem_response(error.problem, error.type_prefix)),
    (InvalidPathId, lambda request, error: invalid_id(error.name, error.value)),
    (MessageRejected, lambda request, error: rejected_body_problem(error)),
    (
        InvalidCancelRequestError,
        lambda request, error: problem(
            400, "invalid-cancel-request", "Invalid cancel request", str(error)
        ),
    ),
    (
        OrderIdConflictError,
        lambda request, error: problem(
            409, "order-id-conflict", "orderId taken by a different order", str(error)
        ),
    ),
    (
        UnknownOrderError,
        lambda request, error: problem(404, "order-not-found", "Order not found", str(error)),
    ),
    (
        OrderAlreadyShippedError,
        lambda request, error: problem(
            409, "order-already-shipped", "The order has already shipped", str(error)
        ),
    ),
    (
        OrderNotStoredYetError,
        lambda request, error: problem(
            409,
            "order-not-stored-yet",
            "The order is accepted but not stored yet",
            str(error),
            headers={"Retry-After": str(error.retry_after)},
        ),
    ),
    (StoreError, lambda request, error: failure_problem(error, _retry_advice(request))),
    (PublishError, lambda request, error: failure_problem(error, _retry_advice(request))),
    (ServiceNotReadyError, lambda request, error: failure_problem(error, _retry_advice(request))),
]


def count_problem(telemetry: HttpTelemetry, response: Response) -> None:
    """One counter per answer that matters to an operator, by status and problem type."""
    if response.status_code >= 500:
        telemetry.server_errors.add(1)
        return
    kind = json.loads(bytes(response.body)).get("type", "").removeprefix(PROBLEM_TYPE_PREFIX)
    counter = {
        "request-in-progress": telemetry.in_progress,
        "idempotency-key-reused": telemetry.key_reused,
        "order-id-conflict": telemetry.order_id_conflicts,
    }.get(kind)
    if counter is not None:
        counter.add(1)


def install_problem_handlers(app: FastAPI, telemetry: HttpTelemetry) -> None:
    """The table above, plus FastAPI's own errors (404/405 routes, validation) and the rest."""

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
            telemetry.server_errors.add(1)
            return failure_problem(exc)

    def answer_with(problem_for: ProblemFor) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def handler(request: Request, exc: Exception) -> Response:
            response = problem_for(request, exc)
            count_problem(telemetry, response)
            return response

        return handler

    for exception_type, problem_for in PROBLEMS:
        app.add_exception_handler(exception_type, answer_with(problem_for))
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.middleware("http")(unexpected_error)
