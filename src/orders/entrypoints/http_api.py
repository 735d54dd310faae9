"""The HTTP API (FastAPI): decode the request, call the intake or the lookup, map the result.

The two POST routes stand behind the `exactly_once` core's `Idempotency-Key` dependency
(`IdempotencyKeys`), so the API answers as the core does: the key's rules, the body limit
(`Content-Length` judged before a byte is read, a stream cut off at the limit), 409 with
Retry-After, 422, the recorded answer replayed with `Idempotent-Replayed: true`, and each
refusal as problem+json under this API's problem types. The app chooses only what the core lets
it: the key's scope (the caller), the request hash and the record's data (`key_data`), the body
limit, and a Retry-After of at most 1 s.

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
from dataclasses import dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from opentelemetry import propagate, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from exactly_once.http import DescribeRequest, IdempotencyKeys, KeyClaim, KeyedRequest
from exactly_once.store import JsonObject
from orders import __version__
from orders.bootstrap import (
    ConsoleRuntime,
    HttpRuntime,
    build_console_runtime,
    build_http_runtime,
    shared_process_clients,
)
from orders.domain.idempotency import (
    CANCEL_OPERATION,
    cancel_request_hash,
    key_data,
    order_request_hash,
)
from orders.domain.ids import is_entity_id
from orders.domain.messages import MAX_BODY_BYTES, parse_order
from orders.domain.model import OrderPlaced
from orders.domain.status import MAX_CANCEL_BODY_BYTES, CancelRequest, parse_cancel_request
from orders.entrypoints.console_routes import ConsoleFactory, install_console
from orders.entrypoints.http_contract import (
    ACCEPTED_RETRY_AFTER,
    IDEMPOTENCY_KEY_HEADER,
    PRINCIPAL_HEADER,
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
    PROBLEM_TYPE_PREFIX,
    InvalidPathId,
    install_problem_handlers,
    invalid_id,
    unknown_order,
)
from orders.entrypoints.lazy_runtime import Closes, Lazy
from orders.observability import HttpTelemetry, log_value
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
# Each request's claim is owned by `http-<random>`: one owner per request.
OWNER_PREFIX = "http"


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


def order_keys(
    services: HttpRuntime, scope: str, max_body_bytes: int, describe: DescribeRequest
) -> IdempotencyKeys:
    """The core's dependency over the intake's records, for one request: keys in the caller's
    `scope`, the intake's lease, ttl and Retry-After cap, this API's problem types, and the
    route's body limit and `describe` (its request hash, and the data the record's readers
    know). Built per request because the scope is the caller's and the records are the
    runtime's, which is built on the first request."""
    intake = services.intake
    return IdempotencyKeys(
        intake.records,
        scope=scope,
        lease_seconds=intake.lease_seconds,
        expires_after_seconds=intake.ttl_seconds,
        owner=OWNER_PREFIX,
        max_body_bytes=max_body_bytes,
        problem_type_prefix=PROBLEM_TYPE_PREFIX,
        describe=describe,
        retry_after_cap=intake.retry_after_cap,
    )


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

    def counted(claim: KeyClaim) -> None:
        """A replay or a takeover counted where the claim is one."""
        if claim.replay is not None:
            telemetry.replays.add(1)
        if claim.took_over:
            telemetry.takeovers.add(1)

    async def place_claim(request: Request) -> AsyncIterator[Placing]:
        """The core's dependency for POST /api/orders: the key claimed for the validated
        order, whose request hash is the order's (`order_request_hash`)."""
        services = await runtime.get()
        scope = caller_scope(request, services)
        parsed: list[OrderPlaced] = []

        def describe(request: Request, body: bytes) -> KeyedRequest:
            order = parse_order(body)  # refused before the key is claimed
            parsed.append(order)
            key = request.headers[IDEMPOTENCY_KEY_HEADER]
            return KeyedRequest(order_request_hash(order), key_data(scope, key, order.order_id))

        keys = order_keys(services, scope, MAX_BODY_BYTES, describe)
        async with keys.claimed(request) as claim:
            counted(claim)
            yield Placing(claim, parsed[0], services, scope)

    async def cancel_claim(request: Request) -> AsyncIterator[Cancelling]:
        """The core's dependency for POST /api/orders/{orderId}/cancel: the key claimed for
        the cancel of a valid orderId, whose request hash is the cancel's."""
        services = await runtime.get()
        scope = caller_scope(request, services)
        order_id = str(request.path_params["orderId"])
        parsed: list[CancelRequest] = []

        def describe(request: Request, body: bytes) -> KeyedRequest:
            cancel = parse_cancel_request(body)
            if not is_entity_id(order_id):
                raise InvalidPathId("orderId", order_id)
            parsed.append(cancel)
            key = request.headers[IDEMPOTENCY_KEY_HEADER]
            return KeyedRequest(
                cancel_request_hash(order_id, cancel.reason),
                key_data(scope, key, order_id, CANCEL_OPERATION),
            )

        keys = order_keys(services, scope, MAX_CANCEL_BODY_BYTES, describe)
        async with keys.claimed(request) as claim:
            counted(claim)
            yield Cancelling(claim, order_id, parsed[0], services, scope)

    # Defaults, not `Annotated`: annotations are strings here (postponed), which FastAPI
    # resolves in the module, where these dependencies, local to create_app, are not.
    claimed_order = Depends(place_claim)
    claimed_cancel = Depends(cancel_claim)

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
    async def place_order(request: Request, placing: Placing = claimed_order) -> Response:
        claim = placing.claim
        # A caller's `traceparent` is continued: its trace then reaches the consumer through
        # the message (see orders/tracing.py).
        with tracer.start_as_current_span(
            "POST /api/orders",
            context=propagate.extract(dict(request.headers)),
            kind=trace.SpanKind.SERVER,
        ):
            if claim.replay is not None:
                return claim.replay
            if claim.took_over:
                logger.warning(
                    "took over the expired claim of order %s: publishing again",
                    log_value(placing.order.order_id),
                )
            await placing.services.intake.place(placing.scope, placing.order)
            return await complete(claim, accepted_response(placing.order.order_id))

    @app.post(
        "/api/orders/{orderId}/cancel",
        status_code=200,
        summary="Cancel an order (idempotent), decided at once: cancelled, or already shipped",
        response_model=CancelAccepted,
        responses=CANCEL_ORDER_RESPONSES,
        openapi_extra=CANCEL_ORDER_EXTRA,
    )
    async def cancel_order(
        request: Request, orderId: str, cancelling: Cancelling = claimed_cancel
    ) -> Response:
        claim = cancelling.claim
        with tracer.start_as_current_span(
            "POST /api/orders/{orderId}/cancel",
            context=propagate.extract(dict(request.headers)),
            kind=trace.SpanKind.SERVER,
        ):
            if claim.replay is not None:
                return claim.replay
            await cancelling.services.intake.cancel(
                cancelling.scope, cancelling.order_id, cancelling.cancel.reason
            )
            return await complete(claim, cancel_response(cancelling.order_id))

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


@dataclass(frozen=True)
class Placing:
    """A claimed POST /api/orders: the core's claim, the validated order, and whose it is."""

    claim: KeyClaim
    order: OrderPlaced
    services: HttpRuntime
    scope: str


@dataclass(frozen=True)
class Cancelling:
    """A claimed cancel: the core's claim, the orderId and the validated body."""

    claim: KeyClaim
    order_id: str
    cancel: CancelRequest
    services: HttpRuntime
    scope: str


async def complete(claim: KeyClaim, answer: JsonObject) -> Response:
    """Record the first answer in the key's record (replayed to every retry) and return it."""
    response = StoredResponse.of_json(answer)
    return await claim.complete(response.status_code, response.body, response.headers)
