"""The saga's invariants: what the customer was promised, checked against every store at once.

Pure logic over plain data, as the layout reads it: the orders container's partitions (orders
with their fulfilment, statuses) and the inbox container's (shipments), and the payment
service's charges and refunds. Every counter must be 0. Shipping reserves a shipment only for
an order whose charge billing recorded (`domain/saga.py`), so `shipped_without_charge` holds at
every instant: a shipment with no charge at the provider is a broken promise, whatever else
happened. A refused charge ends the order in `payment_failed`, which must hold no charge (a
charge made later reopens the order, `payment_failed_but_charged`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from orders.domain.payments import Charge, Refund
from orders.domain.saga import Fulfilment, SagaOrder
from orders.domain.status import OrderStatus
from orders.service.cancels import CancelResults, answer_mismatches
from orders.service.order_lookup import order_view
from orders.service.ports import InboxPartition, OrderPartition


@dataclass(frozen=True)
class SagaInvariants:
    cancelled_and_shipped: int = 0
    cancelled_charged_not_refunded: int = 0
    refunded_more_than_once: int = 0
    refund_amount_mismatch: int = 0
    refunded_not_cancelled: int = 0
    charged_without_stored_order: int = 0
    charge_amount_mismatch: int = 0
    shipped_without_charge: int = 0
    payment_failed_but_charged: int = 0
    # Only when the status consumer runs (it is what GET's status reads).
    final_status_mismatch: int | None = None
    # Only when the audit knows what the run's cancels were answered (the demo, `orders load`).
    cancel_answer_mismatch: int = 0

    @property
    def ok(self) -> bool:
        return not any(self.to_json().values())

    def to_json(self) -> dict[str, int]:
        """The counters checked (a counter the audit could not judge is left out)."""
        return {name: count for name, count in asdict(self).items() if count is not None}

    def broken(self) -> list[str]:
        return [f"{name}={count}" for name, count in self.to_json().items() if count]


@dataclass(frozen=True)
class SagaFacts:
    """What happened to the run's orders, as the stores tell it."""

    cancelled: frozenset[str]
    payment_failed: frozenset[str]  # ended by a refused charge (and not cancelled since)
    shipped: frozenset[str]
    charged: frozenset[str]  # billing charged (the provider holds a charge)
    charged_money: frozenset[str]  # ... of more than 0: what a cancel must pay back
    refunded: frozenset[str]

    def produced_statuses(self, order_ids: set[str]) -> set[tuple[str, int]]:
        """The status updates the saga's own producers send for these orders: paid (2) when
        charged, shipped (3) when shipped, cancelled (5) when cancelled, refunded (6); an order
        whose payment failed gets none (its document says so)."""
        produced: set[tuple[str, int]] = set()
        ended = self.cancelled | self.payment_failed
        for order_id in order_ids:
            if order_id in self.charged or order_id not in ended:
                produced.add((order_id, 2))
            if order_id in self.shipped or order_id not in ended:
                produced.add((order_id, 3))
            if order_id in self.cancelled:
                produced.add((order_id, 5))
            if order_id in self.refunded:
                produced.add((order_id, 6))
        return produced


def stored_saga_orders(partitions: Mapping[str, OrderPartition]) -> dict[str, SagaOrder]:
    """The stored orders, by orderId, as the saga reads them."""
    return {
        order_id: partition.order.order
        for order_id, partition in partitions.items()
        if partition.order is not None
    }


def saga_facts(
    partitions: Mapping[str, OrderPartition],
    inbox: Mapping[str, InboxPartition],
    charges: list[Charge],
    refunds: list[Refund],
) -> SagaFacts:
    stored = stored_saga_orders(partitions)

    def ended(fulfilment: Fulfilment) -> frozenset[str]:
        return frozenset(o for o, order in stored.items() if order.fulfilment is fulfilment)

    return SagaFacts(
        cancelled=ended(Fulfilment.CANCELLED),
        payment_failed=ended(Fulfilment.PAYMENT_FAILED),
        shipped=frozenset(order_id for order_id, found in inbox.items() if found.shipments),
        charged=frozenset(c.order_id for c in charges),
        charged_money=frozenset(c.order_id for c in charges if c.amount > 0),
        refunded=frozenset(r.order_id for r in refunds),
    )


