"""Shipping: the natural inbox. Its inbox record and the shipment are one transactional batch,
so the record exists if and only if the effect does; a redelivery finds the record and stops."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from orders.domain.inbox import shipping_documents
from orders.domain.outcomes import Decision, Outcome, Settlement
from orders.domain.received import ReceivedOrderMessage
from orders.exceptions import DocumentExistsError, TransientStoreError
from orders.observability import log_value
from orders.service.ports import InboxStore
from orders.service.subscriber import EventRejected, read_event, transient, unexpected

logger = logging.getLogger("orders.shipping")


class ShippingConsumer:
    def __init__(
        self, inbox: InboxStore, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self._inbox = inbox
        self._clock = clock

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        try:
            event = read_event(message)
        except EventRejected as rejected:
            return rejected.decision
        documents = shipping_documents(event, message_id=event.event_id, processed_at=self._clock())
        try:
            await self._inbox.create_together(event.order_id, list(documents))
        except DocumentExistsError:
            return Decision(Outcome.DUPLICATE, Settlement.COMPLETE, event.order_id)
        except TransientStoreError as exc:
            return transient(event, exc)
        except Exception as exc:
            logger.exception("shipping %s failed unexpectedly", log_value(event.order_id))
            return unexpected(event, exc)
        logger.info("shipment requested: order_id=%s", log_value(event.order_id))
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, event.order_id)
