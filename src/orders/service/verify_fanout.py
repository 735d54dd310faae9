"""The fan-out audit: every stored order shipped once and charged once, with its amount.

Pure logic over plain data, like the order audit: the adapters fetch the stored orders, the inbox
container's records (read by the layout, `InboxPartition`) and the payment provider's charges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from orders.domain.inbox import BillingStatus
from orders.domain.payments import Charge
from orders.service.ports import InboxPartition, OrderPartition


@dataclass(frozen=True)
class ConsumerAudit:
    """One subscriber's effects against the orders that should have caused them."""

    expected: int  # stored orders
    effects: int  # shipments / charges for those orders
    doubled: int  # orders with more than one effect (or a charge of the wrong amount)
    missing: int  # orders with none
    stuck_in_progress: int  # records still in progress (billing)

    @property
    def ok(self) -> bool:
        return self.doubled == 0 and self.missing == 0 and self.stuck_in_progress == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class StoredOrder:
    order_id: str
    amount: Decimal
    currency: str


def stored_orders(partitions: Mapping[str, OrderPartition]) -> list[StoredOrder]:
    return [
        StoredOrder(order.order_id, order.total_amount, order.currency)
        for order in (p.order.order for p in partitions.values() if p.order is not None)
    ]


def audit_shipping(
    orders: list[StoredOrder],
    inbox: Mapping[str, InboxPartition],
    *,
    cancelled: frozenset[str] = frozenset(),
) -> ConsumerAudit:
    """Every stored order that was not cancelled shipped once (a cancelled one shipped is the
    saga's `cancelled_and_shipped`)."""
    expected = {order.order_id for order in orders} - cancelled
    shipments = {
        order_id: len(partition.shipments)
        for order_id, partition in inbox.items()
        if order_id in expected and partition.shipments
    }
    return ConsumerAudit(
        expected=len(expected),
        effects=sum(shipments.values()),
        doubled=sum(1 for count in shipments.values() if count > 1),
        missing=len(expected - shipments.keys()),
        stuck_in_progress=0,  # the inbox record and the shipment are one batch: never half done
    )


def audit_billing(
    orders: list[StoredOrder],
    inbox: Mapping[str, InboxPartition],
    charges: list[Charge],
    *,
    cancelled: frozenset[str] = frozenset(),
) -> ConsumerAudit:
    """Every stored order charged once with its amount; a cancelled one at most once (it may
    have been cancelled before billing, and a charge it got is the saga's to see refunded)."""
    by_id = {order.order_id: order for order in orders}
    charged: dict[str, list[Charge]] = defaultdict(list)
    for charge in charges:
        if charge.order_id in by_id:
            charged[charge.order_id].append(charge)
    wrong_or_doubled = 0
    for order_id, made in charged.items():
        order = by_id[order_id]
        if len(made) > 1 or any(
            c.amount != order.amount or c.currency != order.currency for c in made
        ):
            wrong_or_doubled += 1
    stuck = sum(
        1
        for order_id, partition in inbox.items()
        if order_id in by_id
        for record in partition.charges
        if record.status is BillingStatus.IN_PROGRESS
    )
    return ConsumerAudit(
        expected=len(by_id.keys() - cancelled),
        effects=sum(len(made) for made in charged.values()),
        doubled=wrong_or_doubled,
        missing=len(by_id.keys() - charged.keys() - cancelled),
        stuck_in_progress=stuck,
    )
