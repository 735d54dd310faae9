"""`Idempotency-Key` for FastAPI over the same record-store port as the message consumers.

The first request under a key claims a record (the create is the lock) and runs; its response
is recorded and replayed to every retry of the same request: the same method, path, query
(parameters in any order) and body. A retry that differs in any of them gets 422; one that
arrives while the first still runs gets 409 with `Retry-After`; one whose first attempt crashed
(its lease ended, by the database's clock) takes the record over.

Once the endpoint calls `claim.complete`, its effect may have happened, and nothing releases the
claim: a completion write the store fails is retried in place, and if it still fails the request
is answered 503 (`response-not-recorded`, with `Retry-After`) while the record stays in progress
and a background write keeps trying (`exactly_once._claims.CompletionRetries`). Only an
exception the endpoint raises before it completes releases the claim.

The body is read by the dependency, at most `max_body_bytes` of it: a `Content-Length` over the
limit is refused before a byte is read, a longer stream as soon as it passes the limit. The
endpoint parses `claim.body`; a body parameter would make FastAPI read the whole body before
any dependency runs.

Every refusal is a `KeyProblem` (a FastAPI `HTTPException`) carrying its problem from
`exactly_once._problems`; `answer_problems(app)` installs the handler that answers it as
`application/problem+json` (RFC 9457), as draft-ietf-httpapi-idempotency-key-header-07 §2.7
asks. A replay carries `Idempotent-Replayed: true`.

    keys = IdempotencyKeys(store, scope="greetings")
    answer_problems(app)

    @app.post("/greetings")
    async def create(claim: Annotated[KeyClaim, Depends(keys)]) -> Response:
        if claim.replay is not None:
            return claim.replay
        greeting = Greeting.model_validate_json(claim.body)
        ...
        return await claim.complete(201, {"id": ...})
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

try:
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse, Response
except ModuleNotFoundError as missing:  # an extra, not a dependency: say which to install
    raise ModuleNotFoundError(
        "IdempotencyKeys (exactly_once.http) needs FastAPI: "
        "pip install 'exactly-once-azure[fastapi]'",
        name=missing.name,
    ) from missing

from exactly_once._claims import CompletionRetries
from exactly_once._ports import RecordStore
from exactly_once._problems import (
    DEFAULT_TYPE_PREFIX,
    PROBLEM_JSON,
    REPLAYED_HEADER,
    Problem,
    body_too_large,
    invalid_content_length,
    invalid_key,
    key_fault_problem,
    key_reused,
    request_in_progress,
    response_not_recorded,
)
from exactly_once._records import (
    DEFAULT_EXPIRES_AFTER_SECONDS,
    DEFAULT_LEASE_SECONDS,
    JsonInput,
    JsonValue,
    Record,
    RecordStatus,
    body_fingerprint,
    fingerprint,
)
from exactly_once.exceptions import (
    CompletionFailedError,
    CorruptRecordError,
    InProgressElsewhereError,
    PayloadMismatchError,
)
from exactly_once.keys import (
    HEADER,
    MAX_RETRY_AFTER_SECONDS,
    KeyedRequests,
    key_fault,
    key_record_id,
    retry_after_seconds,
)

__all__ = [
    "DEFAULT_EXPIRES_AFTER_SECONDS",
    "DEFAULT_MAX_REQUEST_BYTES",
    "HEADER",
    "DescribeRequest",
    "IdempotencyKeys",
    "KeyClaim",
    "KeyProblem",
    "KeyedRequest",
    "answer_problems",
    "problem_response",
    "request_fingerprint",
    "validate_key",
]

# An HTTP request body above this is refused (413) before it is hashed: the request hash decodes
# JSON, and no request may cost more than its size allows. Raise it with the endpoint's own
# limit. (A Service Bus message body has its own bound: `DEFAULT_MAX_MESSAGE_BYTES`.)
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024


@dataclass(frozen=True)
class KeyedRequest:
    """What a key's record keeps of its request: the fingerprint a retry is compared by
    (draft-07 §2.4 leaves it to the server) and `data` of the host's own, for its readers (an
    operator's tool, a lookup by a business id)."""

    request_hash: str
    data: JsonValue = None


# The request and its body (as read, within the limit) -> what its key's record keeps. It runs
# after the key is checked and before it is claimed: raising refuses a request the endpoint
# would refuse anyway (a body that does not validate) without claiming its key.
DescribeRequest = Callable[[Request, bytes], KeyedRequest]


class KeyProblem(HTTPException):
    """A refusal of the dependency: an `HTTPException` (its status, detail and headers are the
    problem's, so an app without `answer_problems` still answers the right status) that
    carries the problem details `answer_problems` renders."""

    def __init__(self, problem: Problem, type_prefix: str = DEFAULT_TYPE_PREFIX) -> None:
        super().__init__(problem.status, problem.detail, headers=dict(problem.headers) or None)
        self.problem = problem
        self.type_prefix = type_prefix


def problem_response(problem: Problem, type_prefix: str = DEFAULT_TYPE_PREFIX) -> JSONResponse:
    """The problem as an `application/problem+json` response with its headers."""
    return JSONResponse(
        problem.body(type_prefix),
        status_code=problem.status,
        headers=dict(problem.headers),
        media_type=PROBLEM_JSON,
    )


