"""The records the port stores, typed: no store's document shape leaks out of the adapter.

A record is the lock of one unit of work (a message's two-phase effect, an HTTP request under an
`Idempotency-Key`). Creating it claims the work; its `Stamp` (the store's version and the
database's time of the write) fences every later write and dates its lease.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

# JSON as the store keeps it: what a result, a document or a request fingerprint may hold.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject = dict[str, JsonValue]
# JSON as a caller may hand it in: read-only and covariant, so that `{"id": "a"}` (a
# `dict[str, str]` to a type checker) or a tuple of them is accepted where JSON is.
JsonInput = str | int | float | bool | None | Sequence["JsonInput"] | Mapping[str, "JsonInput"]
JsonMapping = Mapping[str, JsonInput]

# How long a claim outlives its owner's last write when nothing says otherwise: long enough for
# an external call through an SDK's own retries; a crashed owner blocks its work this long.
DEFAULT_LEASE_SECONDS = 30.0
# How long a completed call (`@idempotent`) or HTTP key (`IdempotencyKeys`) is replayed when
# nothing says otherwise: a day, as the payment APIs that made the `Idempotency-Key` common.
# (A message consumer's records live as long as its `Retention` says.)
DEFAULT_EXPIRES_AFTER_SECONDS = 24 * 3600


def fingerprint(value: JsonInput) -> str:
    """SHA-256 of `value` as canonical JSON (sorted keys, no spaces): the request hash that
    tells a duplicate (same hash) from a conflicting payload under the same key.

    Raises `TypeError` for a value that is not JSON (a datetime, a Decimal)."""
    canonical = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_as_json
    )
    # "surrogatepass": JSON may spell a lone surrogate ("\\ud800"), which UTF-8 cannot encode;
    # the hash of any decodable JSON must exist, never raise.
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _as_json(value: object) -> JsonInput:
    """A read-only mapping or sequence (`JsonInput` allows them) as the dict or list `json`
    encodes; anything else is not JSON."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def body_fingerprint(body: bytes) -> str:
    """The request hash of a message body: of its canonical JSON when it is JSON (so spacing
    and key order do not make a duplicate look like a conflict), else of its bytes.

    Total: bytes that are not JSON, JSON nested deeper than the decoder (or encoder) goes, or
    integers longer than Python converts are hashed as bytes. The caller bounds the size."""
    try:
        decoded: JsonValue = json.loads(body)
        return fingerprint(decoded)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return hashlib.sha256(body).hexdigest()


class RecordStatus(StrEnum):
    """Where a claimed unit of work stands."""

    IN_PROGRESS = "inProgress"
    COMPLETED = "completed"
    # Refused for good by the downstream: never retried, the record says so to every redelivery.
    FAILED = "failed"


@dataclass(frozen=True)
class Stamp:
    """The store's version of a written record: its ETag, and the database's time of the
    write in whole seconds (Cosmos `_ts`), from which its lease is dated."""

    etag: str
    written_at_s: int


@dataclass(frozen=True)
class Record:
    """One unit of work's record. `stamp` is None until the store has written it."""

    key: str
    partition: str
    request_hash: str
    status: RecordStatus
    owner: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    attempts: int = 1
    # The key the downstream deduplicates on (two-phase effects): the same on every attempt.
    downstream_key: str | None = None
    # What the work produced (or why it failed), replayed to every duplicate.
    result: JsonValue = None
    # What the claim carries for whichever owner finishes the work (an amount, a currency).
    data: JsonValue = None
    # Seconds after its last write the store may forget the record; None keeps it.
    expires_after_seconds: int | None = None
    stamp: Stamp | None = None

    def owned_by(self, owner: str, lease_seconds: float) -> Record:
        """This record claimed again by `owner` (a take-over): in progress, one more attempt."""
        return replace(
            self,
            owner=owner,
            lease_seconds=lease_seconds,
            status=RecordStatus.IN_PROGRESS,
            attempts=self.attempts + 1,
        )


@dataclass(frozen=True)
class RecordRead:
    """A record as stored (or None) and the database's time when it was read, in ms."""

    record: Record | None
    database_now_ms: int


class Leased(Protocol):
    """Anything held under a lease the store dates: a record, a feed range's lease."""

    @property
    def stamp(self) -> Stamp | None:
        """The store's version of the last write (None: never written)."""
        ...

    @property
    def lease_seconds(self) -> float:
        """How long the lease outlives that write."""
        ...


def lease_end_s(leased: Leased) -> float | None:
    """When the lease ends, in the database's epoch seconds (None: never written, no lease).

    The one formula of a lease: `_ts` has whole seconds, so the lease counts from the end of
    that second, never earlier.
    """
    if leased.stamp is None:
        return None
    return leased.stamp.written_at_s + 1 + leased.lease_seconds


def lease_is_live(leased: Leased, database_now_ms: int) -> bool:
    """Whether the owner may still be working on it, by the database's clock alone."""
    ends = lease_end_s(leased)
    return ends is not None and database_now_ms < ends * 1000


def lease_seconds_left(leased: Leased, database_now_ms: int) -> float:
    """Seconds until the lease ends (0 when it has)."""
    ends = lease_end_s(leased)
    return 0.0 if ends is None else max(0.0, ends - database_now_ms / 1000)


@dataclass(frozen=True)
class StoredDocument:
    """An effect's document as stored, with the ETag a conditional replace must match."""

    body: JsonObject
    etag: str
