"""The local servers answer only for their own host names (DNS rebinding).

A web page can re-bind its own domain to 127.0.0.1: the browser then sends the page's requests
to our port with `Host: evil.example`, and calls them same-origin (its `Origin` matches, and
`Sec-Fetch-Site` says same-origin), so fetch metadata cannot tell. The `Host` header can: a
request naming a host this server does not serve is refused with 421 before any route runs.

Only the local servers (`orders serve`, `orders up`) check: the deployed Functions app is
reached through Azure's front end under Azure's host names, which route by host themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from orders.entrypoints.http_problems import problem

# The names a local server answers for with its own port, besides the address it is bound to.
LOCAL_NAMES = ("localhost", "127.0.0.1")
MAX_HOST_LENGTH = 300
DEFAULT_HTTP_PORT = 80


def parse_host(text: str) -> tuple[str, int | None] | None:
    """`name`, `name:port` or `[v6]:port` as (lowercase name, port or None); None when it is
    not one (bounded and total: the header is untrusted)."""
    if not text or len(text) > MAX_HOST_LENGTH or not text.isascii():
        return None
    if any(c in text for c in "/?#@\\ \t") or not text.isprintable():
        return None
    try:
        parts = urlsplit("//" + text)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port


@dataclass(frozen=True)
class AllowedHosts:
    """`extra` entries: `name:port` matches exactly, a bare `name` matches with the server's
    own port (a container's published port differs: name it)."""

    extra: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowedHosts:
        parsed = []
        for entry in entries:
            host = parse_host(entry.strip())
            if host is None:
                raise ValueError(f"not a host or host:port: {entry!r}")
            parsed.append(host)
        return cls(tuple(parsed))

    def allows(self, host_header: str | None, server: tuple[str, int | None] | None) -> bool:
        host = parse_host(host_header or "")
        if host is None:
            return False
        name, port = host[0], host[1] if host[1] is not None else DEFAULT_HTTP_PORT
        bound_name, bound_port = server if server is not None else ("", None)
        if port == bound_port and name in {*LOCAL_NAMES, bound_name.lower()}:
            return True
        return any(
            name == allowed and port == (allowed_port or bound_port)
            for allowed, allowed_port in self.extra
        )


class HostCheck:
    """ASGI middleware: refuse (421 problem+json) any HTTP request for a host not allowed."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self._app = app
        self._allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self._app(scope, receive, send)
            return
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        server = scope.get("server")
        host = hosts[0].decode("latin-1") if len(hosts) == 1 else None
        if self._allowed.allows(host, (server[0], server[1]) if server else None):
            await self._app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        shown = (host or "")[:100].encode("ascii", "backslashreplace").decode()
        response = problem(
            421,
            "misdirected-request",
            "Misdirected Request",
            f"this server does not answer for host {shown!r}: use the address it printed, "
            "or add the name to ORDERS_ALLOWED_HOSTS",
        )
        await response(scope, receive, send)
