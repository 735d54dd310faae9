"""The HTTP API (FastAPI): decode the request, call the intake or the lookup, map the result.

Served by uvicorn (`orders serve`) and by the Functions host (`func.AsgiFunctionApp` in
function_app.py). The host's routePrefix is `api` and it hands the app the full path, so the
routes carry `/api` themselves and the paths agree in both hosts. Clients are built on the first
request, never at import: importing function_app.py must not need settings or a network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from opentelemetry import propagate, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from exactly_once.records import JsonObject
from orders import __version__
from orders.bootstrap import (
    ConsoleRuntime,
    HttpRuntime,
    build_console_runtime,
    build_http_runtime,
    shared_process_clients,
)
from orders.domain.idempotency import validate_idempotency_key
from orders.domain.ids import is_entity_id
from orders.domain.messages import MAX_BODY_BYTES, parse_order
from orders.domain.status import MAX_CANCEL_BODY_BYTES, parse_cancel_request
from orders.entrypoints.console_routes import ConsoleFactory, install_console
from orders.entrypoints.http_contract import (
    ACCEPTED_RETRY_AFTER,
    IDEMPOTENCY_KEY_HEADER,
    PRINCIPAL_HEADER,
    REPLAYED_HEADER,
    StoredResponse,
    accepted_body,
    accepted_response,
    cancel_response,
)
from orders.entrypoints.http_hosts import AllowedHosts, HostCheck
from orders.entrypoints.http_openapi import (
    CANCEL_ORDER_EXTRA,
    CANCEL_ORDER_RESPONSES,
    DESCRIPTION,
    GET_ORDER_RESPONSES,
    PLACE_ORDER_EXTRA,
    PLACE_ORDER_RESPONSES,
    TITLE,
    AcceptedOrder,
    CancelAccepted,
    RejectedOrder,
    StoredOrder,
    documented_app,
    openapi_document,
)
from orders.entrypoints.http_problems import (
    install_problem_handlers,
    invalid_id,
    unknown_order,
)
from orders.entrypoints.lazy_runtime import Closes, Lazy
from orders.exceptions import InvalidIdempotencyKeyError
from orders.observability import HttpTelemetry
from orders.service.idempotency import SubmitResult
from orders.service.order_lookup import OrderState
from orders.settings import console_enabled

RuntimeFactory = Callable[[], Awaitable[HttpRuntime]]


async def http_runtime_from_env() -> HttpRuntime:
    """The HTTP API's runtime from app settings (the Functions host), on the process's clients."""
    clients = shared_process_clients()
    return await build_http_runtime(clients.settings, clients=clients)


async def console_runtime_from_env() -> ConsoleRuntime:
    clients = shared_process_clients()
    return await build_console_runtime(clients.settings, clients=clients)


logger = logging.getLogger("orders.http")


def replay(answer: JsonObject, *, replayed: bool) -> JSONResponse:
    """The stored answer as the HTTP response it was, marked when it is a replay."""
    response = StoredResponse.of_json(answer)
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


async def _warm(console: Lazy[ConsoleRuntime]) -> None:
    """Build the console and count every entity once: the SDK spends about a second opening
    each receiver, which the first page would otherwise wait for. A failure waits for the
    first page, which reports it."""
    try:
        await (await console.get()).console.counts()
    except Exception:
        logger.info("console warm-up failed; the first page will try again", exc_info=True)


def create_app(
    runtime_factory: RuntimeFactory | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    console_factory: ConsoleFactory | None = None,
    allowed_hosts: AllowedHosts | None = None,
    shared_clients: Closes | None = None,
    warm_console: bool = False,
) -> FastAPI:
    """The ASGI app; `runtime_factory` defaults to building real clients from the environment.
    `shared_clients`, which the factories' runtimes share, close after them at shutdown.
    `warm_console` builds the console at startup and opens its receivers in the background
    (`orders serve --console`, `orders up`), so no page pays for them.

    The operations console (/console) is served with `console_factory`; the Functions host
    (no arguments) serves it only when ORDERS_CONSOLE_ENABLED is "true". With `allowed_hosts`
    (the local servers) a request for any other host is refused (see http_hosts.py).
    """
    runtime = Lazy(runtime_factory or http_runtime_from_env, "HTTP API's clients")
    tracer = trace.get_tracer("orders.http", tracer_provider=tracer_provider)
    telemetry = HttpTelemetry(meter_provider)
    if console_factory is None and runtime_factory is None and console_enabled():
        console_factory = console_runtime_from_env
    console_runtime = None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        warming = None
        if warm_console and console_runtime is not None:
            warming = asyncio.create_task(_warm(console_runtime))
        yield
        if warming is not None:
            warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await warming
        await runtime.close()
        if console_runtime is not None:
            await console_runtime.close()
        if shared_clients is not None:
            await shared_clients.close()

    app = documented_app(
        title=TITLE, version=__version__, description=DESCRIPTION, lifespan=lifespan
    )
    install_problem_handlers(app, telemetry)
    if allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=allowed_hosts)

    def answer(result: SubmitResult) -> JSONResponse:
        """The stored first response, counted as a replay or a takeover where it is one."""
        if result.replayed:
            telemetry.replays.add(1)
        if result.took_over:
            telemetry.takeovers.add(1)
        return replay(result.answer, replayed=result.replayed)

    if console_factory is not None:
        console_runtime = install_console(app, console_factory)

    @app.post(
        "/api/orders",
        status_code=202,
        summary="Place an order (idempotent)",
        response_model=AcceptedOrder,
        responses=PLACE_ORDER_RESPONSES,
        openapi_extra=PLACE_ORDER_EXTRA,
    )
    async def place_order(request: Request) -> Response:
        # A caller's `traceparent` is continued: its trace then reaches the consumer through
        # the message (see orders/tracing.py).
        with tracer.start_as_current_span(
            "POST /api/orders",
            context=propagate.extract(dict(request.headers)),
            kind=trace.SpanKind.SERVER,
        ):
            # Every refusal is an exception that http_problems maps to its problem.
            key = validate_idempotency_key(single_header(request, IDEMPOTENCY_KEY_HEADER))
            order = parse_order(await capped_body(request))
            services = await runtime.get()
            result = await services.intake.submit(
                caller_scope(request, services),
                key,
                order,
                first_response=lambda accepted: accepted_response(accepted.order_id),
            )
            return answer(result)

    @app.post(
        "/api/orders/{orderId}/cancel",
        status_code=200,
        summary="Cancel an order (idempotent), decided at once: cancelled, or already shipped",
        response_model=CancelAccepted,
        responses=CANCEL_ORDER_RESPONSES,
        openapi_extra=CANCEL_ORDER_EXTRA,
    )
    async def cancel_order(request: Request, orderId: str) -> Response:
        with tracer.start_as_current_span(
            "POST /api/orders/{orderId}/cancel",
            context=propagate.extract(dict(request.headers)),
            kind=trace.SpanKind.SERVER,
        ):
            key = validate_idempotency_key(single_header(request, IDEMPOTENCY_KEY_HEADER))
            cancel = parse_cancel_request(await capped_body(request, MAX_CANCEL_BODY_BYTES))
            if not is_entity_id(orderId):
                return invalid_id("orderId", orderId)
            services = await runtime.get()
            result = await services.intake.cancel(
                caller_scope(request, services),
                key,
                orderId,
                cancel.reason,
                first_response=cancel_response,
            )
            return answer(result)

    @app.get(
        "/api/orders/{orderId}",
        summary="The order: stored, accepted (queued), rejected or unknown",
        response_model=StoredOrder | RejectedOrder,
        responses=GET_ORDER_RESPONSES,
    )
    async def get_order(request: Request, orderId: str) -> Response:
        if not is_entity_id(orderId):
            return invalid_id("orderId", orderId)
        services = await runtime.get()
        found = await services.lookup.find(caller_scope(request, services), orderId)
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


async def capped_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body, read no further than one byte past the limit (`parse_order` rejects it then).

    A client must not make the API buffer an arbitrarily large body just to be told it is
    too large.
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)[: limit + 1]
