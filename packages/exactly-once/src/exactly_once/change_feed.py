"""A change-feed processor: leased feed ranges, judged by the database's clock.

The Python Cosmos DB SDK has no change-feed processor (".NET and Java only"). This one follows
the .NET processor's split into roles, in far fewer lines:

- a **lease store** (`LeaseStore`): one lease per feed range, holding its owner and its
  continuation; acquire, renew, checkpoint and release are each conditional on the lease's
  ETag, so of two instances that move at once one wins and the other learns it lost;
- a **bootstrapper** (`ChangeFeedProcessor.bootstrap`): a free lease for each part of the
  monitored container's key space that no lease covers;
- a **load balancer** (`leases_to_take`): which leases this instance takes, free or ended ones
  first, up to its fair share of the ranges among the live owners; an owner holding more than
  its share is asked for one lease (`requested_by`) and hands it over between two pages (it
  writes the lease as the asker's, who takes it up), so rebalancing never has two instances
  handle one page;
- a **supervisor per lease**: reads the range's changes page by page, hands each page to the
  handler and checkpoints only after the handler returned, while a renewer keeps the lease.

A lease is live while the database's time is within `leaseSeconds` of the `_ts` of its last
write, read in the same request (`exactly_once._records.lease_is_live`, the rule records
follow too). An instance whose clock is wrong can neither steal a live lease nor keep a dead one.

Delivery is at least once: a handler that raises leaves the continuation where it was, so the
page is read again; an instance that dies between the handler and the checkpoint leaves its
last page to be handled again by whoever takes the lease over. Handlers must be idempotent
(an outbox relay publishes with the MessageId stored on each entry: the broker drops the copy).

Feed ranges split and merge under the processor, as Cosmos DB splits a partition that grows
and merges ones that shrink. A lease names its range by effective partition key (`EpkRange`),
so leases are compared by the keys they cover, never by their strings, and they never overlap
but for the moment of a split:

- the **bootstrapper only fills gaps**: a part of the key space no lease covers gets a free
  lease (one per physical range it lies in), read from the beginning; a range a lease covers
  never gets another;
- a **split** is the end of a lease's life, as in the .NET processor. Its holder, between two
  pages, finds its range spread over several physical ranges (each bootstrap reads the
  partition map afresh), creates a lease per child carrying the parent's continuation
  (deterministic ids: a second attempt creates nothing twice), stops handling the parent, and
  deletes it. A crash between the children and
  the deletion leaves a parent its children tile: the next bootstrap of any instance deletes it,
  and nobody reads it again. A crash halfway through the children leaves the parent held by
  nobody; its next holder finishes the split before it reads a page;
- a **merge** changes nothing: a lease keeps its EPK range and its continuation, and reads its
  part of the merged physical range (the SDK sends the range's keys with the request).

A checkpoint is written only with a continuation of the lease's own range: the feed says which
range a continuation resumes (`ChangePage.continuation_range`), and another answer raises
`ForeignContinuationError`, before the handler, rather than send a range's reading elsewhere.

An instance stops handling a range once it has gone `lease_seconds - stop_margin_seconds`
without a successful write to its lease (renewals throttled or timing out), measured from the
moment that write was sent: the write's `_ts` can only be later, so the lease is still live by
the database's clock when the instance stops, and no other instance can have taken it yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from exactly_once._records import Stamp, lease_is_live
from exactly_once.exceptions import ExactlyOnceError, RecordChangedError

__all__ = [
    "DEFAULT_ACQUIRE_SECONDS",
    "DEFAULT_FEED_LEASE_SECONDS",
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_POLL_SECONDS",
    "DEFAULT_RENEW_SECONDS",
    "Change",
    "ChangeFeed",
    "ChangeFeedProcessor",
    "ChangeHandler",
    "ChangePage",
    "Lease",
    "LeaseStore",
    "LeaseTable",
    "ProcessorStats",
    "leases_to_take",
]

logger = logging.getLogger("exactly_once.change_feed")

# The .NET processor's defaults (ChangeFeedProcessorOptions).
DEFAULT_FEED_LEASE_SECONDS = 60.0
DEFAULT_RENEW_SECONDS = 17.0
DEFAULT_ACQUIRE_SECONDS = 13.0
DEFAULT_POLL_SECONDS = 5.0
DEFAULT_PAGE_SIZE = 100
# An instance stops handling a range this share of the lease before it could end.
DEFAULT_STOP_MARGIN_SHARE = 0.1

Change = dict[str, Any]
# The handler: an async callable of one page of changes (never empty). It returns when the
# page's effects are done; the checkpoint follows. Raising leaves the page to be read again.
ChangeHandler = Callable[[list[Change]], Awaitable[object]]


class ForeignContinuationError(ExactlyOnceError):
    """A continuation of another feed range than the lease's: never written as its checkpoint
    (its range would be read no more), never read under its name."""


@dataclass(frozen=True)
class EpkRange:
    """A feed range as Cosmos DB names it: the effective partition keys from `min` (included)
    to `max` (excluded), upper-case hex strings compared as strings, as the SDK compares them;
    "" and "FF" are the ends of a container's key space. Its `text` is a lease's identity."""

    min: str
    max: str

    @classmethod
    def parse(cls, feed_range: str) -> EpkRange:
        """The range of a feed range's JSON (`{"Range": {"min": ..., "max": ...}}`, the SDK's
        form); ValueError for anything else."""
        try:
            bounds = json.loads(feed_range)["Range"]
            low, high = bounds["min"], bounds["max"]
        except (ValueError, TypeError, KeyError) as error:
            raise ValueError(f"not a feed range: {feed_range[:200]!r}") from error
        if not (isinstance(low, str) and isinstance(high, str) and low < high):
            raise ValueError(f"not a feed range: {feed_range[:200]!r}")
        if bounds.get("isMinInclusive", True) is not True or bounds.get("isMaxInclusive"):
            raise ValueError(f"a feed range is [min, max): {feed_range[:200]!r}")
        return cls(low, high)

    @property
    def text(self) -> str:
        """The SDK's dict as JSON with sorted keys: one range, one string, one lease id."""
        return json.dumps(
            {
                "Range": {
                    "isMaxInclusive": False,
                    "isMinInclusive": True,
                    "max": self.max,
                    "min": self.min,
                }
            },
            sort_keys=True,
        )

    def contains(self, other: EpkRange) -> bool:
        return self.min <= other.min and other.max <= self.max

    def overlaps(self, other: EpkRange) -> bool:
        return self.min < other.max and other.min < self.max

    def intersection(self, other: EpkRange) -> EpkRange | None:
        low, high = max(self.min, other.min), min(self.max, other.max)
        return EpkRange(low, high) if low < high else None

    def minus(self, others: Iterable[EpkRange]) -> list[EpkRange]:
        """The parts of this range none of `others` covers, in key order."""
        gaps, low = [], self.min
        for other in sorted(others, key=lambda piece: piece.min):
            if other.max <= low or other.min >= self.max:
                continue
            if other.min > low:
                gaps.append(EpkRange(low, other.min))
            low = max(low, other.max)
        if low < self.max:
            gaps.append(EpkRange(low, self.max))
        return gaps

    def __str__(self) -> str:
        return f"[{self.min!r}, {self.max!r})"


