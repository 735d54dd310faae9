"""The outbox dispatcher: from the orders container's change feed to the `order-events` topic.

Publish, then mark: each undispatched outbox document is published with the MessageId stored
on it (its event id and a random nonce drawn when it was written, `domain/events.py`), then
marked `dispatched` with If-Match. A crash between the two publishes it again on restart, with
the same MessageId: the topic's duplicate detection and every subscriber's inbox absorb the copy.

Poison: a document that can never be published is parked, not retried forever (which would
hold its whole feed range behind it). "Never" is decided by what fails: a document the layout
cannot read as an event is parked at once (reading is a pure function of the document); one
whose event the broker refuses for good (`PublishRefusedError`: larger than the topic takes)
is tried `park_after_attempts` times (3), `refused_retry_seconds` (1 s) apart, then parked.
Parking stores the reason on the outbox document itself (`parked`, If-Match), logs one ERROR
line and counts `orders.dispatcher.parked`; the batch goes on and its feed range moves on.
Everything else (a transient or unknown publish failure, a missing role, a failed mark) raises
as before: the broker or the store will answer again, and the batch is read again.
`orders outbox parked` lists the parked documents, `orders outbox redrive` sends one again.

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
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from exactly_once.change_feed import ChangeFeedProcessor, LeaseStore
from exactly_once.options import DEFAULT_LEASE_SECONDS
from exactly_once.telemetry import log_value
from orders.domain.events import OrderEvent
from orders.exceptions import PublishRefusedError
from orders.observability import DispatcherTelemetry
from orders.service.ports import (
    EventLayout,
    EventPublisher,
    OutboxFeed,
    OutboxParking,
    PendingEvent,
)

logger = logging.getLogger("orders.dispatcher")

DEFAULT_POLL_SECONDS = 0.5
DEFAULT_PAGE_SIZE = 100
# How often a dispatcher looks for a free or ended lease. The processor's default (13 s, the
# .NET one) would leave a released range unread that long; the dispatcher always looked at
# once, and one query of a few small lease documents a second costs little.
ACQUIRE_SECONDS = 1.0
# A document whose event the broker refuses for good is tried this often, this far apart,
# before it is parked (a refusal is about the message, so more tries would not change it).
PARK_AFTER_ATTEMPTS = 3
REFUSED_RETRY_SECONDS = 1.0


class ParkReason(StrEnum):
    """Why an outbox document was set aside (stored as `parked.reason` on it)."""

    UNREADABLE = "UnreadableOutboxDocument"
    """The layout cannot read the document as an event: no retry reads it differently."""
    REFUSED = "PublishRefused"
    """The broker refused the event for good (`PublishRefusedError`), every attempt."""


# Called after each publish and before the mark (crash drills exit here).
AfterPublish = Callable[[OrderEvent], None]


@dataclass
class DispatcherStats:
    published: int = 0
    pages: int = 0
    leases_taken: int = 0
    parked: int = 0


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
        parking: OutboxParking | None = None,
        park_after_attempts: int = PARK_AFTER_ATTEMPTS,
        refused_retry_seconds: float = REFUSED_RETRY_SECONDS,
    ) -> None:
        if park_after_attempts < 1:
            raise ValueError("park_after_attempts must be at least 1")
        # Without it, a document that cannot be published raises like any failure.
        self._parking = parking
        self._park_after_attempts = park_after_attempts
        self._refused_retry_seconds = refused_retry_seconds
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
                    pending = await self._readable(document)
                    if pending is None:
                        continue
                    self._telemetry.attempting(document)
                    if not await self._published(document, pending):
                        continue  # parked: the batch (and the feed range) moves on
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

    async def _readable(self, document: dict[str, Any]) -> PendingEvent | None:
        """The event `document` holds while pending; None when it holds none, or when it
        cannot be read as one (then it is parked)."""
        try:
            return self._layout.pending_event(document)
        except Exception as unreadable:
            if self._parking is None:
                raise
            await self._park(document, ParkReason.UNREADABLE, repr(unreadable), attempts=1)
            return None

    async def _published(self, document: dict[str, Any], pending: PendingEvent) -> bool:
        """Publish `pending`: True once it is, False when the broker refused it for good on
        every attempt (then it is parked). Any other failure raises, as it always did."""
        for attempt in range(1, self._park_after_attempts + 1):
            try:
                await self._publisher.publish_event(
                    pending.event, pending.trace_context, message_id=pending.message_id
                )
                return True
            except PublishRefusedError as refused:
                if self._parking is None:
                    raise
                if attempt == self._park_after_attempts:
                    await self._park(document, ParkReason.REFUSED, str(refused), attempt)
                    return False
                await asyncio.sleep(self._refused_retry_seconds)
        raise AssertionError("unreachable: the last attempt returns")

    async def _park(
        self, document: dict[str, Any], reason: ParkReason, description: str, attempts: int
    ) -> None:
        assert self._parking is not None
        await self._parking.park(
            document,
            {
                "reason": reason.value,
                "description": description[:1024],
                "attempts": attempts,
                "parkedAt": datetime.now(UTC).isoformat(),
            },
        )
        self.stats.parked += 1
        self._telemetry.parked(reason.value)
        logger.error(
            "ALERT outbox document %s of order %s parked after %d attempt(s), %s: %s; its feed "
            "range moves on. List: `orders outbox parked`; send again: `orders outbox redrive`",
            log_value(str(document.get("id"))),
            log_value(str(document.get("orderId"))),
            attempts,
            reason.value,
            log_value(description),
        )

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
