"""Idempotency-Key rules: key syntax, record ids, the stored record and what a retry gets.

The record is the lock: creating it claims the key, its ETag fences every later write, and its
lease lets a retry take over a claim whose owner crashed. Nothing here talks to a store.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from orders.exceptions import ConflictSignal, InvalidIdempotencyKeyError

MAX_KEY_LENGTH = 255
RECORD_DOCUMENT_TYPE = "idempotencyRecord"


def validate_idempotency_key(value: str | None) -> str:
    """The key as sent, if it is 1..255 printable ASCII characters (space to tilde)."""
    if value is None or value == "":
        raise InvalidIdempotencyKeyError("an idempotency key is required", missing=True)
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKeyError(
            f"the idempotency key is {len(value)} characters long; "
            f"at most {MAX_KEY_LENGTH} are allowed"
        )
    if any(not " " <= char <= "~" for char in value):
        raise InvalidIdempotencyKeyError(
            "the idempotency key may hold only printable ASCII characters"
        )
    return value


def record_id(scope: str, key: str) -> str:
    """A Cosmos-safe id for (scope, key).

    Hashed because keys may hold characters Cosmos ids forbid (`/ \\ ? #`) and scope + key may
    exceed the 255-character id limit; the JSON array keeps ("a", "bc") apart from ("ab", "c").
    """
    return hashlib.sha256(json.dumps([scope, key]).encode("utf-8")).hexdigest()


class RecordStatus(StrEnum):
    IN_PROGRESS = "inProgress"
    COMPLETED = "completed"


@dataclass(frozen=True)
class StoredResponse:
    """The response of the first request, replayed verbatim to every retry (opaque here:
    the host decides what it holds)."""

    status_code: int
    body: dict[str, Any]
    headers: dict[str, str]

    def to_document(self) -> dict[str, Any]:
        return {"statusCode": self.status_code, "body": self.body, "headers": self.headers}

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> StoredResponse:
        return cls(
            status_code=int(document["statusCode"]),
            body=dict(document["body"]),
            headers={str(k): str(v) for k, v in document.get("headers", {}).items()},
        )


@dataclass(frozen=True)
class IdempotencyRecord:
    """One key's record; `etag` is the store's version, absent until the record is written."""

    record_id: str
    scope: str
    key: str
    request_hash: str
    order_id: str
    status: RecordStatus
    lease_expires_at: float  # epoch seconds; meaningful while in progress
    ttl_seconds: int
    response: StoredResponse | None = None
    etag: str | None = None

    def completed(self, response: StoredResponse) -> IdempotencyRecord:
        return replace(self, status=RecordStatus.COMPLETED, response=response, etag=None)

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.record_id,
            "type": RECORD_DOCUMENT_TYPE,
            "scope": self.scope,
            "key": self.key,
            "requestHash": self.request_hash,
            "orderId": self.order_id,
            "status": self.status.value,
            "leaseExpiresAt": self.lease_expires_at,
            "response": self.response.to_document() if self.response else None,
            # Per-item TTL: the container has defaultTtl -1, so this is what expires the key.
            "ttl": self.ttl_seconds,
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> IdempotencyRecord:
        response = document.get("response")
        return cls(
            record_id=document["id"],
            scope=document["scope"],
            key=document["key"],
            request_hash=document["requestHash"],
            order_id=document["orderId"],
            status=RecordStatus(document["status"]),
            lease_expires_at=float(document["leaseExpiresAt"]),
            ttl_seconds=int(document.get("ttl", 0)),
            response=StoredResponse.from_document(response) if response else None,
            etag=document.get("_etag"),
        )


class IdempotencyRecordExistsError(ConflictSignal):
    """A claim found the key already recorded; carries the existing record (with its ETag).
    It lives beside the record it carries, so `orders.exceptions` stays a leaf."""

    def __init__(self, existing: IdempotencyRecord) -> None:
        super().__init__(f"idempotency record {existing.record_id!r} already exists")
        self.existing = existing


ORDER_CLAIM_DOCUMENT_TYPE = "orderIdClaim"


@dataclass(frozen=True)
class OrderIdClaim:
    """Which payload an orderId was first accepted with, across every key and caller.

    Keys are per caller, orders are global: without this claim a second caller (or the same
    caller under a new key) could place a different order under a taken orderId, be answered
    202, and have it dropped silently by the broker's duplicate detection (which compares
    MessageId only). Claims never expire, as the orders they guard do not.
    """

    order_id: str
    request_hash: str
    # The caller scope that placed the order first: the one allowed to cancel it. None on
    # claims written before owners were recorded.
    owner_scope: str | None = None

    @property
    def document_id(self) -> str:
        # Record ids are SHA-256 hex, so the prefix keeps the two kinds of id apart.
        return f"order:{self.order_id}"

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.document_id,
            "type": ORDER_CLAIM_DOCUMENT_TYPE,
            "orderId": self.order_id,
            "requestHash": self.request_hash,
            "ownerScope": self.owner_scope,
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> OrderIdClaim:
        return cls(
            order_id=document["orderId"],
            request_hash=document["requestHash"],
            owner_scope=document.get("ownerScope"),
        )


class Verdict(StrEnum):
    REPLAY = "replay"  # completed with the same request hash: answer the stored response
    IN_PROGRESS = "in_progress"  # live claim with the same request hash: 409, retry later
    MISMATCH = "mismatch"  # different request hash: 422, whatever the record's state
    TAKE_OVER = "take_over"  # the claimant's lease expired: claim it with If-Match


def judge(existing: IdempotencyRecord, request_hash: str, now: float) -> Verdict:
    """What a request that found `existing` under its key must do."""
    if existing.request_hash != request_hash:
        return Verdict.MISMATCH
    if existing.status is RecordStatus.COMPLETED and existing.response is not None:
        return Verdict.REPLAY
    if existing.lease_expires_at > now:
        return Verdict.IN_PROGRESS
    return Verdict.TAKE_OVER


def eviction_refusal(record: IdempotencyRecord, now: float, *, force: bool) -> str | None:
    """Why evicting a key's record now would do harm, or None.

    Evicting a completed key makes its next retry a new request: it is accepted and published
    again, and the orderId claim, the broker and the consumer keep that harmless (the same
    order). Evicting a live claim lets a retry publish while the first request still runs, so
    it takes `force`.
    """
    if record.status is RecordStatus.IN_PROGRESS and record.lease_expires_at > now and not force:
        remaining = math.ceil(record.lease_expires_at - now)
        return (
            f"a request with this key is in progress (its lease ends in {remaining} s); "
            "wait for it, or use --force"
        )
    return None


def retry_after_seconds(existing: IdempotencyRecord, now: float, cap: int) -> int:
    """Seconds until the claim finishes or its lease ends, at least 1 and at most `cap`.

    A claim normally completes in milliseconds, so a short cap lets the retry replay soon
    rather than wait for the whole lease.
    """
    remaining = math.ceil(existing.lease_expires_at - now)
    return max(1, min(cap, remaining))
