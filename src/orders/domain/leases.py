"""Leases judged by the database's clock, never a worker's.

A lease is a document some owner wrote; it is live while the database's time is within
`lease_seconds` of that write's `_ts`. Both sides of the judgement come from Cosmos (the record's
`_ts` and `GetCurrentTimestamp()` read in one query), so a worker whose clock is wrong can
neither steal a live lease nor keep a dead one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exactly_once.records import Stamp

# How long a lease outlives its holder's last write (a claim, a renewal) when nothing says
# otherwise: the HTTP intake's claims and the dispatcher's feed-range leases. Long enough for a
# send through the SDK's own retries; a crashed holder blocks its work for at most this long.
# Billing's lease is not defaulted here: it always comes from BILLING_LEASE_SECONDS (settings),
# because the payment call's timeout is derived from it.
DEFAULT_LEASE_SECONDS = 30.0


@dataclass(frozen=True)
class StampedDocument:
    """A document as stored: its own fields, and apart from them the store's version of it
    (`exactly_once.records.Stamp`: the ETag a fenced write must match, the write's time a
    lease is dated from). The adapter splits the two; the store's properties never reach here."""

    body: dict[str, Any]
    stamp: Stamp


@dataclass(frozen=True)
class DatabaseRead:
    """A document as stored (or None) and the database's time when it was read."""

    document: StampedDocument | None
    database_now_ms: int


@dataclass(frozen=True)
class FeedLease:
    """A dispatcher's hold on one change-feed range: who holds it (None: released), for how
    long after its last write, and the continuation reading resumes from."""

    feed_range: str
    owner: str | None
    lease_seconds: float
    continuation: str | None = None


def lease_is_live(written_at_s: int, lease_seconds: float, database_now_ms: int) -> bool:
    # `_ts` has whole seconds: the lease counts from the end of that second, never earlier.
    return database_now_ms < (written_at_s + 1 + lease_seconds) * 1000