@dataclass(frozen=True)
class Lease:
    """One feed range's lease as stored: who holds it (None: free), for how long after its
    last write, where reading resumes, and the store's stamp (ETag, `_ts`) of that write."""

    feed_range: str
    owner: str | None
    lease_seconds: float
    continuation: str | None = None
    stamp: Stamp | None = None
    # Another instance that asked for it (the load balancer): its owner releases it after
    # its current page, and the asker takes it free.
    requested_by: str | None = None

    def is_live(self, database_now_ms: int) -> bool:
        """Held by its owner still, by the database's clock alone (`records.lease_is_live`,
        the one rule for records and feed ranges alike)."""
        return self.owner is not None and lease_is_live(self, database_now_ms)

    @property
    def keys(self) -> EpkRange:
        """The effective partition keys the lease covers."""
        return EpkRange.parse(self.feed_range)


@dataclass(frozen=True)
class LeaseTable:
    """Every lease of one processor as stored, and the database's time they were read at."""

    leases: Sequence[Lease]
    database_now_ms: int


@dataclass(frozen=True)
class ChangePage:
    """One page of a feed range's changes and the continuation after it (None: unchanged).
    `continuation_range` is the feed range the continuation resumes, as the feed answered it
    (None: the feed does not say): a checkpoint is written only when it is the lease's."""

    changes: list[Change]
    continuation: str | None
    continuation_range: str | None = None


