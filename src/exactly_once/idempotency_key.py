"""`Idempotency-Key` for FastAPI over the same record-store port as the message consumers.

The first request under a key claims a record (the create is the lock) and runs; its response
is recorded and replayed to every retry with the same payload. A retry with another payload
gets 422; one that arrives while the first still runs gets 409 with `Retry-After`; one whose
first attempt crashed (its lease ended, by the database's clock) takes the record over.

    keys = IdempotencyKeys(store, scope="greetings")

    @app.post("/greetings")
    async def create(claim: Annotated[KeyClaim, Depends(keys)]) -> Response:
        if claim.replay is not None:
            return claim.replay
        ...
        return await claim.complete(201, {"id": ...})
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse

from exactly_once.exceptions import (
    CorruptRecordError,
    InProgressElsewhereError,
    PayloadMismatchError,
)
from exactly_once.keys import (
    MAX_KEY_LENGTH,
    KeyedRequests,
    KeyFault,
    key_fault,
    key_record_id,
    retry_after_seconds,
)
from exactly_once.ports import RecordStore
from exactly_once.records import (
    DEFAULT_LEASE_SECONDS,
    JsonInput,
    Record,
    RecordStatus,
    body_fingerprint,
    fingerprint,
)

HEADER = "Idempotency-Key"
# How long a completed key is replayed: a day, as the payment APIs that made the header common.
DEFAULT_EXPIRES_AFTER_SECONDS = 24 * 3600
# A body above this is refused (413) before it is hashed: the request hash decodes JSON, and
# no request may cost more than its size allows. Raise it with the endpoint's own limit.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class KeyClaim:
    """What the endpoint gets: the response to replay, or the claim to complete."""

    def __init__(
        self, requests: KeyedRequests, owned: Record | None, replay: JSONResponse | None
    ) -> None:
        self._requests = requests
        self._owned = owned
        self.replay = replay
        self.completed = False

    async def complete(
        self, status_code: int, body: JsonInput, headers: Mapping[str, str] | None = None
    ) -> JSONResponse:
        """Record the response (replayed to every retry) and return it. A request whose lease
        ended while it ran, and was taken over by a retry, still answers: the retry records
        the same response (the store keeps the retry's)."""
        if self._owned is None:
            raise RuntimeError("a replayed request has nothing to complete")
        stored: JsonInput = {"statusCode": status_code, "body": body, "headers": headers or {}}
        await self._requests.finish(self._owned, stored)
        self.completed = True
        return _response(stored)

    async def release(self) -> None:
        """Forget the claim, so that a retry runs the request again."""
        if self._owned is not None and not self.completed:
            await self._requests.release(self._owned)


class IdempotencyKeys:
    """The FastAPI dependency: claims the request's key in `scope`, yields a `KeyClaim`, and
    releases the claim when the endpoint fails (or returns) without completing it."""

    def __init__(
        self,
        store: RecordStore,
        *,
        scope: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        expires_after_seconds: int = DEFAULT_EXPIRES_AFTER_SECONDS,
        owner: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._requests = KeyedRequests(store)
        self.max_body_bytes = max_body_bytes
        self._scope = scope
        self._lease_seconds = lease_seconds
        self._expires_after_seconds = expires_after_seconds
        # Each request's claim is owned by `<owner>-<random>`.
        self._owner = owner or "http"

    async def __call__(self, request: Request) -> AsyncIterator[KeyClaim]:
        """Claim, then hand the claim to the endpoint; release it if the endpoint fails."""
        sent = request.headers.getlist(HEADER)
        if len(sent) > 1:
            # Which one the client meant is a guess; a guess would run the request twice.
            raise HTTPException(
                400, f"the {HEADER} header must be sent once, not {len(sent)} times"
            )
        body = await request.body()
        if len(body) > self.max_body_bytes:
            raise HTTPException(
                413, f"the body has {len(body)} bytes; at most {self.max_body_bytes} are taken"
            )
        claim = await self.claim(sent[0] if sent else None, request.method, request.url.path, body)
        try:
            yield claim
        finally:
            await claim.release()

    async def claim(self, key: str | None, method: str, path: str, body: bytes) -> KeyClaim:
        """The claim for one request: owned (run it), or a replay; else an `HTTPException`."""
        key = validate_key(key)
        record_key = key_record_id(self._scope, key)
        wanted = Record(
            key=record_key,
            partition=record_key,
            request_hash=fingerprint([method, path, body_fingerprint(body)]),
            status=RecordStatus.IN_PROGRESS,
            owner=f"{self._owner}-{uuid.uuid4().hex[:12]}",
            lease_seconds=self._lease_seconds,
            expires_after_seconds=self._expires_after_seconds,
        )
        try:
            owned = await self._requests.begin(wanted)
        except PayloadMismatchError:
            raise HTTPException(
                422, f"the {HEADER} {key!r} was used with another request; use a new key"
            ) from None
        except InProgressElsewhereError as busy:
            raise HTTPException(
                409,
                f"a request with this {HEADER} is in progress; retry later",
                headers={"Retry-After": str(retry_after_seconds(busy.seconds_left))},
            ) from None
        if owned.status is RecordStatus.COMPLETED:
            return KeyClaim(self._requests, None, _response(owned.result))
        return KeyClaim(self._requests, owned, None)


def validate_key(value: str | None) -> str:
    """The key as sent, if it is 1..255 printable ASCII characters; else a 400."""
    match key_fault(value):
        case None:
            return str(value)
        case KeyFault.MISSING:
            raise HTTPException(400, f"the {HEADER} header is required")
        case _:
            raise HTTPException(
                400, f"the {HEADER} must be 1..{MAX_KEY_LENGTH} printable ASCII characters"
            )


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
