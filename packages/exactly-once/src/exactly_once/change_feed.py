"""A change-feed processor: leased feed ranges, judged by the database's clock.

The Python Cosmos DB SDK has no change-feed processor (".NET and Java only"). This one follows
the .NET processor's split into roles, in far fewer lines:

- a **lease store** (`LeaseStore`): one lease per feed range, holding its owner and its
  continuation; acquire, renew, checkpoint and release are each conditional on the lease's
  ETag, so of two instances that move at once one wins and the other learns it lost;
- a **bootstrapper** (`ChangeFeedProcessor.bootstrap`): a lease per feed range the monitored
  container has, created unowned;
- a **load balancer** (`leases_to_take`): which leases this instance takes, free or ended ones
  first, up to its fair share of the ranges among the live owners; an owner holding more than
  its share gives one lease up to an instance with fewer;
- a **supervisor per lease**: reads the range's changes page by page, hands each page to the
  handler and checkpoints only after the handler returned, while a renewer keeps the lease.

A lease is live while the database's time is within `leaseSeconds` of the `_ts` of its last
write, read in the same request (`exactly_once.records.lease_is_live`, the rule records
follow too). An instance whose clock is wrong can neither steal a live lease nor keep a dead one.

Delivery is at least once: a handler that raises leaves the continuation where it was, so the
page is read again; an instance that dies between the handler and the checkpoint leaves its
last page to be handled again by whoever takes the lease over. Handlers must be idempotent
(an outbox relay publishes with the MessageId stored on each entry: the broker drops the copy).

Not done: splits and merges of a feed range after its lease was created (a new range gets a
lease of its own from the next bootstrap; its parent's lease is left as it was).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from exactly_once.exceptions import RecordChangedError
from exactly_once.records import Stamp, lease_is_live

logger = logging.getLogger("exactly_once.change_feed")

# The .NET processor's defaults (ChangeFeedProcessorOptions).
DEFAULT_FEED_LEASE_SECONDS = 60.0
DEFAULT_RENEW_SECONDS = 17.0
DEFAULT_ACQUIRE_SECONDS = 13.0
DEFAULT_POLL_SECONDS = 5.0
DEFAULT_PAGE_SIZE = 100

Change = dict[str, Any]
# The handler: an async callable of one page of changes (never empty). It returns when the
# page's effects are done; the checkpoint follows. Raising leaves the page to be read again.
ChangeHandler = Callable[[list[Change]], Awaitable[object]]


@dataclass(frozen=True)
class Lease:
    """One feed range's lease as stored: who holds it (None: free), for how long after its
    last write, where reading resumes, and the store's stamp (ETag, `_ts`) of that write."""

    feed_range: str
    owner: str | None
    lease_seconds: float
    continuation: str | None = None
    stamp: Stamp | None = None

    def is_live(self, database_now_ms: int) -> bool:
        """Held by its owner still, by the database's clock alone (`records.lease_is_live`,
        the one rule for records and feed ranges alike)."""
        return self.owner is not None and lease_is_live(self, database_now_ms)


@dataclass(frozen=True)
class LeaseTable:
    """Every lease of one processor as stored, and the database's time they were read at."""

    leases: Sequence[Lease]
    database_now_ms: int


@dataclass(frozen=True)
class ChangePage:
    """One page of a feed range's changes and the continuation after it (None: unchanged)."""

    changes: list[Change]
    continuation: str | None


class ChangeFeed(Protocol):
    """The monitored container's change feed (latest version), by feed range."""

    async def feed_ranges(self) -> list[str]:
        """The container's feed ranges, each as a stable string (a lease's identity)."""
        ...

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        """The next page of `feed_range` after `continuation` (None: from the beginning)."""
        ...


