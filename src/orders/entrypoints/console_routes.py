"""The operations console's routes under /console: decode and validate the request, call the
console service, render a page. Installed by `create_app` only when the console is enabled.

Requests are read by hand rather than through FastAPI's parameter validation: a bad value gets
an HTML error page here (problem+json is for the API's clients, not for a person in a browser),
and the JSON endpoint answers problem+json. None of these routes is in the OpenAPI document.
State changes are POST forms reached through a confirmation page, and refused when the browser
says they come from another site (a cookie-authenticated operator must not be made to purge by
a link elsewhere), or when the form does not carry the session's token (`CsrfTokens`): fetch
metadata alone trusts every browser to send it. A foreign `Host` never gets this far on the
local servers (http_hosts.py).
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import logging
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from exactly_once import TransientStoreError
from orders.bootstrap import ConsoleRuntime
from orders.domain.dead_letters import parse_sequence_number
from orders.domain.ids import ID_RULE, is_entity_id
from orders.entrypoints import console_pages as pages
from orders.entrypoints.console_assets import SCRIPT, STYLESHEET
from orders.entrypoints.http_problems import failure_problem, problem
from orders.entrypoints.lazy_runtime import Lazy
from orders.exceptions import OrdersError, ResubmitUnsupportedError, ServiceNotReadyError
from orders.service.console import LIST_LIMIT, UnreadableOrderError
from orders.service.subscribers import Source

logger = logging.getLogger("orders.console")

ConsoleFactory = Callable[[], Awaitable[ConsoleRuntime]]
PRINCIPAL_NAME_HEADER = "X-MS-CLIENT-PRINCIPAL-NAME"
MAX_FORM_BYTES = 2048
MAX_FORM_FIELDS = 8
MAX_QUERY_VALUE = 400
ACTIONS = ("resubmit", "purge")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a browser sends `Origin: null` on its own
    # form posts, which the cross-site check must refuse.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


SESSION_COOKIE = "orders_console_session"
CSRF_FIELD = "csrf"
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)


class CsrfTokens:
    """Per-session tokens for the console's forms (signed double submit).

    The session is a random id in an HttpOnly, SameSite=Strict cookie; its token is an HMAC
    of it under a key of this process, rendered into the confirmation form. A POST must carry
    both, matching. Another site cannot read the token, and a cookie planted by a neighbour
    (cookies ignore ports: any page on localhost can set one) has no token without the key.
    The key lives and dies with the process: after a restart, or on another instance behind a
    load balancer, a form is refused and the confirmation page must be opened again.
    """

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    @staticmethod
    def session_of(request: Request) -> str | None:
        """The request's session id, or None when it has none or a malformed one."""
        value = request.cookies.get(SESSION_COOKIE)
        return value if value is not None and SESSION_ID.fullmatch(value) else None

    def token(self, session: str) -> str:
        return hmac.new(self._key, session.encode("ascii"), hashlib.sha256).hexdigest()

    def require(self, request: Request, values: dict[str, list[str]]) -> None:
        session, sent = self.session_of(request), one_value(values, CSRF_FIELD, required=False)
        if session is None or sent is None or not hmac.compare_digest(self.token(session), sent):
            raise CrossSiteRequest(
                "the form's token is missing or stale: open the confirmation page again"
            )


class BadConsoleRequest(OrdersError):
    """A console request with a missing, repeated or invalid parameter (HTML 400)."""


class CrossSiteRequest(OrdersError):
    """A state-changing request the browser says came from another site (HTML 403)."""


