"""Idempotency-Key rules: key syntax, record ids, what a key's record carries, and when an
operator may evict one.

A key's record is the `exactly_once` core's record (`exactly_once.store.Record`): creating it
claims the key, its stamp fences every later write, and its lease (judged by the database's
clock) lets a retry take over a claim whose owner crashed. The core's claim state machine
judges it; this module says what the intake puts in it. Nothing here talks to a store or
knows how a record is laid out in one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from exactly_once import TransientStoreError
from exactly_once.keys import MAX_KEY_LENGTH, KeyFault, key_fault, key_record_id
from exactly_once.store import (
    JsonObject,
    JsonValue,
    Record,
    RecordChangedError,
    RecordStatus,
    lease_is_live,
    lease_seconds_left,
)
from orders.domain.hashing import request_hash
from orders.domain.model import OrderPlaced
from orders.exceptions import InvalidIdempotencyKeyError

__all__ = [
    "MAX_KEY_LENGTH",
    "KeyRecord",
    "OrderIdClaim",
    "RecordStatus",
    "cancel_request_hash",
    "core_store_errors",
    "eviction_refusal",
    "key_claim",
    "key_data",
    "order_request_hash",
    "record_id",
    "validate_idempotency_key",
]


def validate_idempotency_key(value: str | None) -> str:
    """The key as sent, if it is 1..255 printable ASCII characters (space to tilde): the core's
    rule (`exactly_once.keys.key_fault`), told in the API's words."""
    match key_fault(value):
        case None:
            return str(value)
        case KeyFault.MISSING:
            raise InvalidIdempotencyKeyError("an idempotency key is required", missing=True)
        case KeyFault.TOO_LONG:
            raise InvalidIdempotencyKeyError(
                f"the idempotency key is {len(str(value))} characters long; "
                f"at most {MAX_KEY_LENGTH} are allowed"
            )
        case _:
            raise InvalidIdempotencyKeyError(
                "the idempotency key may hold only printable ASCII characters"
            )


def record_id(scope: str, key: str) -> str:
    """The id of (scope, key)'s record: the core's (`exactly_once.keys.key_record_id`), a hash,
    because keys may hold characters Cosmos ids forbid and scope plus key may exceed 255."""
    return key_record_id(scope, key)


# What a key's record was claimed for: placing the order (the default, and every record
# written before the field existed) or cancelling it. GET finds a caller's submission of an
# order among its records, and a cancel's record names the order too.
PLACE_OPERATION = "place"
CANCEL_OPERATION = "cancel"


def key_claim(
    scope: str,
    key: str,
    order_id: str,
    request_hash: str,
    *,
    owner: str,
    lease_seconds: float,
    ttl_seconds: int,
    operation: str = PLACE_OPERATION,
) -> Record:
    """The record that claims `key` in `scope` for one request about `order_id`.

    Its partition is its own id (one record per partition). `data` carries the scope, the key
    and the orderId (GET finds a caller's accepted order by them); the answer to replay becomes
    its `result` when the request completes. It expires `ttl_seconds` after its last write."""
    identifier = record_id(scope, key)
    return Record(
        key=identifier,
        partition=identifier,
        request_hash=request_hash,
        status=RecordStatus.IN_PROGRESS,
        owner=owner,
        lease_seconds=lease_seconds,
        data=key_data(scope, key, order_id, operation),
        expires_after_seconds=ttl_seconds,
    )


def key_data(
    scope: str, key: str, order_id: str, operation: str = PLACE_OPERATION
) -> dict[str, JsonValue]:
    """What a key's record carries beside the claim: whose key, and which order it is about
    (GET finds a caller's accepted order by them; the console and `orders keys` show them)."""
    return {
        "scope": scope,
        "key": key,
        "orderId": order_id,
        # only a cancel says so: a placing record keeps the shape it always had
        **({"operation": operation} if operation != PLACE_OPERATION else {}),
    }


def order_request_hash(order: OrderPlaced) -> str:
    """The request hash of a placed order: of its validated payload, so spelling, key order
    and number format never make a retry a different request. Records stored since the
    intake began keep this hash, so their retries still replay."""
    return request_hash(order.canonical_payload())


def cancel_request_hash(order_id: str, reason: str | None) -> str:
    """The request hash of a cancel: namespaced, so a cancel never shares one with an order."""
    return request_hash({"cancel": {"orderId": order_id, "reason": reason}})


@dataclass(frozen=True)
class KeyRecord:
    """A key's record as the intake reads it: whose key, which order, which payload, and the
    answer the first request got (None until it completed)."""

    record_id: str
    scope: str
    key: str
    order_id: str
    request_hash: str
    status: RecordStatus
    answer: JsonObject | None
    operation: str = PLACE_OPERATION

    @classmethod
    def of(cls, record: Record) -> KeyRecord:
        data = record.data if isinstance(record.data, dict) else {}
        answer = record.result if isinstance(record.result, dict) else None
        return cls(
            record_id=record.key,
            scope=str(data.get("scope", "")),
            key=str(data.get("key", "")),
            order_id=str(data.get("orderId", "")),
            request_hash=record.request_hash,
            status=record.status,
            answer=answer if record.status is RecordStatus.COMPLETED else None,
            operation=str(data.get("operation", PLACE_OPERATION)),
        )


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


def eviction_refusal(record: Record, database_now_ms: int, *, force: bool) -> str | None:
    """Why evicting a key's record now would do harm, or None; the lease is judged by the
    database's time of the read (`database_now_ms`), as the intake judges it.

    Evicting a completed key makes its next retry a new request: it is accepted and published
    again, and the orderId claim, the broker and the consumer keep that harmless (the same
    order). Evicting a live claim lets a retry publish while the first request still runs, so
    it takes `force`.
    """
    live = record.status is RecordStatus.IN_PROGRESS and lease_is_live(record, database_now_ms)
    if live and not force:
        remaining = math.ceil(lease_seconds_left(record, database_now_ms))
        return (
            f"a request with this key is in progress (its lease ends in {remaining} s); "
            "wait for it, or use --force"
        )
    return None


@contextmanager
def core_store_errors() -> Iterator[None]:
    """A claim's race as a failure worth retrying: a record that kept appearing and vanishing
    under a claim (`RecordChangedError`) is `TransientStoreError` to the intake's HTTP problems,
    retries and CLI; every other store failure is already the core's and passes as it is."""
    try:
        yield
    except RecordChangedError as exc:
        raise TransientStoreError(str(exc)) from exc
