"""A small asyncio HTTP/1.1 server with keep-alive, enough for the SDK's two transports.

Everything a client sends before authentication is bounded (see `HttpLimits`): line lengths,
header count and bytes, body size, bodies buffered over all connections, connections, and the
time each part of a request may take. Framing it cannot trust is answered with a JSON error
and the connection is closed, since the next request's start is then unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import sys
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

from .http_limits import BodyBudget, HttpLimits


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]

_TCHAR = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_FIELD_NAME = re.compile(_TCHAR + rb"+")
_REQUEST_LINE = re.compile(_TCHAR + rb"+ [\x21-\x7e]+ HTTP/1\.[01]")
_FIELD_VALUE_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})[ \t]*(?:;[\x09\x20-\x7e]*)?")
_MAX_CHUNK_LINE_BYTES = 1024
# Names whose repetition would make the message's framing ambiguous (request smuggling).
_SINGLE_VALUED = frozenset({"content-length", "transfer-encoding", "host"})

_ERROR_CODES: dict[int, str] = {
    400: "BadRequest",
    408: "RequestTimeout",
    413: "RequestEntityTooLarge",
    414: "RequestUriTooLong",
    431: "RequestHeaderFieldsTooLarge",
    500: "InternalServerError",
    501: "NotImplemented",
    503: "ServiceUnavailable",
}


class HttpError(Exception):
    """A request the server answers with `status` and then closes the connection on."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}

    def response(self) -> Response:
        code = _ERROR_CODES.get(self.status, "Error")
        body = json.dumps({"code": code, "message": self.message}).encode()
        return Response(self.status, body, {"Content-Type": "application/json", **self.headers})


class _ClientGone(Exception):
    """The client closed or stayed idle between requests: there is nothing to answer."""


def _busy(what: str) -> HttpError:
    # Retry-After plus the header the Cosmos SDK reads: a busy emulator is worth a retry.
    return HttpError(
        503,
        f"cosmos-emulator is busy: {what}; retry later.",
        {"Retry-After": "1", "x-ms-retry-after-ms": "1000"},
    )


async def _read_line(reader: asyncio.StreamReader, limit: int, too_long: HttpError) -> bytes:
    """One line without its CRLF (or bare LF), at most `limit` bytes long."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise too_long from None
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _ClientGone from None
        raise HttpError(400, "The request ended in the middle of a line.") from None
    if len(line) > limit + 2:
        raise too_long
    return line[:-2] if line.endswith(b"\r\n") else line[:-1]


class _RequestReader:
    """Reads one request off a connection, enforcing every limit as the bytes arrive."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limits: HttpLimits,
        budget: BodyBudget,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        self.budget = budget
        self.reserved = 0  # body bytes this request holds in the shared budget

    def release(self) -> None:
        self.budget.release(self.reserved)
        self.reserved = 0

    async def read(self) -> Request:
        limits = self.limits
        try:
            async with asyncio.timeout(limits.idle_timeout_s):
                line = await self._request_line()
        except TimeoutError:
            raise _ClientGone from None
        try:
            async with asyncio.timeout(limits.header_timeout_s):
                method, target, version = self._parse_request_line(line)
                headers = await self._header_block(limits.max_header_count)
        except TimeoutError:
            raise HttpError(408, "The request headers took too long to arrive.") from None
        if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
            headers["connection"] = "close"
        try:
            async with asyncio.timeout(limits.body_timeout_s):
                body = await self._body(headers)
        except TimeoutError:
            self.release()
            raise HttpError(408, "The request body took too long to arrive.") from None
        except BaseException:
            self.release()
            raise
        return Request(method, target, headers, body)

    async def _request_line(self) -> bytes:
        too_long = HttpError(
            414, f"The request line is longer than {self.limits.max_request_line_bytes} bytes."
        )
        line = await _read_line(self.reader, self.limits.max_request_line_bytes, too_long)
        if not line:  # RFC 9112 2.2: one empty line before a request is tolerated
            line = await _read_line(self.reader, self.limits.max_request_line_bytes, too_long)
        return line

    @staticmethod
    def _parse_request_line(line: bytes) -> tuple[str, str, str]:
        if not _REQUEST_LINE.fullmatch(line):
            raise HttpError(400, "Malformed request line (expected 'METHOD /target HTTP/1.1').")
        method, target, version = line.decode("ascii").split(" ")
        return method.upper(), target, version

    async def _header_block(self, max_count: int) -> dict[str, str]:
        limits = self.limits
        too_long = HttpError(
            431, f"A header line is longer than {limits.max_header_line_bytes} bytes."
        )
        headers: dict[str, str] = {}
        count = 0
        total = 0
        while True:
            line = await _read_line(self.reader, limits.max_header_line_bytes, too_long)
            if not line:
                return headers
            count += 1
            total += len(line) + 2
            if count > max_count:
                raise HttpError(431, f"More than {max_count} header fields.")
            if total > limits.max_header_bytes:
                raise HttpError(431, f"The header fields exceed {limits.max_header_bytes} bytes.")
            raw_name, colon, raw_value = line.partition(b":")
            if not colon or not _FIELD_NAME.fullmatch(raw_name):
                raise HttpError(400, "Malformed header line (expected 'Name: value').")
            raw_value = raw_value.strip(b" \t")
            if _FIELD_VALUE_CONTROL.search(raw_value):
                raise HttpError(400, "A header value contains control characters.")
            name = raw_name.decode("ascii").lower()
            value = raw_value.decode("utf-8", "replace")
            if name in headers:
                if name in _SINGLE_VALUED:
                    raise HttpError(400, f"The header {name} appears more than once.")
                value = f"{headers[name]}, {value}"
            headers[name] = value

    async def _body(self, headers: dict[str, str]) -> bytes:
        limits = self.limits
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if coding is not None and length is not None:
            raise HttpError(400, "Both Transfer-Encoding and Content-Length are present.")
        if coding is not None:
            if coding.strip().lower() != "chunked":
                raise HttpError(501, f"Unsupported transfer coding {coding[:40]!r}.")
            self._continue_if_asked(headers)
            return await self._chunked_body()
        if length is None:
            return b""
        if not _CONTENT_LENGTH.fullmatch(length):
            raise HttpError(400, "Content-Length must be a decimal number of bytes.")
        size = int(length)
        if size > limits.max_body_bytes:
            raise HttpError(
                413, f"The request body ({size} bytes) exceeds {limits.max_body_bytes} bytes."
            )
        if size == 0:
            return b""
        self._reserve(size)
        self._continue_if_asked(headers)
        return await self.reader.readexactly(size)

    def _reserve(self, size: int) -> None:
        if not self.budget.reserve(size):
            raise _busy("too many request bodies are being received at once")
        self.reserved += size

    def _continue_if_asked(self, headers: dict[str, str]) -> None:
        if headers.get("expect", "").lower() == "100-continue":
            self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def _chunked_body(self) -> bytes:
        limits = self.limits
        chunks: list[bytes] = []
        total = 0
        bad_size = HttpError(400, "Malformed chunk size line.")
        while True:
            line = await _read_line(self.reader, _MAX_CHUNK_LINE_BYTES, bad_size)
            match = _CHUNK_SIZE.fullmatch(line)
            if match is None:
                raise bad_size
            size = int(match.group(1), 16)
            if size == 0:
                break
            total += size
            if total > limits.max_body_bytes:
                raise HttpError(413, f"The request body exceeds {limits.max_body_bytes} bytes.")
            if len(chunks) >= limits.max_chunks:
                raise HttpError(400, f"The body has more than {limits.max_chunks} chunks.")
            self._reserve(size)
            chunks.append(await self.reader.readexactly(size))
            if await _read_line(self.reader, 0, bad_size) != b"":
                raise HttpError(400, "A chunk is longer than its declared size.")
        # Trailer fields count against the same limits as headers, then are dropped.
        await self._header_block(max(0, limits.max_header_count - len(chunks)))
        return b"".join(chunks)