def expected_status(order_id: str, facts: SagaFacts) -> str:
    """What GET must say once the run has settled, from what happened."""
    if order_id in facts.cancelled:
        return OrderStatus.REFUNDED if order_id in facts.refunded else OrderStatus.CANCELLED
    if order_id in facts.payment_failed:
        return Fulfilment.PAYMENT_FAILED.value
    if order_id in facts.shipped:
        return OrderStatus.SHIPPED
    if order_id in facts.charged:
        return OrderStatus.PAID
    return OrderStatus.PLACED


def audit_saga(
    partitions: Mapping[str, OrderPartition],
    inbox: Mapping[str, InboxPartition],
    charges: list[Charge],
    refunds: list[Refund],
    *,
    run_prefix: str,
    status_driven: frozenset[str] = frozenset(),
    cancel_results: CancelResults | None = None,
    check_status: bool = True,
) -> SagaInvariants:
    """`charges` and `refunds` may hold other runs' (filtered by `run_prefix`); the orders in
    `status_driven` got synthetic status updates from the load, so their status is the status
    audit's to judge, not this one's; `check_status` only where the status consumer runs."""
    charges = [c for c in charges if c.order_id.startswith(run_prefix)]
    refunds = [r for r in refunds if r.order_id.startswith(run_prefix)]
    facts = saga_facts(partitions, inbox, charges, refunds)
    stored = stored_saga_orders(partitions)
    charges_of: dict[str, list[Charge]] = defaultdict(list)
    for charge in charges:
        charges_of[charge.order_id].append(charge)
    refunds_of: dict[str, list[Refund]] = defaultdict(list)
    for refund in refunds:
        refunds_of[refund.order_id].append(refund)
    by_payment = {charge.payment_id: charge for charge in charges}

    def refund_mismatch(refund: Refund) -> bool:
        paid = by_payment.get(refund.payment_id)
        return paid is None or (paid.amount, paid.currency) != (refund.amount, refund.currency)

    def charge_mismatch(order_id: str) -> bool:
        order = stored.get(order_id)
        return order is not None and any(
            (c.amount, c.currency) != (order.total_amount, order.currency)
            for c in charges_of[order_id]
        )

    def status_mismatch(order_id: str) -> bool:
        view = order_view(partitions[order_id])
        return view is not None and view["status"] != expected_status(order_id, facts)

    return SagaInvariants(
        cancelled_and_shipped=len(facts.cancelled & facts.shipped),
        cancelled_charged_not_refunded=len(
            (facts.cancelled & facts.charged_money) - facts.refunded
        ),
        refunded_more_than_once=sum(1 for made in refunds_of.values() if len(made) > 1),
        refund_amount_mismatch=sum(1 for refund in refunds if refund_mismatch(refund)),
        refunded_not_cancelled=len(facts.refunded - facts.cancelled),
        charged_without_stored_order=sum(1 for order_id in charges_of if order_id not in stored),
        charge_amount_mismatch=sum(1 for order_id in charges_of if charge_mismatch(order_id)),
        shipped_without_charge=len(facts.shipped - facts.charged),
        payment_failed_but_charged=len(facts.payment_failed & facts.charged),
        final_status_mismatch=(
            sum(
                1
                for order_id in stored
                if order_id not in status_driven and status_mismatch(order_id)
            )
            if check_status
            else None
        ),
        cancel_answer_mismatch=(
            answer_mismatches(cancel_results, facts.cancelled, facts.shipped)
            if cancel_results is not None
            else 0
        ),
    )
