"""The order saga's one place of decision: the order document.

Cancel and ship race for the same order. Both are decided by an If-Match replace of the order
document (`id = orderId`, partition `/orderId`): shipping reserves the shipment by writing
`fulfilment.state = "shipping"`; a cancel writes `fulfilment.state = "cancelled"` in one
transactional batch with its `OrderCancelled` outbox event. Whoever commits first wins; the
loser's replace fails its ETag condition, it reads the document again and sees the winner:
a cancel after the reservation is refused (`order-already-shipped`), shipping after a cancel
completes with no shipment (`skipped_cancelled`).

No shipment without a charge: billing writes the order's payment onto the same document, with
the same If-Match. A charge made marks it `payment.state = "charged"`; a charge the provider
refused for good ends an open order in `fulfilment.state = "payment_failed"`. Shipping reserves
only a charged order: it waits for the charge (a bounded poll, then the broker's redelivery),
and skips an order whose payment failed (`skipped_payment_failed`), as it skips a cancelled one.
A refused charge therefore always finds the order unshipped, and the order ends in a state of its
own, never shipped.

The same read verifies an event against the store: billing and shipping act only on an order
that exists and whose stored total, currency and customer are the event's. Nothing here talks to
a store or reads a document: the Cosmos layout (`adapters/cosmos_layout.py`) reads a `SagaOrder`
off the order document and writes the fulfilment decided here back onto it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from orders.domain.events import (
    ORDER_ACCEPTED,
    ORDER_CANCELLED,
    OrderAccepted,
    OrderCancelled,
    OrderEvent,
    order_event_id,
)
from orders.domain.messages import DeadLetterReason
from orders.domain.ownership import NO_OWNER, StoredOwner


class Fulfilment(StrEnum):
    OPEN = "open"  # neither shipped nor cancelled: both may still happen
    SHIPPING = "shipping"  # the shipment is reserved: a cancel is refused from now on
    CANCELLED = "cancelled"  # cancelled: no shipment will be made, a charge is paid back
    # The provider refused the charge for good: no shipment will be made, nothing to pay back.
    PAYMENT_FAILED = "payment_failed"


@dataclass(frozen=True)
class SagaOrder:
    """What the saga decides on: the stored order's own fields and its fulfilment. The store
    adapter reads it off the order document (`DocumentLayout.saga_order`) and writes the
    fulfilment back onto that document; the document itself never reaches the domain."""

    order_id: str
    customer_id: str
    currency: str
    total_amount: Decimal
    line_count: int
    fulfilment: Fulfilment
    shipment_event_id: str | None  # the event whose delivery reserved the shipment
    cancelled_at: str | None
    # Who may see and cancel it through the API (`domain/ownership.py`); set once, at creation.
    owner: StoredOwner = NO_OWNER
    charged: bool = False  # billing recorded the provider's charge on the order document
    payment_failed_at: str | None = None  # when billing's refusal ended it (payment_failed)


@dataclass(frozen=True)
class EventRefusal:
    """Why an event is not to be acted on: no stored order vouches for it."""

    reason: DeadLetterReason
    description: str


def check_event(order: SagaOrder | None, event: OrderEvent) -> EventRefusal | None:
    """None if the stored order vouches for `event`, else why not (`order` is None when no
    order document is stored under the event's orderId).

    An `OrderAccepted` must name a stored order, with its outbox event's id (written in the
    order's own batch, so the id proves the event came from that write), its total, currency,
    customer and line count. An `OrderCancelled` must name an order whose document says
    cancelled. Anything else was not produced by this system's dispatcher: a misrouted
    producer, a test tool on the wrong namespace, a forgery.
    """
    if order is None:
        return EventRefusal(
            DeadLetterReason.UNKNOWN_ORDER,
            f"{event.event_type} {event.event_id!r} names order {event.order_id!r}, "
            "which is not stored",
        )
    if isinstance(event, OrderCancelled):
        if event.event_id != order_event_id(order.order_id, ORDER_CANCELLED):
            return _mismatch(
                event, f"eventId should be {order_event_id(order.order_id, ORDER_CANCELLED)!r}"
            )
        if order.fulfilment is not Fulfilment.CANCELLED:
            return _mismatch(event, f"the stored order is {order.fulfilment.value}, not cancelled")
        return None
    return _check_accepted(order, event)


def _check_accepted(order: SagaOrder, event: OrderAccepted) -> EventRefusal | None:
    expected_id = order_event_id(order.order_id, ORDER_ACCEPTED)
    differences = [
        f"{name} {theirs!r} != stored {ours!r}"
        for name, theirs, ours in (
            ("eventId", event.event_id, expected_id),
            ("totalAmount", event.amount, order.total_amount),
            ("currency", str(event.currency), order.currency),
            ("customerId", event.customer_id, order.customer_id),
            ("lineCount", event.line_count, order.line_count),
        )
        if theirs != ours
    ]
    if differences:
        return _mismatch(event, "; ".join(differences))
    return None


def _mismatch(event: OrderEvent, detail: str) -> EventRefusal:
    return EventRefusal(
        DeadLetterReason.EVENT_MISMATCH,
        f"{event.event_type} {event.event_id!r} does not match the stored order: {detail}",
    )


class CancelVerdict(StrEnum):
    CANCEL = "cancel"  # open: write the cancel (If-Match) with its event
    ALREADY_CANCELLED = "already_cancelled"  # an earlier cancel (any key) took effect
    ALREADY_SHIPPED = "already_shipped"  # the shipment was reserved first: refuse


def judge_cancel(order: SagaOrder) -> CancelVerdict:
    match order.fulfilment:
        case Fulfilment.OPEN | Fulfilment.PAYMENT_FAILED:
            # An order whose payment failed never ships: its customer may still cancel it
            # (billing then finds nothing to refund).
            return CancelVerdict.CANCEL
        case Fulfilment.CANCELLED:
            return CancelVerdict.ALREADY_CANCELLED
        case _:
            return CancelVerdict.ALREADY_SHIPPED


class ShipVerdict(StrEnum):
    RESERVE = "reserve"  # open and charged: reserve the shipment (If-Match), then write it
    RESERVED = "reserved"  # reserved by this event's earlier delivery: write it (idempotent)
    AWAIT_CHARGE = "await_charge"  # open, not charged yet: billing has not decided
    SKIP_CANCELLED = "skip_cancelled"  # cancelled first: no shipment
    SKIP_PAYMENT_FAILED = "skip_payment_failed"  # the charge was refused: no shipment


def judge_shipment(order: SagaOrder) -> ShipVerdict:
    """Shipping's verdict. A reservation always names the order's own `OrderAccepted`, the
    only event that ships it (checked before this), so any reservation is this event's."""
    match order.fulfilment:
        case Fulfilment.OPEN:
            return ShipVerdict.RESERVE if order.charged else ShipVerdict.AWAIT_CHARGE
        case Fulfilment.SHIPPING:
            return ShipVerdict.RESERVED
        case Fulfilment.PAYMENT_FAILED:
            return ShipVerdict.SKIP_PAYMENT_FAILED
        case _:
            return ShipVerdict.SKIP_CANCELLED


class PaymentVerdict(StrEnum):
    RECORD = "record"  # write the payment's outcome on the order document (If-Match)
    RECORDED = "recorded"  # already there, or the order moved on: nothing to write


def judge_payment(order: SagaOrder, *, charged: bool) -> PaymentVerdict:
    """Billing's outcome onto the order. A refusal ends an open, uncharged order in
    `payment_failed`. A charge is recorded on an open order not marked yet, and reopens one
    whose payment had failed (an operator fixed the cause and had the event published again:
    shipping ships it on that delivery); a cancelled order is paid back instead. A shipped
    order was charged before it shipped, so neither meets one."""
    match order.fulfilment:
        case Fulfilment.OPEN if not order.charged:
            return PaymentVerdict.RECORD
        case Fulfilment.PAYMENT_FAILED if charged:
            return PaymentVerdict.RECORD
        case _:
            return PaymentVerdict.RECORDED
