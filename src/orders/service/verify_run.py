"""`orders verify`'s whole judgement of a run: the records the stores hold for it, audited.

The composition root reads the records (Cosmos, the dead-letter queues, the payment service);
everything decided about them is here, in pure functions of what was read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orders.domain.dead_letters import DeadLetteredMessage
from orders.domain.load_plan import LoadPlan
from orders.domain.payments import Charge, Refund
from orders.service.cancels import CancelResults
from orders.service.ports import AuditLayout
from orders.service.registry import BILLING, CONSUMERS, SHIPPING, STATUS, AuditInputs
from orders.service.verify import VerifyReport, audit
from orders.service.verify_fanout import stored_orders
from orders.service.verify_saga import audit_saga, saga_facts
from orders.service.verify_status import audit_statuses, produced_updates


@dataclass(frozen=True)
class RunRecords:
    """What the stores hold for one run: its order documents, the orders queue's dead
    letters, and (when the run had them) the inbox, the payment service's charges and refunds,
    and the status queue's dead letters."""

    documents: list[dict[str, Any]]
    dead_letters: list[DeadLetteredMessage]
    inbox: list[dict[str, Any]] = field(default_factory=list)
    charges: list[Charge] = field(default_factory=list)
    refunds: list[Refund] = field(default_factory=list)
    status_dead_letters: list[DeadLetteredMessage] = field(default_factory=list)


def audit_run(
    plan: LoadPlan,
    records: RunRecords,
    layout: AuditLayout,
    *,
    fanout: frozenset[str] = frozenset(),
    cancel_results: CancelResults | None = None,
) -> VerifyReport:
    """The run's report: the orders against the plan; with `fanout` (names of registered
    consumers) each one's audit from the registry and, with both billing and shipping, the
    saga's invariants (GET's status too when `fanout` names the status consumer)."""
    documents = records.documents
    charges, refunds = records.charges, records.refunds
    report = audit(plan, layout.stored_run(documents), records.dead_letters)
    whole_saga = {BILLING, SHIPPING} <= fanout
    partitions = layout.order_partitions(documents)
    inbox = layout.inbox_partitions(records.inbox)
    orders = stored_orders(partitions)
    facts = saga_facts(partitions, inbox, charges, refunds)
    if plan.status_updates:
        stored = {order.order_id for order in orders}
        if whole_saga:
            produced = facts.produced_statuses(stored)
        else:
            produced = produced_updates(
                stored, billing=BILLING in fanout, shipping=SHIPPING in fanout
            )
        report = report.with_statuses(
            audit_statuses(plan, partitions, records.status_dead_letters, produced)
        )
    # An order whose payment failed ends without a charge or a shipment, as a cancelled one
    # may: the consumers' audits expect neither of it (the saga's invariants judge both).
    found = AuditInputs(orders, inbox, charges, facts.cancelled | facts.payment_failed)
    for spec in CONSUMERS:
        if spec.name in fanout and spec.audit is not None:
            report = report.with_consumer(spec.name, spec.audit(found))
    if whole_saga:
        report = report.with_invariants(
            audit_saga(
                partitions,
                inbox,
                charges,
                refunds,
                run_prefix=f"{plan.run_id}-",
                status_driven=frozenset(update.order_id for update in plan.status_updates),
                cancel_results=cancel_results,
                check_status=STATUS in fanout,
            )
        )
    return report
