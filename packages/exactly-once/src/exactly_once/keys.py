"""Idempotency keys without a web framework: the key's rules, its record's id, and the claim of
one request under it.

`exactly_once._idempotency_key.IdempotencyKeys` is the FastAPI dependency built on this module.
A host that is not a FastAPI route, or whose records carry more than the dependency writes (a
request hash of its own, data its lookups need), uses `KeyedRequests` directly: the same claim
state machine and the same rules, so a fix in one reaches the other.
"""

from __future__ import annotations

import hashlib
import json
import math
from enum import StrEnum

from exactly_once._claims import Claims, CompletionRetries
from exactly_once._ports import RecordStore
from exactly_once._records import JsonInput, Record

__all__ = [
    "HEADER",
    "MAX_KEY_LENGTH",
    "MAX_RETRY_AFTER_SECONDS",
    "KeyFault",
    "KeyedRequests",
    "key_fault",
    "key_record_id",
    "retry_after_seconds",
]

# The request header field of draft-ietf-httpapi-idempotency-key-header.
HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
# A retry is told to come back within this many seconds, however long the lease.
MAX_RETRY_AFTER_SECONDS = 5


class KeyFault(StrEnum):
    """Why a key is refused."""

    MISSING = "missing"  # absent or empty
    TOO_LONG = "too_long"  # more than MAX_KEY_LENGTH characters
    NOT_PRINTABLE = "not_printable"  # a character outside printable ASCII (space to tilde)


def key_fault(value: str | None) -> KeyFault | None:
    """What is wrong with the key as sent, or None for a key of 1..255 printable ASCII
    characters."""
    if not value:
        return KeyFault.MISSING
    if len(value) > MAX_KEY_LENGTH:
        return KeyFault.TOO_LONG
    if any(not " " <= char <= "~" for char in value):
        return KeyFault.NOT_PRINTABLE
    return None


def key_record_id(scope: str, key: str) -> str:
    """The id of the record of `key` in `scope`: SHA-256 hex, so any key makes a store-safe id
    (Cosmos ids forbid `/ \\ ? #` and stop at 255 characters); the JSON array keeps ("a", "bc")
    apart from ("ab", "c")."""
    return hashlib.sha256(json.dumps([scope, key]).encode("utf-8")).hexdigest()


def retry_after_seconds(seconds_left: float, cap: int = MAX_RETRY_AFTER_SECONDS) -> int:
    """Seconds a refused retry should wait: until the claim's lease ends, at least 1 and at
    most `cap` (a claim normally completes long before its lease ends)."""
    return max(1, min(cap, math.ceil(seconds_left)))


class KeyedRequests:
    """The claim of one request under its key, over any `RecordStore`.

    One owner per request (the record's `owner`): a second request under a live claim is
    refused at once, never made to wait, because its caller retries on its own.

    `completion` says how an answer that meets a failing store is written (`finish`)."""

    def __init__(self, store: RecordStore, completion: CompletionRetries | None = None) -> None:
        self.store = store
        self._completion = completion or CompletionRetries()

    def _claims(self, record: Record) -> Claims:
        return Claims(
            self.store,
            owner=record.owner,
            lease_seconds=record.lease_seconds,
            max_wait_seconds=0,
            completion=self._completion,
        )

    async def begin(self, wanted: Record) -> Record:
        """`wanted` claimed (new, or taken over from an ended lease: run the request), or the
        record another request completed (replay its result).

        Raises `PayloadMismatchError` (the key was used with another request) or
        `InProgressElsewhereError` (another request holds a live claim)."""
        return await self._claims(wanted).own(wanted)

    async def finish(self, owned: Record, answer: JsonInput) -> bool:
        """Record the request's answer (the request has run: a transient store error is
        retried, `Claims.finish_or_keep`); False when its lease ended and a retry took the
        claim over meanwhile (the retry runs the request again and records its own answer).

        Raises `CompletionFailedError` when the answer could not be recorded: the claim is
        kept in progress, and must not be released (the request's effect may have happened)."""
        return await self._claims(owned).finish_or_keep(owned, answer)

    async def release(self, owned: Record) -> None:
        """Give the claim up so that a retry runs the request again; a failure to do so is
        logged (the lease ends the claim), never raised over the error that made us release."""
        await self._claims(owned).release(owned)