class ChangeFeed(Protocol):
    """The monitored container's change feed (latest version), by feed range."""

    async def feed_ranges(self) -> list[str]:
        """The container's physical feed ranges, each as `EpkRange.text` (after a split, the
        children; after a merge, the merged range)."""
        ...

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        """The next page of `feed_range` after `continuation` (None: from the beginning). A
        continuation of a range that contains `feed_range` (its parent's, before a split) reads
        `feed_range` alone from that position."""
        ...


class LeaseStore(Protocol):
    """The leases of one processor. Every write but `create` is conditional on the lease's
    stamp and raises `RecordChangedError` when it moved (another instance wrote first) or the
    lease is gone; nothing is written then."""

    async def read_all(self) -> LeaseTable:
        """Every lease, and the database's time, in one request."""
        ...

    async def create(
        self, feed_range: str, lease_seconds: float, continuation: str | None = None
    ) -> None:
        """A free lease for `feed_range`, reading from `continuation`; nothing when one
        exists (its id is the range's: a second create is a no-op, whoever makes it)."""
        ...

    async def acquire(self, lease: Lease, owner: str, lease_seconds: float) -> Lease:
        """`lease` owned by `owner` from now, its continuation kept."""
        ...

    async def renew(self, lease: Lease) -> Lease:
        """`lease` written again as it is: its `_ts`, and so its life, starts again."""
        ...

    async def checkpoint(self, lease: Lease, continuation: str) -> Lease:
        """`lease` with reading to resume from `continuation` (a renewal too)."""
        ...

    async def release(self, lease: Lease) -> Lease:
        """`lease` free, its continuation kept: another instance may take it at once."""
        ...

    async def request(self, lease: Lease, owner: str) -> Lease:
        """`lease` as it is, asked for by `owner` (`requested_by`): its holder hands it over."""
        ...

    async def delete(self, lease: Lease) -> None:
        """`lease` gone (a split's parent, once its children exist)."""
        ...


def leases_to_take(table: LeaseTable, owner: str) -> list[Lease]:
    """The load balancer's decision: which leases `owner` should try to acquire now.

    Its fair share is the ranges divided among the live owners, itself included, rounded up.
    Below it, it takes free or ended leases (an owner's lease ends when it stops renewing:
    it died, or lost its network); when there are none, it takes one lease from the owner
    holding the most, if that owner holds more than its share. One at a time, so that two
    instances that start together do not take every range from a third.

    Only owners of live leases are seen (as in the .NET processor): an instance that holds
    nothing yet counts once it has taken a lease, so a newcomer first takes one lease from
    the richest owner, and the shares settle over a few rounds."""
    now = table.database_now_ms
    live = [lease for lease in table.leases if lease.is_live(now)]
    held = Counter(lease.owner for lease in live)
    owners = {*held, owner}
    share = math.ceil(len(table.leases) / len(owners))
    wanted = share - held[owner]
    if wanted <= 0:
        return []
    ended = [lease for lease in table.leases if not lease.is_live(now)]
    if ended:
        return ended[:wanted]
    richest, count = max(held.items(), key=lambda item: (item[1], str(item[0])))
    if richest != owner and count > share:
        return [next(lease for lease in live if lease.owner == richest)]
    return []


