"""The status audit: every order ends at its highest legal version, whatever the delivery order.

Pure logic over plain data. The updates are those the load sent plus those the fan-out's
producers send (paid, version 2, from billing; shipped, version 3, from shipping). Which were
illegal is what the status consumer dead-lettered; every other distinct update was applied or
arrived stale, and the order's final version must be the highest of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from orders.domain.dead_letters import DeadLetteredMessage
from orders.domain.load_plan import LoadPlan, StatusKind
from orders.domain.messages import DeadLetterReason
from orders.domain.status import (
    LATE,
    PRODUCER_VERSIONS,
    OrderStatus,
    status_message_id,
)
from orders.service.ports import OrderPartition


@dataclass(frozen=True)
class StatusAudit:
    sent: int  # status messages the load sent (duplicates included)
    distinct_updates: int  # distinct (order, version) pairs, the producers' included
    applied: int
    stale: int
    illegal_sent: int
    illegal_dead_lettered: int
    final_state_mismatches: int

    @property
    def ok(self) -> bool:
        return (
            self.final_state_mismatches == 0
            and self.stale >= 0
            and self.illegal_dead_lettered >= self.illegal_sent
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def produced_updates(order_ids: set[str], *, billing: bool, shipping: bool) -> set[tuple[str, int]]:
    """What the fan-out's own producers send for each stored order."""
    versions = [PRODUCER_VERSIONS[OrderStatus.PAID]] if billing else []
    versions += [PRODUCER_VERSIONS[OrderStatus.SHIPPED]] if shipping else []
    return {(order_id, version) for order_id in order_ids for version in versions}


def audit_statuses(
    plan: LoadPlan,
    partitions: Mapping[str, OrderPartition],
    status_dead_letters: list[DeadLetteredMessage],
    produced: set[tuple[str, int]],
) -> StatusAudit:
    distinct = {(u.order_id, u.version) for u in plan.status_updates} | produced
    by_message_id = {
        status_message_id(order_id, version): (order_id, version) for order_id, version in distinct
    }
    illegal = {
        by_message_id[dead.message_id]
        for dead in status_dead_letters
        if dead.message_id in by_message_id
        and dead.reason == DeadLetterReason.ILLEGAL_STATUS_TRANSITION.value
    }
    legal_versions: dict[str, list[int]] = defaultdict(list)
    for order_id, version in distinct - illegal:
        legal_versions[order_id].append(version)
    placed = PRODUCER_VERSIONS[OrderStatus.PLACED]
    mismatches = sum(
        1
        for order_id in {order_id for order_id, _ in distinct}
        if (partitions[order_id].status.version if order_id in partitions else placed)
        != max(legal_versions.get(order_id, []), default=placed)
    )
    # an order without a status document stands at placed, with no history; a late change is
    # in the history but arrived stale (it changed no status)
    applied = sum(
        1
        for partition in partitions.values()
        for entry in partition.status.history
        if not entry.get(LATE)
    )
    strays = {(u.order_id, u.version) for u in plan.status_updates if u.kind is StatusKind.ILLEGAL}
    return StatusAudit(
        sent=len(plan.status_updates),
        distinct_updates=len(distinct),
        applied=applied,
        stale=len(distinct) - applied - len(illegal),
        illegal_sent=len(strays),
        illegal_dead_lettered=len(illegal),
        final_state_mismatches=mismatches,
    )