def answer_problems(app: FastAPI) -> None:
    """Answer every `KeyProblem` raised in `app` as problem+json: one call per app."""

    async def answer(_: Request, exc: Exception) -> Response:
        if not isinstance(exc, KeyProblem):  # Starlette calls it for KeyProblem only
            raise exc
        return problem_response(exc.problem, exc.type_prefix)

    app.add_exception_handler(KeyProblem, answer)


class KeyClaim:
    """What the endpoint gets: the response to replay, or the claim to complete."""

    def __init__(
        self,
        requests: KeyedRequests,
        owned: Record | None,
        replay: JSONResponse | None,
        body: bytes = b"",
        *,
        not_recorded: KeyProblem | None = None,
    ) -> None:
        self._requests = requests
        self._owned = owned
        self.replay = replay
        # The request's body as the dependency read it (within `max_body_bytes`): parse this.
        self.body = body
        self.completed = False
        # Set when `complete` is first called: the endpoint's effect may have happened, so the
        # claim is never released after it, whatever the completion write does.
        self.completion_attempted = False
        self._not_recorded = not_recorded or KeyProblem(response_not_recorded(1))
        # The claim was taken over from a request whose lease ended (it crashed, or ran too
        # long): the endpoint runs again, which its effects must tolerate.
        self.took_over = owned is not None and owned.attempts > 1

    async def complete(
        self, status_code: int, body: JsonInput, headers: Mapping[str, str] | None = None
    ) -> JSONResponse:
        """Record the response (replayed to every retry) and return it. A request whose lease
        ended while it ran, and was taken over by a retry, still answers: the retry records
        the same response (the store keeps the retry's).

        Raises a `KeyProblem` 503 (`response-not-recorded`, with `Retry-After`) when the store
        fails every attempt to record it: the claim stays in progress, never released."""
        if self._owned is None:
            raise RuntimeError("a replayed request has nothing to complete")
        stored: JsonInput = {"statusCode": status_code, "body": body, "headers": headers or {}}
        self.completion_attempted = True
        try:
            await self._requests.finish(self._owned, stored)
        except CompletionFailedError as failed:
            raise self._not_recorded from failed
        self.completed = True
        return _response(stored)

    async def release(self) -> None:
        """Forget the claim, so that a retry runs the request again: only while the endpoint
        has not tried to complete it (after that, its effect may have happened)."""
        if self._owned is not None and not self.completion_attempted:
            await self._requests.release(self._owned)


