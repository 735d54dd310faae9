"""The outbox dispatcher: from the orders container's change feed to the `order-events` topic.

Publish, then mark: each undispatched outbox document is published with the MessageId stored
on it (its event id and a random nonce drawn when it was written, `domain/events.py`), then
marked `dispatched` with If-Match. A crash between the two publishes it again on restart, with
the same MessageId: the topic's duplicate detection and every subscriber's inbox absorb the copy.

Checkpoints: `dispatch` is the handler of the core's change-feed processor
(`exactly_once.change_feed`), which keeps one lease per feed range in the leases container
(owner and continuation, judged by the database's clock), shares the ranges among dispatchers,
takes over the lease of one that died and checkpoints only after `dispatch` returned. In Azure
a Functions Cosmos DB trigger (with its own lease container) calls `dispatch` with each batch
of changes: the same core.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exactly_once.change_feed import ChangeFeedProcessor, LeaseStore
from exactly_once.records import DEFAULT_LEASE_SECONDS
from orders.domain.events import OrderEvent
from orders.observability import DispatcherTelemetry
from orders.service.ports import EventLayout, EventPublisher, OutboxFeed

logger = logging.getLogger("orders.dispatcher")

DEFAULT_POLL_SECONDS = 0.5
DEFAULT_PAGE_SIZE = 100
# How often a dispatcher looks for a free or ended lease. The processor's default (13 s, the
# .NET one) would leave a released range unread that long; the dispatcher always looked at
# once, and one query of a few small lease documents a second costs little.
ACQUIRE_SECONDS = 1.0

# Called after each publish and before the mark (crash drills exit here).
AfterPublish = Callable[[OrderEvent], None]


@dataclass
class DispatcherStats:
    published: int = 0
    pages: int = 0
    leases_taken: int = 0


class OutboxDispatcher:
    """The outbox relay: `dispatch` over the core's change-feed processor. A lease is renewed
    every third of `lease_seconds`, as the dispatcher always did."""

    def __init__(
        self,
        feed: OutboxFeed,
        publisher: EventPublisher,
        leases: LeaseStore,
        layout: EventLayout,
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
        self._layout = layout
        self._after_publish = after_publish
        self._telemetry = telemetry or DispatcherTelemetry()
        self._processor = ChangeFeedProcessor(
            feed,
            leases,
            self.dispatch,
            owner=owner or f"dispatcher-{uuid.uuid4().hex[:12]}",
            lease_seconds=lease_seconds,
            renew_seconds=lease_seconds / 3,
            acquire_seconds=ACQUIRE_SECONDS,
            poll_seconds=poll_seconds,
            page_size=page_size,
        )
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
        """Until `stop` is set; then the leases are released (`ChangeFeedProcessor.run`)."""
        logger.info("dispatcher %s started", self._processor.owner)
        await self._processor.run(stop)
        logger.info(
            "dispatcher %s stopped: published=%d", self._processor.owner, self.stats.published
        )
        return self._with_processor_stats()

    async def run_once(self) -> int:
        """One round: take free or ended leases, renew what is due, one page of each feed
        range held through `dispatch`; documents seen. `dispatch`'s error propagates."""
        try:
            return await self._processor.run_once()
        finally:
            self._with_processor_stats()

    async def release(self) -> None:
        """Give up the leases on a graceful stop so another dispatcher need not wait them out."""
        await self._processor.release()

    def _with_processor_stats(self) -> DispatcherStats:
        self.stats.pages = self._processor.stats.pages
        self.stats.leases_taken = self._processor.stats.leases_taken
        return self.stats
