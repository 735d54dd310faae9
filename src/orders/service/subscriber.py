"""What every consumer shares: the one error frame (`decided`), and for the fan-out subscribers
reading the event and announcing the status their effect produced."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from exactly_once.decisions import Decision, Outcome, Settlement, decision_for_error
from orders.domain.events import (
    NO_CUTOVER,
    BareEventIdCutover,
    OrderEvent,
    parse_order_event,
)
from orders.domain.ids import is_entity_id
from orders.domain.messages import MessageRejected
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import OrderStatus, OrderStatusChanged
from orders.exceptions import TransientPublishError
from orders.service.ports import StatusPublisher
from orders.service.saga import EventRefused

# What the core cannot know is transient: the app's publish port wraps the broker's SDK errors
# (ports.py). The store's, the payment provider's (billing raises the core's `RetryLater`) and
# every client library's are the core's own classification (`exactly_once.retries.is_transient`).
APP_TRANSIENT = (TransientPublishError,)


class EventRejected(Exception):
    """The event can never be processed; carries the dead-letter decision."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.dead_letter_description)
        self.decision = decision


def read_event(
    message: ReceivedOrderMessage, cutover: BareEventIdCutover = NO_CUTOVER
) -> OrderEvent:
    """The event, or `EventRejected` with a dead-letter decision naming the reason. A bare
    eventId is judged against `cutover` by when the broker took the message in (now, when the
    host does not say)."""
    taken_in = message.enqueued_time or datetime.now(UTC)
    try:
        return parse_order_event(message, bare_allowed=cutover.allows_bare(taken_in))
    except MessageRejected as rejection:
        order_id = rejection.order_id
        raise EventRejected(
            Decision(
                Outcome.REJECTED,
                Settlement.DEAD_LETTER,
                key=order_id if is_entity_id(order_id) else None,
                dead_letter_reason=rejection.reason.value,
                dead_letter_description=rejection.description,
            )
        ) from rejection


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


async def decided(
    effect: Callable[[], Awaitable[Decision]],
    *,
    consumer: str,
    order_id: str | None,
    request_hash: str | None = None,
) -> Decision:
    """The one error frame of every consumer: the effect's decision, or what its exception
    means. A refused event carries its dead-letter decision; everything else is the core's
    frame (`exactly_once.decisions.decision_for_error`: a mismatch, a refusal or a write the
    store refused for good dead-letters; a store, provider or broker unreachable or busy, a
    lost race or a busy lease backs off in place; a bug is logged and retried a few times at
    once, then abandoned). Every decision names the order (`key`) and, when known, its request
    hash."""
    try:
        return await effect()
    except Exception as exc:
        return decision_for_failure(
            exc, consumer=consumer, order_id=order_id, request_hash=request_hash
        )


def decision_for_failure(
    exc: Exception,
    *,
    consumer: str,
    order_id: str | None,
    request_hash: str | None = None,
) -> Decision:
    """What an effect's exception means (`decided`'s frame, for a consumer that catches the
    exception itself, so that its path does not leave it and come back through a callback)."""
    if isinstance(exc, EventRefused):
        return exc.decision  # no stored order vouches for it: dead-lettered, ALERT logged
    return decision_for_error(
        exc, consumer=consumer, message_id=order_id, key=order_id, transient=APP_TRANSIENT
    ).about(order_id, request_hash)


async def handle_event(
    message: ReceivedOrderMessage,
    effect: Callable[[OrderEvent], Awaitable[Decision]],
    *,
    consumer: str,
    cutover: BareEventIdCutover = NO_CUTOVER,
) -> Decision:
    """One subscriber's decision for one message: a malformed event is dead-lettered (a bare
    eventId after the `cutover` too), and so is one no stored order vouches for; the effect
    decides otherwise, through `decided`."""
    try:
        event = read_event(message, cutover)
    except EventRejected as rejected:
        return rejected.decision
    return await decided(lambda: effect(event), consumer=consumer, order_id=event.order_id)