@dataclass
class _Held:
    """A lease this instance holds: its latest stamp, guarded by a lock so that the renewer
    and the checkpoint never write with an ETag the other just replaced; and until when (our
    monotonic clock) it may be handled without a further successful write."""

    lease: Lease
    handle_until: float
    hand_over: bool = False  # asked for by another instance: released after the current page
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    renewed_at: float = field(default_factory=time.monotonic)  # when to renew, never whether


@dataclass
class ProcessorStats:
    pages: int = 0
    changes: int = 0
    leases_taken: int = 0
    leases_lost: int = 0
    leases_split: int = 0
    leases_handed_over: int = 0
    # Given up before their end for want of a successful renewal.
    leases_stopped: int = 0


class ChangeFeedProcessor:
    """Reads a container's change feed through `handler`, sharing the feed ranges with every
    other instance over the same `leases` (see the module's docstring)."""

    def __init__(
        self,
        feed: ChangeFeed,
        leases: LeaseStore,
        handler: ChangeHandler,
        *,
        owner: str | None = None,
        lease_seconds: float = DEFAULT_FEED_LEASE_SECONDS,
        renew_seconds: float = DEFAULT_RENEW_SECONDS,
        acquire_seconds: float = DEFAULT_ACQUIRE_SECONDS,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        page_size: int = DEFAULT_PAGE_SIZE,
        stop_margin_seconds: float | None = None,
    ) -> None:
        if not 0 < renew_seconds < lease_seconds:
            # A lease renewed less often than it lasts ends under a live owner.
            raise ValueError(f"renew_seconds ({renew_seconds}) must be within (0, lease_seconds)")
        if acquire_seconds <= 0 or poll_seconds <= 0 or page_size <= 0:
            raise ValueError("acquire_seconds, poll_seconds and page_size must be positive")
        margin = (
            lease_seconds * DEFAULT_STOP_MARGIN_SHARE
            if stop_margin_seconds is None
            else stop_margin_seconds
        )
        if not 0 < margin < lease_seconds - renew_seconds:
            # A margin past the first renewal would stop every range before it is renewed.
            raise ValueError(
                f"stop_margin_seconds ({margin}) must be within (0, lease_seconds - renew_seconds)"
            )
        self._feed = feed
        self._leases = leases
        self._handler = handler
        self.owner = owner or f"processor-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        self._renew_seconds = renew_seconds
        self._acquire_seconds = acquire_seconds
        self._poll_seconds = poll_seconds
        self._page_size = page_size
        self._stop_margin = margin
        self._held: dict[str, _Held] = {}
        # What the last bootstrap saw: the physical ranges, and every lease.
        self._physical: list[EpkRange] = []
        self._table = LeaseTable([], 0)
        self.stats = ProcessorStats()

    # --- the bootstrapper and the load balancer ---------------------------------------------

    async def bootstrap(self) -> LeaseTable:
        """Leases that fill the gaps, and no parent left over; the leases as they now stand.

        A part of the key space no lease covers gets a free lease per physical range it lies
        in, read from the beginning (a new container's first ranges). A lease other leases
        tile is a split's parent whose deletion did not happen (its holder died in between):
        it is deleted here, by whoever sees it first, If-Match on what was read."""
        table = await self._leases.read_all()
        self._physical = [EpkRange.parse(text) for text in await self._feed.feed_ranges()]
        changed = False
        for parent in _tiled_parents(table.leases):
            with contextlib.suppress(RecordChangedError):  # another instance deleted it first
                await self._leases.delete(parent)
                logger.info(
                    "%s deleted the split %s: its children tile it", self.owner, _shown(parent)
                )
            changed = True
        covered = [lease.keys for lease in table.leases]
        for physical in self._physical:
            for gap in physical.minus(covered):
                await self._leases.create(gap.text, self._lease_seconds)
                changed = True
        if changed:
            table = await self._leases.read_all()
        self._table = table
        return table

    async def balance(self) -> list[str]:
        """Acquire what `leases_to_take` says; the feed ranges newly held. A lease another
        instance wrote first is left to it."""
        table = await self.bootstrap()
        stored = {lease.feed_range: lease for lease in table.leases}
        for feed_range, mine in list(self._held.items()):
            lease = stored.get(feed_range)
            if lease is not None and lease.owner == self.owner:
                # Ours still; asked for by another instance, it is handed over after its page.
                mine.hand_over = lease.requested_by not in (None, self.owner)
                continue
            # Held here, owned by another in the store (ours ended) or gone (a split finished
            # elsewhere): its supervisor stops, and what it handled since our last checkpoint
            # the new owner handles again. Said as a lost renewal says it: until this line,
            # the old holder may still handle the range beside its new owner.
            successor = "its children" if lease is None else lease.owner
            logger.warning("%s lost %s to %s", self.owner, _shown(mine.lease), successor)
            self._lose(feed_range)
        # Stored as ours but not held here: handed over to us by their last owner.
        handed = [
            lease
            for lease in table.leases
            if lease.owner == self.owner and lease.feed_range not in self._held
        ]
        taken: list[str] = []
        for lease in [*handed, *leases_to_take(table, self.owner)]:
            if lease.owner not in (None, self.owner) and lease.is_live(table.database_now_ms):
                # A live owner's lease is asked for, never taken: it may be in the middle of a
                # page, which we would handle again. It hands the lease over after that page.
                # Asked for by another instance already: left to it. Two askers asking in turn
                # would move its ETag under the owner's checkpoint round after round.
                if lease.requested_by is None:
                    with contextlib.suppress(RecordChangedError):
                        await self._leases.request(lease, self.owner)
                        logger.info("%s asked %s for %s", self.owner, lease.owner, _shown(lease))
                continue
            sent = time.monotonic()
            try:
                acquired = await self._leases.acquire(lease, self.owner, self._lease_seconds)
            except RecordChangedError:
                continue  # another instance moved first
            if lease.owner not in (None, self.owner):
                logger.info("%s took %s over from %s", self.owner, _shown(lease), lease.owner)
            # One line per lease taken, naming the range by a short digest (a feed range is
            # long JSON): what an operator greps to see which instance reads which range.
            logger.info("%s owns the lease of feed range %s", self.owner, _digest(lease))
            self._held[lease.feed_range] = _Held(acquired, self._handle_until(acquired, sent))
            self.stats.leases_taken += 1
            taken.append(lease.feed_range)
        return taken

    def held_ranges(self) -> list[str]:
        return list(self._held)

    # --- a supervisor's work: one page, a split, renewals ------------------------------------

    async def process_page(self, feed_range: str) -> int:
        """One page of a held range through the handler, then its checkpoint; the changes
        handled. The handler's error propagates and the checkpoint stays where it was. A
        range the last bootstrap found split is handed to its children instead."""
        held = self._held.get(feed_range)
        if held is None or self._out_of_time(feed_range, held):
            return 0
        if held.hand_over or held.lease.requested_by not in (None, self.owner):
            await self._hand_over(feed_range, held)
            return 0
        children = self._children_of(held.lease)
        if children is not None:
            await self._split(feed_range, held, children)
            return 0
        page = await self._feed.read_changes(feed_range, held.lease.continuation, self._page_size)
        self.stats.pages += 1
        continuation = page.continuation
        if continuation is not None and continuation != held.lease.continuation:
            # Before the handler: a page whose continuation is another range's is not handled
            # under this lease's name.
            _check_range(held.lease, page)
        if page.changes:
            if self._out_of_time(feed_range, held):
                return 0
            await self._handler(page.changes)
            self.stats.changes += len(page.changes)
        if continuation is not None and continuation != held.lease.continuation:
            await self._write(
                feed_range, held, lambda lease: self._leases.checkpoint(lease, continuation)
            )
        return len(page.changes)

    def _children_of(self, lease: Lease) -> list[EpkRange] | None:
        """The leases to create before `lease` is deleted, when its range split: the parts of
        its range no other lease covers yet, one per physical range (a split half done before
        leaves some children there already). None: not split."""
        keys = lease.keys
        inner = [
            other.keys
            for other in self._table.leases
            if other.feed_range != lease.feed_range and keys.contains(other.keys)
        ]
        physical = [piece for piece in self._physical if piece.overlaps(keys)]
        if not inner and len(physical) <= 1:
            return None
        return [
            child
            for gap in keys.minus(inner)
            for piece in physical
            if (child := gap.intersection(piece)) is not None
        ]

    async def _split(self, feed_range: str, held: _Held, children: list[EpkRange]) -> None:
        """The children's leases from the parent's continuation, then the parent gone. The
        order makes a crash harmless: children first (created again as no-ops), so the range is
        never without a lease; the parent never read again once they exist."""
        async with held.lock:
            if self._held.get(feed_range) is not held:
                return  # lost meanwhile: its next holder splits it
            parent = held.lease
            for child in children:
                await self._leases.create(child.text, self._lease_seconds, parent.continuation)
            self._held.pop(feed_range, None)
            self.stats.leases_split += 1
            logger.info(
                "%s split %s into %s", self.owner, _shown(parent), ", ".join(map(str, children))
            )
            try:
                await self._leases.delete(parent)
            except Exception as error:
                # Its children tile it: the next bootstrap, ours or another's, deletes it.
                logger.info("%s did not delete %s: %r", self.owner, _shown(parent), error)

    async def _hand_over(self, feed_range: str, held: _Held) -> None:
        """Give a lease another instance asked for to it, between two pages: it resumes from
        our last checkpoint, which covers every page we handled. Written as the asker's (not
        free, which we or a third might take first); an asker that died meanwhile leaves it
        to end as any dead owner's lease does."""
        asker = held.lease.requested_by
        if asker is None:  # seen asked for in the store, not yet on our stamp: read it
            stored = await self._stored(held.lease)
            asker = None if stored is None else stored.requested_by
        if asker is None or asker == self.owner:
            held.hand_over = False
            return

        async def give(lease: Lease) -> Lease:
            return await self._leases.acquire(lease, asker, lease.lease_seconds)

        await self._write(feed_range, held, give)
        if self._held.get(feed_range) is held:
            self._held.pop(feed_range)
            self.stats.leases_handed_over += 1
            logger.info("%s handed %s over to %s", self.owner, _shown(held.lease), asker)

    async def renew(self, feed_range: str) -> None:
        held = self._held.get(feed_range)
        if held is not None:
            await self._write(feed_range, held, self._leases.renew)

    async def renew_due(self) -> None:
        """Renew every held lease not written for `renew_seconds` (by our monotonic clock:
        it decides when to write, never whether the lease is live)."""
        for feed_range, held in list(self._held.items()):
            if time.monotonic() - held.renewed_at >= self._renew_seconds:
                await self.renew(feed_range)

    async def _write(
        self, feed_range: str, held: _Held, write: Callable[[Lease], Awaitable[Lease]]
    ) -> None:
        async with held.lock:
            if self._held.get(feed_range) is not held:
                return  # lost or released meanwhile
            sent = time.monotonic()
            try:
                held.lease = await self._write_while_ours(held, write)
            except RecordChangedError:
                # The lease ended and another instance took it (or askers kept moving it till
                # our time to handle it was up): what we handled since our last checkpoint
                # its next holder handles again (at least once).
                logger.warning("%s lost %s", self.owner, _shown(held.lease))
                self._lose(feed_range)
                return
            held.renewed_at = time.monotonic()
            held.handle_until = self._handle_until(held.lease, sent)

    async def _write_while_ours(
        self, held: _Held, write: Callable[[Lease], Awaitable[Lease]]
    ) -> Lease:
        """`write` on `held`'s lease; when another instance wrote it since, again on the stored
        stamp for as long as the lease is still ours there and ours to handle. An instance
        asking for it (`request`) moves its ETag without taking it, and two askers, each asking
        every `acquire_seconds` in turn, can move it between our read and our write more than
        once: a checkpoint given up then would leave its page to be handled again, with nobody
        dead. `RecordChangedError` once the lease is another's or gone (taken, split)."""
        lease = held.lease
        while True:
            try:
                return await write(lease)
            except RecordChangedError:
                current = await self._stored(lease)
                if current is None or current.owner != self.owner:
                    raise
                if time.monotonic() >= held.handle_until:
                    raise  # stopped retrying where handling stops: `_out_of_time` gives it up
                lease = current

    async def _stored(self, lease: Lease) -> Lease | None:
        """`lease` as stored now (None: gone)."""
        table = await self._leases.read_all()
        return next((item for item in table.leases if item.feed_range == lease.feed_range), None)

    def _handle_until(self, lease: Lease, sent: float) -> float:
        """Our monotonic time to stop handling `lease`, written by a request sent at `sent`.

        The database stamped the write at its `_ts` second, no earlier than the request was
        sent; the lease ends `lease_seconds` after the end of that second (`lease_is_live`).
        So from `sent` on, the database's clock reaches the lease's end no sooner than
        `lease_seconds` later: stopping `stop_margin_seconds` before that is stopping while
        the lease is still live, before any other instance can take it."""
        return sent + lease.lease_seconds - self._stop_margin

    def _out_of_time(self, feed_range: str, held: _Held) -> bool:
        """Whether `held` went too long without a successful write; if so, it is given up."""
        if time.monotonic() < held.handle_until:
            return False
        if self._held.get(feed_range) is held:
            logger.warning(
                "%s stops handling %s: no successful renewal for %.1f s, before the lease ends",
                self.owner,
                _shown(held.lease),
                time.monotonic() - held.renewed_at,
            )
            self._lose(feed_range)
            self.stats.leases_stopped += 1
        return True

    def _lose(self, feed_range: str) -> None:
        if self._held.pop(feed_range, None) is not None:
            self.stats.leases_lost += 1

    async def run_once(self) -> int:
        """One round, in order: balance, renew what is due, one page of each held range. The
        changes handled. For tests and for hosts that drive the rounds themselves."""
        await self.balance()
        await self.renew_due()
        handled = 0
        for feed_range in self.held_ranges():
            handled += await self.process_page(feed_range)
        return handled

    # --- the processor as a long-running task ------------------------------------------------

    async def run(self, stop: asyncio.Event) -> ProcessorStats:
        """Until `stop` is set: balance every `acquire_seconds`, and a supervisor per held
        lease (pages through the handler, a renewal every `renew_seconds`). Then the held
        leases are released, so another instance need not wait them out."""
        supervisors: dict[str, asyncio.Task[None]] = {}
        logger.info("change-feed processor %s started", self.owner)
        try:
            while not stop.is_set():
                try:
                    await self.balance()
                except Exception:
                    # The lease store is unreachable: held leases carry on till they must stop.
                    logger.warning("%s could not balance its leases", self.owner, exc_info=True)
                for feed_range in self.held_ranges():
                    task = supervisors.get(feed_range)
                    if task is None or task.done():
                        supervisors[feed_range] = asyncio.create_task(
                            self._supervise(feed_range, stop), name=f"lease {feed_range}"
                        )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._acquire_seconds)
        finally:
            # Each supervisor ends after its page and its checkpoint; one still in its handler
            # when the lease may lapse (its last renewal can be `renew_seconds` old) is cancelled:
            # the next owner handles that page again.
            if supervisors:
                await asyncio.wait(
                    supervisors.values(), timeout=self._lease_seconds - self._renew_seconds
                )
            for task in supervisors.values():
                task.cancel()
            await asyncio.gather(*supervisors.values(), return_exceptions=True)
            await self.release()
            logger.info("change-feed processor %s stopped: %s", self.owner, self.stats)
        return self.stats

    async def _supervise(self, feed_range: str, stop: asyncio.Event) -> None:
        supervisor = asyncio.current_task()
        renewer = asyncio.create_task(self._renew_until_lost(feed_range, stop, supervisor))
        try:
            while not stop.is_set() and feed_range in self._held:
                try:
                    handled = await self.process_page(feed_range)
                except Exception:
                    logger.warning(
                        "%s: a page of feed range %s failed; it is read again",
                        self.owner,
                        feed_range,
                        exc_info=True,
                    )
                    handled = 0
                if not handled:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self._poll_seconds)
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew_until_lost(
        self, feed_range: str, stop: asyncio.Event, supervisor: asyncio.Task[Any] | None
    ) -> None:
        """Renew every `renew_seconds`; once the lease went too long without a successful
        write, give it up and cancel the supervisor's page (its handler included): the next
        owner handles that page again, and never beside us."""
        retry_at = 0.0  # after a failed renewal, the next attempt waits `renew_seconds`
        while not stop.is_set():
            held = self._held.get(feed_range)
            if held is None:
                return
            due = max(held.renewed_at + self._renew_seconds, retry_at)
            wait = min(due, held.handle_until) - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(wait, 0.0))
            if stop.is_set():
                return
            if self._out_of_time(feed_range, held):
                if supervisor is not None:
                    supervisor.cancel()
                return
            if time.monotonic() < max(held.renewed_at + self._renew_seconds, retry_at):
                continue  # a checkpoint renewed it meanwhile
            try:
                await self.renew(feed_range)
            except Exception:
                retry_at = time.monotonic() + self._renew_seconds
                logger.warning("%s could not renew %s", self.owner, feed_range, exc_info=True)

    async def release(self) -> None:
        """Give every held lease up (free, its continuation kept). A lease that moved on is
        not ours to release; a store error leaves the lease to end by itself."""
        for feed_range, held in list(self._held.items()):
            async with held.lock:
                self._held.pop(feed_range, None)
                try:
                    await self._leases.release(held.lease)
                except Exception as error:
                    logger.info("%s did not release %s: %r", self.owner, feed_range, error)


def _tiled_parents(leases: Sequence[Lease]) -> list[Lease]:
    """The leases whose whole range other, smaller leases cover: split parents."""
    return [
        lease
        for lease in leases
        if (
            inner := [
                other.keys
                for other in leases
                if other.feed_range != lease.feed_range and lease.keys.contains(other.keys)
            ]
        )
        and not lease.keys.minus(inner)
    ]


def _check_range(lease: Lease, page: ChangePage) -> None:
    """`ForeignContinuationError` unless the page's continuation resumes the lease's range."""
    if page.continuation_range is None:
        return
    answered = EpkRange.parse(page.continuation_range)
    if answered != lease.keys:
        raise ForeignContinuationError(
            f"the change feed answered a continuation of {answered} for the lease of "
            f"{lease.keys}: not written as its checkpoint"
        )


def _digest(lease: Lease) -> str:
    """A short, stable name of a lease's feed range: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(lease.feed_range.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _shown(lease: Lease) -> str:
    """A lease's feed range for a log line, cut short."""
    text = lease.feed_range
    return "feed range " + (text if len(text) <= 80 else text[:77] + "...")