def _serialize(response: Response, keep_alive: bool, *, head_only: bool = False) -> bytes:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Status"
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    headers = dict(response.headers)
    headers["Content-Length"] = str(len(response.body))
    headers.setdefault("Date", formatdate(usegmt=True))
    headers["Connection"] = "keep-alive" if keep_alive else "close"
    lines.extend(f"{k}: {v}" for k, v in headers.items())
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
    return head if head_only else head + response.body


class HttpServer:
    def __init__(
        self,
        handler: Handler,
        ssl_context: ssl.SSLContext | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self._limits = limits or HttpLimits()
        self._budget = BodyBudget(self._limits.max_buffered_body_bytes)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._no_connections = asyncio.Event()
        self._no_connections.set()

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._serve_connection,
            host,
            port,
            ssl=self._ssl,
            limit=self._limits.read_buffer_bytes,
            backlog=512,
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Aborted, not closed: a TLS close waits for the client's goodbye, and the loop stops
        # right after this; each connection's task then ends and lets its socket go.
        for writer in list(self._connections):
            writer.transport.abort()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_connections.wait(), 2)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if len(self._connections) >= self._limits.max_connections:
            # No lingering here: lingering is what a flood of connections must not get.
            error = _busy(f"{self._limits.max_connections} connections are open")
            with contextlib.suppress(Exception):
                writer.write(_serialize(error.response(), keep_alive=False))
                writer.close()
            return
        self._connections.add(writer)
        self._no_connections.clear()
        try:
            await self._serve_requests(reader, writer)
        except TimeoutError:  # the client did not read its response (before OSError: a subclass)
            writer.transport.abort()
        except (_ClientGone, ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            return
        finally:
            self._connections.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
            if not self._connections:
                self._no_connections.set()

    async def _serve_requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            incoming = _RequestReader(reader, writer, self._limits, self._budget)
            try:
                request = await incoming.read()
            except HttpError as error:
                await self._answer_and_close(reader, writer, error)
                return
            try:
                response = await self._respond(request)
            finally:
                incoming.release()
            keep_alive = request.headers.get("connection", "").lower() != "close"
            writer.write(_serialize(response, keep_alive, head_only=request.method == "HEAD"))
            async with asyncio.timeout(self._limits.write_timeout_s):
                await writer.drain()
            if not keep_alive:
                return

    async def _respond(self, request: Request) -> Response:
        try:
            return await self._handler(request)
        except Exception as exc:  # a handler bug: answer it loudly rather than drop the socket
            traceback.print_exc(file=sys.stderr)
            return HttpError(500, f"cosmos-emulator bug: {exc!r}").response()

    async def _answer_and_close(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, error: HttpError
    ) -> None:
        writer.write(_serialize(error.response(), keep_alive=False))
        limits = self._limits
        with contextlib.suppress(TimeoutError, ConnectionError, OSError):
            async with asyncio.timeout(limits.linger_s):
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                dropped = 0
                while dropped < limits.linger_bytes:
                    data = await reader.read(64 * 1024)
                    if not data:
                        break
                    dropped += len(data)