class IdempotencyKeys:
    """The FastAPI dependency: claims the request's key in `scope`, yields a `KeyClaim`, and
    releases the claim when the endpoint fails (or returns) before it tries to complete it.

    `describe` chooses the fingerprint and the record's data (`KeyedRequest`; by default the
    whole request's fingerprint, `request_fingerprint`, and no data); `retry_after_cap` bounds
    the `Retry-After` of a 409 and a 503; `completion` says how a response the store fails to
    record is retried (in place, then in the background)."""

    def __init__(
        self,
        store: RecordStore,
        *,
        scope: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        expires_after_seconds: int = DEFAULT_EXPIRES_AFTER_SECONDS,
        owner: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        problem_type_prefix: str = DEFAULT_TYPE_PREFIX,
        describe: DescribeRequest | None = None,
        retry_after_cap: int = MAX_RETRY_AFTER_SECONDS,
        completion: CompletionRetries | None = None,
    ) -> None:
        self._requests = KeyedRequests(store, completion)
        self._describe = describe
        self._retry_after_cap = retry_after_cap
        self.problem_type_prefix = problem_type_prefix
        self.max_body_bytes = max_body_bytes
        self._scope = scope
        self._lease_seconds = lease_seconds
        self._expires_after_seconds = expires_after_seconds
        # Each request's claim is owned by `<owner>-<random>`.
        self._owner = owner or "http"

    async def __call__(self, request: Request) -> AsyncIterator[KeyClaim]:
        """Claim, then hand the claim to the endpoint; release it if the endpoint fails before
        it completes."""
        async with self.claimed(request) as claim:
            yield claim

    @asynccontextmanager
    async def claimed(self, request: Request) -> AsyncIterator[KeyClaim]:
        """The dependency as a context manager, for a host whose own dependency builds this
        one per request (a store or a scope known only then): the same checks, in the same
        order, and the claim released if the block fails before it tries to complete it."""
        sent = request.headers.getlist(HEADER)
        if len(sent) > 1:
            # Which one the client meant is a guess; a guess would run the request twice
            # (draft-07 §2.1: a client MUST NOT send more than one).
            raise self._refuse(
                invalid_key(f"the {HEADER} header must be sent once, not {len(sent)} times")
            )
        # The key before the body: a request without a usable key is refused without reading
        # a byte of it, whatever its size.
        key = self._check_key(sent[0] if sent else None)
        body = await self._bounded_body(request)
        described = None if self._describe is None else self._describe(request, body)
        claim = await self.claim(
            key,
            request.method,
            request.url.path,
            body,
            query=request.url.query,
            described=described,
        )
        try:
            yield claim
        finally:
            await claim.release()

    async def _bounded_body(self, request: Request) -> bytes:
        """The body, read no further than the limit: `Content-Length` is judged before any
        byte is read, and a stream without one (chunked) is cut off once it passes the limit,
        so a refused body costs at most the limit plus one chunk of memory."""
        declared = request.headers.getlist("content-length")
        if declared:
            if len(declared) > 1 or not (declared[0].isascii() and declared[0].isdigit()):
                raise self._refuse(
                    invalid_content_length("the Content-Length header must be one decimal number")
                )
            if len(declared[0]) > 20 or int(declared[0]) > self.max_body_bytes:
                raise self._refuse(
                    body_too_large(self._too_large(f"announces {declared[0]} bytes"))
                )
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._refuse(
                    body_too_large(self._too_large(f"has over {self.max_body_bytes} bytes"))
                )
            chunks.append(chunk)
        body = b"".join(chunks)
        # Starlette reads `_body` first, so the endpoint (or FastAPI) can read the body again.
        request._body = body
        return body

    def _refuse(self, problem: Problem) -> KeyProblem:
        return KeyProblem(problem, self.problem_type_prefix)

    def _too_large(self, found: str) -> str:
        return f"the body {found}; at most {self.max_body_bytes} are taken"

    def _check_key(self, key: str | None) -> str:
        fault = key_fault(key)
        if fault is not None:
            raise self._refuse(key_fault_problem(fault))
        return str(key)

    async def claim(
        self,
        key: str | None,
        method: str,
        path: str,
        body: bytes,
        *,
        query: str = "",
        described: KeyedRequest | None = None,
    ) -> KeyClaim:
        """The claim for one request: owned (run it), or a replay; else a `KeyProblem`.
        `described` replaces the default fingerprint of method, path, query and body."""
        key = self._check_key(key)
        if described is None:
            described = KeyedRequest(request_fingerprint(method, path, query, body))
        record_key = key_record_id(self._scope, key)
        wanted = Record(
            key=record_key,
            partition=record_key,
            request_hash=described.request_hash,
            status=RecordStatus.IN_PROGRESS,
            owner=f"{self._owner}-{uuid.uuid4().hex[:12]}",
            lease_seconds=self._lease_seconds,
            data=described.data,
            expires_after_seconds=self._expires_after_seconds,
        )
        try:
            owned = await self._requests.begin(wanted)
        except PayloadMismatchError:
            raise self._refuse(
                key_reused(f"the {HEADER} {key!r} was used with another request; use a new key")
            ) from None
        except InProgressElsewhereError as busy:
            raise self._refuse(
                request_in_progress(retry_after_seconds(busy.seconds_left, self._retry_after_cap))
            ) from None
        if owned.status is RecordStatus.COMPLETED:
            replay = _response(owned.result)
            replay.headers[REPLAYED_HEADER] = "true"
            return KeyClaim(self._requests, None, replay, body)
        # A retry is told to come back when a refusal in progress would be: the 409's wait.
        retry_after = retry_after_seconds(self._lease_seconds, self._retry_after_cap)
        not_recorded = self._refuse(response_not_recorded(retry_after))
        return KeyClaim(self._requests, owned, None, body, not_recorded=not_recorded)


def request_fingerprint(method: str, path: str, query: str, body: bytes) -> str:
    """The request hash of the whole request: method, path, the query's parameters sorted by
    name (a name's repeated values keep their order: `?a=1&a=2` is not `?a=2&a=1`) and the
    body's canonical JSON. A request without a query hashes as it did before queries counted,
    so keys recorded by an earlier version still replay."""
    parts: list[JsonValue] = [method, path, body_fingerprint(body)]
    if query:
        pairs = sorted(parse_qsl(query, keep_blank_values=True), key=lambda pair: pair[0])
        parts.append(urlencode(pairs))
    return fingerprint(parts)


def validate_key(value: str | None) -> str:
    """The key as sent, if it is 1..255 printable ASCII characters; else a `KeyProblem` (400)."""
    fault = key_fault(value)
    if fault is not None:
        raise KeyProblem(key_fault_problem(fault))
    return str(value)


def _response(stored: JsonInput) -> JSONResponse:
    """The recorded response, replayed; `CorruptRecordError` when the record holds none (it
    was read back from the store: untrusted, like any stored record)."""
    if not isinstance(stored, Mapping):
        raise CorruptRecordError(f"the record holds no response (found a {type(stored).__name__})")
    status, body, headers = stored.get("statusCode"), stored.get("body"), stored.get("headers")
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise CorruptRecordError(f"the recorded response has no HTTP status (found {status!r:.40})")
    texts = (
        {name: value for name, value in headers.items() if isinstance(value, str)}
        if isinstance(headers, Mapping)
        else {}
    )
    if not isinstance(headers, Mapping) or len(texts) != len(headers):
        raise CorruptRecordError("the recorded response's headers are not names and texts")
    return JSONResponse(content=body, status_code=status, headers=texts)
