"""What the fan-out subscribers share: reading the event, and the decisions every one makes."""

from __future__ import annotations

from datetime import datetime

from orders.domain.events import OrderAccepted, parse_order_accepted
from orders.domain.messages import MessageRejected
from orders.domain.model import is_entity_id
from orders.domain.outcomes import Decision, Outcome, Settlement
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import OrderStatus, OrderStatusChanged
from orders.service.ports import StatusPublisher


class EventRejected(Exception):
    """The event can never be processed; carries the dead-letter decision."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.dead_letter_description)
        self.decision = decision


def read_event(message: ReceivedOrderMessage) -> OrderAccepted:
    """The event, or `EventRejected` with a dead-letter decision naming the reason."""
    try:
        return parse_order_accepted(message)
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


def transient(event: OrderAccepted, error: Exception) -> Decision:
    """A failure worth retrying (store, payment service or status publish): abandon."""
    return Decision(Outcome.TRANSIENT_FAILURE, Settlement.ABANDON, event.order_id, error=str(error))


def unexpected(event: OrderAccepted, error: Exception) -> Decision:
    return Decision(
        Outcome.UNEXPECTED_FAILURE,
        Settlement.ABANDON,
        event.order_id,
        error=f"{type(error).__name__}: {error}",
    )


async def announce(
    status: StatusPublisher | None, event: OrderAccepted, new_status: OrderStatus, now: datetime
) -> None:
    """Publish the status the effect produced, after the effect and again on every duplicate:
    the update is absolute and versioned, so a second copy changes nothing, and a crash between
    the effect and the publish is healed by the redelivery."""
    if status is not None:
        await status.publish_status(
            OrderStatusChanged.of(event.order_id, new_status, changed_at=now)
        )
