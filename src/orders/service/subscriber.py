"""What the fan-out subscribers share: reading the event, and the decisions every one makes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from orders.domain.events import OrderEvent, parse_order_event
from orders.domain.messages import MessageRejected
from orders.domain.model import is_entity_id
from orders.domain.outcomes import Decision, Outcome, Settlement
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import OrderStatus, OrderStatusChanged
from orders.exceptions import TransientPublishError, TransientStoreError
from orders.observability import log_value
from orders.service.ports import StatusPublisher
from orders.service.saga import EventRefused

logger = logging.getLogger("orders.subscriber")
# Failures every subscriber retries through the broker (abandon, redelivery).
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (TransientStoreError, TransientPublishError)


class EventRejected(Exception):
    """The event can never be processed; carries the dead-letter decision."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.dead_letter_description)
        self.decision = decision


def read_event(message: ReceivedOrderMessage) -> OrderEvent:
    """The event, or `EventRejected` with a dead-letter decision naming the reason."""
    try:
        return parse_order_event(message)
    except MessageRejected as rejection:
        order_id = rejection.order_id
        raise EventRejected(
            Decision(
                Outcome.REJECTED,
                Settlement.DEAD_LETTER,
                order_id=order_id if is_entity_id(order_id) else None,
                dead_letter_reason=rejection.reason.value,
                dead_letter_description=rejection.description,
            )
        ) from rejection


def transient(event: OrderEvent, error: Exception) -> Decision:
    """A failure worth retrying (store, payment service or status publish): abandon."""
    return Decision(Outcome.TRANSIENT_FAILURE, Settlement.ABANDON, event.order_id, error=str(error))


def unexpected(event: OrderEvent, error: Exception) -> Decision:
    return Decision(
        Outcome.UNEXPECTED_FAILURE,
        Settlement.ABANDON,
        event.order_id,
        error=f"{type(error).__name__}: {error}",
    )


async def announce(
    status: StatusPublisher | None, event: OrderEvent, new_status: OrderStatus, now: datetime
) -> None:
    """Publish the status the effect produced, after the effect and again on every duplicate:
    the update is absolute and versioned, so a second copy changes nothing, and a crash between
    the effect and the publish is healed by the redelivery."""
    if status is not None:
        await status.publish_status(
            OrderStatusChanged.of(event.order_id, new_status, changed_at=now)
        )


async def handle_event(
    message: ReceivedOrderMessage,
    effect: Callable[[OrderEvent], Awaitable[Decision]],
    *,
    consumer: str,
    transient_errors: tuple[type[Exception], ...] = TRANSIENT_ERRORS,
) -> Decision:
    """One subscriber's decision for one message: a malformed event is dead-lettered, and so
    is one no stored order vouches for; the effect decides otherwise, a failure worth retrying
    abandons, and a bug abandons too (logged),
    never letting the lock be renewed for minutes."""
    try:
        event = read_event(message)
    except EventRejected as rejected:
        return rejected.decision
    try:
        return await effect(event)
    except EventRefused as refused:
        return refused.decision  # no stored order vouches for it: dead-lettered, ALERT logged
    except transient_errors as exc:
        return transient(event, exc)
    except Exception as exc:
        logger.exception("%s of %s failed unexpectedly", consumer, log_value(event.order_id))
        return unexpected(event, exc)