class LeaseStore(Protocol):
    """The leases of one processor. Every write but `create` is conditional on the lease's
    stamp and raises `RecordChangedError` when it moved (another instance wrote first) or the
    lease is gone; nothing is written then."""

    async def read_all(self) -> LeaseTable:
        """Every lease, and the database's time, in one request."""
        ...

    async def create(self, feed_range: str, lease_seconds: float) -> None:
        """A free lease for `feed_range`; nothing when one exists."""
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
    and the checkpoint never write with an ETag the other just replaced."""

    lease: Lease
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    renewed_at: float = field(default_factory=time.monotonic)  # when to renew, never whether


@dataclass
class ProcessorStats:
    pages: int = 0
    changes: int = 0
    leases_taken: int = 0
    leases_lost: int = 0


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
    ) -> None:
        if not 0 < renew_seconds < lease_seconds:
            # A lease renewed less often than it lasts ends under a live owner.
            raise ValueError(f"renew_seconds ({renew_seconds}) must be within (0, lease_seconds)")
        if acquire_seconds <= 0 or poll_seconds <= 0 or page_size <= 0:
            raise ValueError("acquire_seconds, poll_seconds and page_size must be positive")
        self._feed = feed
        self._leases = leases
        self._handler = handler
        self.owner = owner or f"processor-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        self._renew_seconds = renew_seconds
        self._acquire_seconds = acquire_seconds
        self._poll_seconds = poll_seconds
        self._page_size = page_size
        self._held: dict[str, _Held] = {}
        self.stats = ProcessorStats()

    # --- the bootstrapper and the load balancer ---------------------------------------------

    async def bootstrap(self) -> LeaseTable:
        """A lease for every feed range that has none; the leases as they now stand."""
        table = await self._leases.read_all()
        known = {lease.feed_range for lease in table.leases}
        missing = [r for r in await self._feed.feed_ranges() if r not in known]
        for feed_range in missing:
            await self._leases.create(feed_range, self._lease_seconds)
        return await self._leases.read_all() if missing else table

    async def balance(self) -> list[str]:
        """Acquire what `leases_to_take` says; the feed ranges newly held. A lease another
        instance wrote first is left to it."""
        table = await self.bootstrap()
        for lease in table.leases:
            # Held here, owned by another in the store (ours ended, or was taken as more
            # than our share): its supervisor stops, and what it handled since our last
            # checkpoint the new owner handles again.
            mine = self._held.get(lease.feed_range)
            if mine is not None and lease.owner != self.owner:
                # Said as a lost renewal says it: until this line, the old holder may still
                # handle the range beside its new owner.
                logger.warning("%s lost %s to %s", self.owner, _shown(mine.lease), lease.owner)
                self._lose(lease.feed_range)
        taken: list[str] = []
        for lease in leases_to_take(table, self.owner):
            try:
                acquired = await self._leases.acquire(lease, self.owner, self._lease_seconds)
            except RecordChangedError:
                continue  # another instance moved first
            if lease.owner not in (None, self.owner):
                logger.info("%s took %s over from %s", self.owner, _shown(lease), lease.owner)
            # One line per lease taken, naming the range by a short digest (a feed range is
            # long JSON): what an operator greps to see which instance reads which range.
            logger.info("%s owns the lease of feed range %s", self.owner, _digest(lease))
            self._held[lease.feed_range] = _Held(acquired)
            self.stats.leases_taken += 1
            taken.append(lease.feed_range)
        return taken

    def held_ranges(self) -> list[str]:
        return list(self._held)

    # --- a supervisor's work: one page, renewals ---------------------------------------------

    async def process_page(self, feed_range: str) -> int:
        """One page of a held range through the handler, then its checkpoint; the changes
        handled. The handler's error propagates and the checkpoint stays where it was."""
        held = self._held.get(feed_range)
        if held is None:
            return 0
        page = await self._feed.read_changes(feed_range, held.lease.continuation, self._page_size)
        self.stats.pages += 1
        if page.changes:
            await self._handler(page.changes)
            self.stats.changes += len(page.changes)
        continuation = page.continuation
        if continuation is not None and continuation != held.lease.continuation:
            await self._write(
                feed_range, held, lambda lease: self._leases.checkpoint(lease, continuation)
            )
        return len(page.changes)

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
            try:
                held.lease = await write(held.lease)
            except RecordChangedError:
                # The lease ended and another instance took it: what we handled since our
                # last checkpoint it handles again (at least once).
                logger.warning("%s lost %s", self.owner, _shown(held.lease))
                self._lose(feed_range)
                return
            held.renewed_at = time.monotonic()

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
                    # The lease store is unreachable: held leases carry on till they end.
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
        renewer = asyncio.create_task(self._renew_until_lost(feed_range, stop))
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

    async def _renew_until_lost(self, feed_range: str, stop: asyncio.Event) -> None:
        while feed_range in self._held and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._renew_seconds)
            try:
                await self.renew(feed_range)
            except Exception:
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


def _digest(lease: Lease) -> str:
    """A short, stable name of a lease's feed range: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(lease.feed_range.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _shown(lease: Lease) -> str:
    """A lease's feed range for a log line, cut short."""
    text = lease.feed_range
    return "feed range " + (text if len(text) <= 80 else text[:77] + "...")