def page(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def error_response(error: Exception) -> HTMLResponse:
    """The plain error page for each failure, as the API's problems map them."""
    if isinstance(error, BadConsoleRequest):
        return page(pages.error_page(400, "Bad request", str(error)), 400)
    if isinstance(error, CrossSiteRequest):
        return page(pages.error_page(403, "Refused", str(error)), 403)
    if isinstance(error, ResubmitUnsupportedError):
        return page(pages.error_page(409, "Not resubmitted", str(error)), 409)
    if isinstance(error, TransientStoreError | ServiceNotReadyError):
        logger.warning("console: dependency unavailable: %s", error)
        return page(pages.error_page(503, "Unavailable", "a dependency is unavailable"), 503)
    logger.error("console request failed: %s", error, exc_info=error)
    return page(pages.error_page(500, "Error", "the request could not be completed"), 500)


def one_value(values: dict[str, list[str]], name: str, *, required: bool = True) -> str | None:
    found = values.get(name, [])
    if len(found) > 1:
        raise BadConsoleRequest(f"{name} was given {len(found)} times")
    if not found:
        if required:
            raise BadConsoleRequest(f"{name} is missing")
        return None
    if len(found[0]) > MAX_QUERY_VALUE:
        raise BadConsoleRequest(f"{name} is longer than {MAX_QUERY_VALUE} characters")
    return found[0]


def query_values(request: Request) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for name, value in request.query_params.multi_items():
        values.setdefault(name, []).append(value)
    return values


async def form_values(request: Request) -> dict[str, list[str]]:
    """A urlencoded form, read no further than `MAX_FORM_BYTES` (refused beyond)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise BadConsoleRequest("send the form as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BadConsoleRequest(f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        return parse_qs(
            body.decode("ascii"),
            keep_blank_values=True,
            max_num_fields=MAX_FORM_FIELDS,
            errors="strict",
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadConsoleRequest("the form is not a valid urlencoded form") from exc


def require_same_site(request: Request) -> None:
    """Browsers say where a request comes from (Sec-Fetch-Site, Origin); refuse other sites.

    A request without either header is not from a browser, so no cross-site forgery applies.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site != "same-origin":
        raise CrossSiteRequest(f"refused a {fetch_site} request: use the console's own forms")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise CrossSiteRequest("refused a request from another origin")


def acting_person(request: Request, runtime: ConsoleRuntime) -> str:
    """Who resubmits: the platform's principal name behind App Service authentication, else
    the console's process (any caller could type the header anywhere else)."""
    name = request.headers.get(PRINCIPAL_NAME_HEADER, "").strip()
    if name and runtime.trust_principal_header:
        return "console:" + "".join(c for c in name[:200] if c.isprintable())
    return f"console:{getpass.getuser()}@{socket.gethostname()}"


def source_of(runtime: ConsoleRuntime, values: dict[str, list[str]]) -> Source:
    name = one_value(values, "source")
    assert name is not None
    source = runtime.console.find_source(name)
    if source is None:
        raise BadConsoleRequest("source is not one of the console's queues or subscriptions")
    return source


def sequence_of(values: dict[str, list[str]]) -> int | None:
    """A sequence number, or None for "all"."""
    text = one_value(values, "sequence")
    assert text is not None
    if text == "all":
        return None
    sequence = parse_sequence_number(text)
    if sequence is None:
        raise BadConsoleRequest("sequence must be a sequence number (1 to 2^63-1) or all")
    return sequence


def action_of(values: dict[str, list[str]]) -> str:
    action = one_value(values, "action")
    if action not in ACTIONS:
        raise BadConsoleRequest("action must be resubmit or purge")
    return action


def install_console(app: FastAPI, factory: ConsoleFactory) -> Lazy[ConsoleRuntime]:
    """Add the console's routes to `app`; the caller closes the returned runtime."""
    runtime = Lazy(factory, "operations console")
    router = APIRouter(prefix=pages.PREFIX, include_in_schema=False)
    tokens = CsrfTokens()

    def html_route(
        handle: Callable[[Request, ConsoleRuntime], Awaitable[HTMLResponse]],
    ) -> Callable[[Request], Awaitable[HTMLResponse]]:
        async def route(request: Request) -> HTMLResponse:
            try:
                return await handle(request, await runtime.get())
            except Exception as exc:
                return error_response(exc)

        return route

    async def overview(request: Request, services: ConsoleRuntime) -> HTMLResponse:
        return page(pages.overview_page(await services.console.counts()))

    async def dead_letters(request: Request, services: ConsoleRuntime) -> HTMLResponse:
        source = source_of(services, query_values(request))
        found = await services.console.dead_letters(source, LIST_LIMIT)
        return page(pages.dead_letters_page(source, found, LIST_LIMIT))

    async def confirm(request: Request, services: ConsoleRuntime) -> HTMLResponse:
        values = query_values(request)
        source, action, sequence = (
            source_of(services, values),
            action_of(values),
            sequence_of(values),
        )
        if action == "resubmit" and sequence is None:
            raise BadConsoleRequest("the console resubmits one dead letter at a time")
        dead = None
        if sequence is not None:
            dead = await services.console.dead_letter(source, sequence)
            if dead is None:
                return page(
                    pages.error_page(404, "Not found", f"no dead letter {sequence} in {source}"),
                    404,
                )
        session = CsrfTokens.session_of(request) or secrets.token_urlsafe(32)
        passed_over = await services.console.passed_over(source, sequence)
        response = page(
            pages.confirm_page(
                action,
                source,
                sequence,
                dead,
                csrf_token=tokens.token(session),
                passed_over=passed_over,
            )
        )
        response.set_cookie(
            SESSION_COOKIE,
            session,
            path=pages.PREFIX,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    def act(action: str) -> Callable[[Request, ConsoleRuntime], Awaitable[HTMLResponse]]:
        async def handle(request: Request, services: ConsoleRuntime) -> HTMLResponse:
            require_same_site(request)
            values = await form_values(request)
            source, sequence = source_of(services, values), sequence_of(values)
            if one_value(values, "confirm", required=False) != "yes":
                raise BadConsoleRequest("not confirmed: use the confirmation page")
            tokens.require(request, values)
            if action == "purge":
                outcome = await services.console.purge(source, sequence)
            elif sequence is None:
                raise BadConsoleRequest("the console resubmits one dead letter at a time")
            else:
                outcome = await services.console.resubmit(
                    source,
                    sequence,
                    force=one_value(values, "force", required=False) == "yes",
                    by=acting_person(request, services),
                    now=datetime.now(UTC),
                )
            return page(pages.outcome_page(action, source, outcome))

        return handle

    async def order(request: Request, services: ConsoleRuntime) -> HTMLResponse:
        order_id = one_value(query_values(request), "orderId", required=False)
        if order_id is None or order_id == "":
            return page(pages.order_page("", None))
        if not is_entity_id(order_id):
            error = f"not an order id: {ID_RULE}"
            return page(pages.order_page(order_id, None, error), 400)
        try:
            documents = await services.console.order_documents(order_id)
        except TransientStoreError as exc:
            # The order's documents live in Cosmos DB alone; say so on the lookup page, which
            # stays usable, rather than a bare 503 that hides what still works.
            logger.warning("console: the order's documents cannot be read: %s", exc)
            return page(pages.order_page(order_id, None, pages.DOCUMENTS_UNAVAILABLE), 503)
        try:
            history: list[dict[str, object]] | str = services.console.order_history(documents)
        except UnreadableOrderError as exc:
            history = str(exc)
        return page(pages.order_page(order_id, documents, history=history))

    async def counters(request: Request, services: ConsoleRuntime) -> HTMLResponse:
        return page(pages.counters_page(await services.console.counters(), time.time()))

    router.add_api_route("", html_route(overview), methods=["GET"])
    router.add_api_route("/dead-letters", html_route(dead_letters), methods=["GET"])
    router.add_api_route("/dead-letters/confirm", html_route(confirm), methods=["GET"])
    for action in ACTIONS:
        router.add_api_route(f"/dead-letters/{action}", html_route(act(action)), methods=["POST"])
    router.add_api_route("/orders", html_route(order), methods=["GET"])
    router.add_api_route("/counters", html_route(counters), methods=["GET"])

    @router.get("/api/counters")
    async def counters_json() -> Response:
        try:
            found = await (await runtime.get()).console.counters()
        except Exception as exc:
            return failure_problem(exc)
        if found is None:
            return problem(
                404,
                "counters-unavailable",
                "No decision journals",
                "this console reads no journals; in Azure see Application Insights",
            )
        return JSONResponse(found.to_json(time.time()), headers={"Cache-Control": "no-store"})

    @router.get("/assets/console.css")
    async def stylesheet() -> Response:
        return Response(STYLESHEET, media_type="text/css", headers=SECURITY_HEADERS)

    @router.get("/assets/console.js")
    async def script() -> Response:
        return Response(SCRIPT, media_type="text/javascript", headers=SECURITY_HEADERS)

    @router.api_route("/{rest:path}", methods=["GET", "POST"])
    async def not_found(rest: str) -> Response:
        """Any other path under /console: a page for a person, a problem for the JSON API."""
        if rest.startswith("api/"):
            return problem(404, "not-found", "Not Found", "no such console endpoint")
        return page(pages.error_page(404, "Not found", "no such console page"), 404)

    app.include_router(router)
    return runtime
