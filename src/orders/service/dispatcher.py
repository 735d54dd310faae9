"""The outbox dispatcher: from the orders container's change feed to the `order-events` topic.

Publish, then mark: each undispatched outbox document is published with the MessageId stored
on it (its event id and a random nonce drawn when it was written, `domain/events.py`), then
marked `dispatched` with If-Match. A crash between the two publishes it again on restart, with
the same MessageId: the topic's duplicate detection and every subscriber's inbox absorb the copy.

Checkpoints: one lease document per feed range in the leases container holds the owner and the
continuation. A dispatcher reads a range only while it owns its lease (judged by the database's
clock); several dispatchers share the ranges, and one that stops leaves its lease to expire and
be taken over, resuming from the last checkpoint. In Azure a Functions Cosmos DB trigger (with
its own lease container) calls `dispatch` with each batch of changes: the same core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from exactly_once.records import Stamp
from orders.domain.events import OrderEvent
from orders.domain.leases import DEFAULT_LEASE_SECONDS, FeedLease, lease_is_live
from orders.exceptions import DocumentExistsError, LeaseLostError
from orders.observability import DispatcherTelemetry, log_value
from orders.service.ports import DispatcherLayout, EventPublisher, FencedDocuments, OutboxFeed

logger = logging.getLogger("orders.dispatcher")

DEFAULT_POLL_SECONDS = 0.5
DEFAULT_PAGE_SIZE = 100

# Called after each publish and before the mark (crash drills exit here).
AfterPublish = Callable[[OrderEvent], None]


@dataclass
class DispatcherStats:
    published: int = 0
    pages: int = 0
    leases_taken: int = 0


@dataclass
class _OwnedLease:
    lease: FeedLease
    stamp: Stamp  # the stored version a renewal must match
    renewed_at: float  # our monotonic clock: only when to renew, never whether it is live

    @property
    def continuation(self) -> str | None:
        return self.lease.continuation


class OutboxDispatcher:
    def __init__(
        self,
        feed: OutboxFeed,
        publisher: EventPublisher,
        leases: FencedDocuments,
        layout: DispatcherLayout,
        *,
        owner: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        page_size: int = DEFAULT_PAGE_SIZE,
        after_publish: AfterPublish | None = None,
        telemetry: DispatcherTelemetry | None = None,
    ) -> None:
        self._feed = feed
        self._publisher = publisher
        self._leases = leases
        self._layout = layout
        self._owner = owner or f"dispatcher-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = lease_seconds
        self._poll_seconds = poll_seconds
        self._page_size = page_size
        self._after_publish = after_publish
        self._telemetry = telemetry or DispatcherTelemetry()
        self._owned: dict[str, _OwnedLease] = {}
        self.stats = DispatcherStats()

    async def dispatch(self, documents: list[dict[str, Any]]) -> int:
        """Publish and mark every undispatched outbox document among `documents`, in order.

        Raises on the first failure (publish or mark): the caller keeps its checkpoint, so the
        batch is read again and what was published is published again, as a duplicate.
        """
        published = 0
        with self._telemetry.batch_span(len(documents)) as span:
            try:
                for document in documents:
                    pending = self._layout.pending_event(document)
                    if pending is None:
                        continue
                    self._telemetry.attempting(document)
                    await self._publisher.publish_event(
                        pending.event, pending.trace_context, message_id=pending.message_id
                    )
                    if self._after_publish is not None:
                        self._after_publish(pending.event)
                    await self._feed.mark_dispatched(document)
                    published += 1
            except Exception as error:
                self._telemetry.failed(span, error)
                raise
            finally:
                # What was published and marked before a failure counts: it will not be again.
                self._telemetry.published(span, published)
                self.stats.published += published
        return published

    async def run(self, stop: asyncio.Event) -> DispatcherStats:
        logger.info("dispatcher %s started", self._owner)
        while not stop.is_set():
            try:
                progressed = await self.run_once()
            except Exception:
                # Publish or store failures: the checkpoint did not move, the next round retries.
                logger.warning("dispatch round failed; retrying", exc_info=True)
                progressed = 0
            if not progressed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._poll_seconds)
        logger.info("dispatcher %s stopped: published=%d", self._owner, self.stats.published)
        return self.stats

    async def run_once(self) -> int:
        """One page of each feed range this dispatcher owns (or can take); documents seen."""
        seen = 0
        for feed_range in await self._feed.feed_ranges():
            lease = await self._own(feed_range)
            if lease is None:
                continue
            page = await self._feed.read_changes(feed_range, lease.continuation, self._page_size)
            self.stats.pages += 1
            await self.dispatch(page.documents)
            seen += len(page.documents)
            await self._checkpoint(feed_range, lease, page.continuation)
        return seen

    async def _own(self, feed_range: str) -> _OwnedLease | None:
        owned = self._owned.get(feed_range)
        if owned is not None:
            return owned
        lease_id = self._layout.lease_id(feed_range)
        read = await self._leases.read(lease_id, lease_id)
        mine = FeedLease(feed_range, self._owner, self._lease_seconds)
        try:
            if read.document is None:
                stored = await self._leases.create(self._layout.lease_document(mine))
            else:
                current = self._layout.feed_lease(read.document.body, self._lease_seconds)
                if current.owner not in (None, self._owner) and lease_is_live(
                    read.document.stamp.written_at_s, current.lease_seconds, read.database_now_ms
                ):
                    return None
                mine = replace(mine, continuation=current.continuation)
                stored = await self._leases.replace(
                    self._layout.lease_document(mine), etag=read.document.stamp.etag
                )
        except (DocumentExistsError, LeaseLostError):
            return None  # another dispatcher moved first
        self.stats.leases_taken += 1
        logger.info("dispatcher %s owns feed range lease %s", self._owner, lease_id)
        owned = _OwnedLease(mine, stored.stamp, time.monotonic())
        self._owned[feed_range] = owned
        return owned

    async def _checkpoint(
        self, feed_range: str, lease: _OwnedLease, continuation: str | None
    ) -> None:
        moved = continuation is not None and continuation != lease.continuation
        due = time.monotonic() - lease.renewed_at > self._lease_seconds / 3
        if not (moved or due):
            return
        renewed = replace(lease.lease, continuation=continuation)
        try:
            stored = await self._leases.replace(
                self._layout.lease_document(renewed), etag=lease.stamp.etag
            )
        except LeaseLostError:
            # Our lease lapsed and another dispatcher owns the range: what we published since
            # our last checkpoint it publishes again, as duplicates.
            logger.warning(
                "dispatcher %s lost feed range lease %s",
                self._owner,
                log_value(self._layout.lease_id(feed_range)),
            )
            self._owned.pop(feed_range, None)
            return
        self._owned[feed_range] = _OwnedLease(renewed, stored.stamp, time.monotonic())

    async def release(self) -> None:
        """Give up the leases on a graceful stop so another dispatcher need not wait them out."""
        for feed_range, lease in list(self._owned.items()):
            released = replace(lease.lease, owner=None)
            with contextlib.suppress(Exception):
                await self._leases.replace(
                    self._layout.lease_document(released), etag=lease.stamp.etag
                )
            self._owned.pop(feed_range, None)
