"""HTTP/1.1 on the standard library's threading server: one thread per connection, capped.

Routes: `POST|GET /payments`, `POST|GET /refunds`, `POST|GET|DELETE /faults` (with the fault
token, never from a web page: fault_access.py), `GET /health`.
Every error is `application/problem+json`; a request the stand-in cannot read, or one for a host
it does not serve, is refused before its body is read, and the connection is then closed.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any, TypeVar

from .fault_access import FAULT_ROUTES, MONEY_ROUTES, GuardedRoutes, request_refusal
from .faults import FaultInjector, FaultRule, fault_rule_from
from .hosts import AllowedHosts
from .store import Ledger, RefundRefused, RefundResult
from .validation import (
    MAX_BODY_BYTES,
    InvalidInput,
    ListQuery,
    charge_request,
    idempotency_key,
    json_body,
    list_query,
    refund_request,
)

T = TypeVar("T")

PROBLEM_TYPE_PREFIX = "urn:payments-standin:problem:"
PROBLEM_JSON = "application/problem+json"
MAX_FAULT_BODY_BYTES = 1024
ROUTED_PATHS = ("/payments", "/refunds", "/faults", "/health")
REFUSAL_STATUS = {
    "unknown-payment": 404,
    "already-refunded": 409,
    "refund-exceeds-payment": 422,
    "currency-mismatch": 422,
}


@dataclass(frozen=True)
class ServerLimits:
    # Idle and per-read socket timeout: a client that stops sending loses its connection.
    socket_timeout_seconds: float = 15.0
    # Connections served at once; more are answered 503 and closed.
    max_connections: int = 64


class Problem(Exception):
    """An answer other than success, as RFC 7807 problem details."""

    def __init__(
        self, status: int, slug: str, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "type": PROBLEM_TYPE_PREFIX + self.slug,
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
        }


class PaymentsServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        ledger: Ledger,
        faults: FaultInjector,
        limits: ServerLimits,
        log_requests: bool,
        fault_token: str,
        allowed_hosts: list[str] | None = None,
        *,
        money_token: str,
    ) -> None:
        self.ledger = ledger
        self.faults = faults
        self.fault_token = fault_token
        self.money_token = money_token
        self.limits = limits
        self.log_requests = log_requests
        self.stopping = threading.Event()
        self._slots = threading.BoundedSemaphore(limits.max_connections)
        super().__init__(address, PaymentsHandler)
        try:  # after binding: port 0 has become the real port
            self.hosts = AllowedHosts.for_server(
                str(self.server_address[0]), int(self.server_address[1]), allowed_hosts or []
            )
        except ValueError:
            self.server_close()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _refuse_connection(request)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _refuse_connection(connection: socket) -> None:
    body = json.dumps(
        Problem(503, "too-many-connections", "too many connections; retry later").body()
    ).encode()
    head = (
        f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {PROBLEM_JSON}\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):  # the client is gone; nothing was done for it
        connection.sendall(head.encode() + body)


class PaymentsHandler(BaseHTTPRequestHandler):
    server: PaymentsServer
    protocol_version = "HTTP/1.1"
    server_version = "payments-standin"
    sys_version = ""
    # The base class answers an unreadable request line as HTTP/0.9 (no status line, no
    # headers); every client of this server speaks HTTP/1.x, so its refusals must read as such.
    default_request_version = "HTTP/1.0"
    # Head and body leave in two writes; with Nagle the body waits for the client's delayed ACK
    # (about 40 ms a request).
    disable_nagle_algorithm = True

    def setup(self) -> None:
        # StreamRequestHandler applies `timeout` to the socket in setup(); it is per server here.
        self.timeout = self.server.limits.socket_timeout_seconds  # type: ignore[misc]
        super().setup()

    # --- routing ------------------------------------------------------------------------------

    def parse_request(self) -> bool:
        """The base class's parsing, then the Host check, before any method runs."""
        if not super().parse_request():
            return False
        try:
            served = self.server.hosts.allows(self.headers.get_all("Host") or [])
        except InvalidInput as exc:
            refusal = Problem(400, "invalid-host", str(exc))
        else:
            if served:
                return True
            refusal = Problem(
                421, "misdirected-request", "this server does not serve the host in `Host`"
            )
        # The body, if any, is unread: the connection cannot carry another request.
        self.close_connection = True
        self._send_problem(refusal)
        return False

    def do_POST(self) -> None:
        self._route(
            {"/payments": self._charge, "/refunds": self._refund, "/faults": self._add_fault}
        )

    def do_GET(self) -> None:
        self._route(
            {
                "/payments": self._list,
                "/refunds": self._list_refunds,
                "/faults": self._describe_faults,
                "/health": self._health,
            }
        )

    def do_DELETE(self) -> None:
        self._route({"/faults": self._clear_faults})

    def do_PUT(self) -> None:
        self._route({})

    do_PATCH = do_HEAD = do_OPTIONS = do_PUT

    def _route(self, handlers: dict[str, Callable[[], None]]) -> None:
        path, _, self.query = self.path.partition("?")
        try:
            handler = handlers.get(path)
            if handler is None:
                if path in ROUTED_PATHS:
                    raise Problem(405, "method-not-allowed", f"{self.command} {path} is not served")
                raise Problem(404, "not-found", "no such resource")
            handler()
        except Problem as problem:
            self._send_problem(problem)
        except (TimeoutError, ConnectionError):
            self.close_connection = True  # the client stopped sending, or left
        except Exception as exc:  # a bug or a broken disk: answer, log, keep serving
            print(f"payments-standin: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            self._send_problem(Problem(500, "internal-error", "the request failed"))

    # --- payments -----------------------------------------------------------------------------

    def _idempotency_key(self) -> str:
        try:
            return idempotency_key(self.headers.get_all("Idempotency-Key") or [])
        except InvalidInput as exc:
            missing = "Idempotency-Key" not in self.headers
            raise Problem(
                400, "missing-idempotency-key" if missing else "invalid-idempotency-key", str(exc)
            ) from None

    def _charge(self) -> None:
        self._check_access(MONEY_ROUTES, self.server.money_token, with_body=True)
        raw = self._read_body(MAX_BODY_BYTES)
        key = self._idempotency_key()
        request = _valid(lambda: charge_request(key, raw))
        fault = self.server.faults.take("charge", request.order_id)
        if fault is not None and fault.kind == "refuse":
            raise Problem(
                503, "refused", "injected fault: refused, nothing charged", {"Retry-After": "1"}
            )
        result = self.server.ledger.charge(request)
        if fault is not None:
            self._apply_fault(fault)
        if not result.created and not result.payment.same_request(request):
            raise Problem(
                422,
                "idempotency-key-reused",
                "this Idempotency-Key was first used for a different charge "
                f"(orderId, amount, currency); payment {result.payment.payment_id} stands",
            )
        if result.created:
            self._send_json(201, result.payment.to_json())
        else:
            self._send_json(200, result.payment.to_json(), {"Idempotent-Replayed": "true"})

    def _refund(self) -> None:
        self._check_access(MONEY_ROUTES, self.server.money_token, with_body=True)
        raw = self._read_body(MAX_BODY_BYTES)
        key = self._idempotency_key()
        request = _valid(lambda: refund_request(key, raw))
        payment = self.server.ledger.payment(request.payment_id)
        fault = self.server.faults.take("refund", None if payment is None else payment.order_id)
        if fault is not None and fault.kind == "refuse":
            raise Problem(
                503, "refused", "injected fault: refused, nothing refunded", {"Retry-After": "1"}
            )
        outcome: RefundResult | RefundRefused
        try:
            outcome = self.server.ledger.refund(request)
        except RefundRefused as refused:
            outcome = refused
        if fault is not None:
            self._apply_fault(fault)
        if isinstance(outcome, RefundRefused):
            raise Problem(REFUSAL_STATUS[outcome.reason], outcome.reason, outcome.detail)
        if not outcome.created and not outcome.refund.same_request(request):
            raise Problem(
                422,
                "idempotency-key-reused",
                "this Idempotency-Key was first used for a different refund "
                f"(paymentId, amount, currency); refund {outcome.refund.refund_id} stands",
            )
        if outcome.created:
            self._send_json(201, outcome.refund.to_json())
        else:
            self._send_json(200, outcome.refund.to_json(), {"Idempotent-Replayed": "true"})

    def _apply_fault(self, fault: FaultRule) -> None:
        if fault.kind == "fail_after_charge":
            raise Problem(500, "failed-after-charge", "injected fault: charged, then failed")
        if fault.kind == "fail_after_refund":
            raise Problem(
                500, "failed-after-refund", "injected fault: the refund was processed, then failed"
            )
        # delay: the effect is durable; only the answer is late. A stop cuts the wait short.
        self.server.stopping.wait(fault.delay_seconds)

    def _list(self) -> None:
        query = _valid(lambda: list_query(self.query))
        page = self.server.ledger.list(query.filters.get("orderId"), query.after, query.limit)
        self._send_page("payments", query, [(p.seq, p.to_json()) for p in page])

    def _list_refunds(self) -> None:
        query = _valid(lambda: list_query(self.query, frozenset({"orderId", "paymentId"})))
        page = self.server.ledger.list_refunds(
            query.filters.get("orderId"), query.filters.get("paymentId"), query.after, query.limit
        )
        self._send_page("refunds", query, [(r.seq, r.to_json()) for r in page])

    def _send_page(self, name: str, query: ListQuery, page: list[tuple[int, object]]) -> None:
        self._send_json(
            200,
            {
                name: [item for _, item in page],
                # Only a full page can have a next one.
                "next": str(page[-1][0]) if len(page) == query.limit else None,
            },
        )

    # --- faults and health --------------------------------------------------------------------

    def _add_fault(self) -> None:
        self._check_fault_access(with_body=True)
        raw = self._read_body(MAX_FAULT_BODY_BYTES)
        rule = _valid(lambda: fault_rule_from(json_body(raw)))
        self._send_json(201, self.server.faults.add(rule).to_json())

    def _describe_faults(self) -> None:
        self._check_fault_access(with_body=False)
        self._send_json(200, {"faults": self.server.faults.describe()})

    def _clear_faults(self) -> None:
        self._check_fault_access(with_body=False)
        self.server.faults.clear()
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _check_fault_access(self, *, with_body: bool) -> None:
        self._check_access(FAULT_ROUTES, self.server.fault_token, with_body=with_body)

    def _check_access(self, routes: GuardedRoutes, token: str, *, with_body: bool) -> None:
        """A Problem unless the caller holds the routes' token and is no web page
        (fault_access.py)."""
        refusal = request_refusal(
            routes,
            token,
            self.server.hosts,
            origins=self.headers.get_all("Origin") or [],
            authorizations=self.headers.get_all("Authorization") or [],
            content_types=(self.headers.get_all("Content-Type") or []) if with_body else None,
        )
        if refusal is not None:
            self.close_connection = True  # a body, if any, is unread
            raise Problem(refusal.status, refusal.slug, refusal.detail, refusal.headers)

    def _health(self) -> None:
        self._send_json(200, {"status": "ok"})

    # --- the wire -----------------------------------------------------------------------------

    def _read_body(self, limit: int) -> bytes:
        """Exactly Content-Length bytes, at most `limit`; otherwise a problem (and the
        connection is closed, since its remaining bytes cannot be trusted to frame a request)."""
        if self.headers.get_all("Transfer-Encoding"):
            self.close_connection = True
            raise Problem(411, "length-required", "send the body with Content-Length, not chunked")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            self.close_connection = True
            raise Problem(411, "length-required", "a Content-Length header is required")
        text = lengths[0].strip()
        if len(lengths) > 1 or not (text.isascii() and text.isdigit()):
            self.close_connection = True
            raise Problem(400, "invalid-content-length", "one decimal Content-Length is required")
        if len(text) > 12 or int(text) > limit:  # no int() of an unbounded digit string
            self.close_connection = True
            raise Problem(413, "body-too-large", f"the body may be at most {limit} bytes")
        length = int(text)
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            raise Problem(400, "incomplete-body", "the body ended before its Content-Length")
        return body

    def _send_json(
        self,
        status: int,
        body: object,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        data = json.dumps(body, ensure_ascii=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_problem(self, problem: Problem) -> None:
        self._send_json(problem.status, problem.body(), problem.headers, PROBLEM_JSON)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's own refusals (request line, headers, version) as problems too."""
        self.close_connection = True
        slug = HTTPStatus(code).phrase.lower().replace(" ", "-")
        body = json.dumps(Problem(code, slug, message or HTTPStatus(code).phrase).body()).encode()
        self.send_response(code)
        self.send_header("Content-Type", PROBLEM_JSON)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log_requests:
            super().log_message(format, *args)


def _valid(parse: Callable[[], T]) -> T:
    try:
        return parse()
    except InvalidInput as exc:
        raise Problem(400, "invalid-request", str(exc)) from None
