"""Documents as stored, for leases judged by the database's clock, never a worker's.

A lease is a document some owner wrote; it is live while the database's time is within
`lease_seconds` of that write's `_ts` (`exactly_once.records.lease_is_live`). Both sides of the
judgement come from Cosmos (the record's `_ts` and `GetCurrentTimestamp()` read in one query),
so a worker whose clock is wrong can neither steal a live lease nor keep a dead one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exactly_once.records import Stamp


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
