"""The audit: what a load run sent (its plan) against what the store and the DLQ hold.

Pure logic over plain data, so every rule is unit-testable; the adapters fetch the documents
and dead-lettered messages, and the layout reads the documents into a `StoredRun`: what is
stored, counted, with nothing merged. What is a violation is decided here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from orders.domain.dead_letters import DeadLetteredMessage
from orders.domain.hashing import request_hash
from orders.domain.load_plan import LoadPlan, PlannedSend, SendKind
from orders.domain.messages import DeadLetterReason, MessageRejected, parse_order
from orders.service.ports import AuditedOrder, StoredRun
from orders.service.verify_fanout import ConsumerAudit

if TYPE_CHECKING:
    from orders.service.verify_saga import SagaInvariants
    from orders.service.verify_status import StatusAudit


@dataclass
class VerifyReport:
    ok: bool
    run_id: str
    sent: int
    unique_orders: int
    orders_in_store: int
    duplicate_orders: int
    missing_orders: int
    dead_lettered: int
    expected_dead_letters: int
    unexpected_dead_letters: int
    stored_first_payload: int
    stored_conflicting_payload: int
    rejections_recorded: int
    conflicts_in_window: dict[str, int]
    sends_by_kind: dict[str, int]
    violations: list[str] = field(default_factory=list)
    # Per fan-out consumer (`billing`, `shipping`) when the audit covers them.
    fanout: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The status updates' audit, when the run sent any.
    status_updates: dict[str, Any] | None = None
    # The saga's invariants (every counter must be 0), when the audit covers the fan-out.
    invariants: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def accounted_for(self) -> tuple[int, int]:
        """(found, expected): the orders stored, the dead letters expected and found, each
        audited consumer's effects and, with status updates, the orders at their final status
        and the illegal updates dead-lettered, against what the run must lead to; the drain's
        progress (a passed audit has found all it expects)."""
        stored = self.unique_orders - self.missing_orders
        found = stored + min(self.dead_lettered, self.expected_dead_letters)
        expected = self.unique_orders + self.expected_dead_letters
        for consumer in self.fanout.values():
            found += min(consumer["effects"], consumer["expected"])
            expected += consumer["expected"]
        if self.status_updates is not None:
            statuses = self.status_updates
            found += max(0, stored - statuses["final_state_mismatches"])
            found += min(statuses["illegal_dead_lettered"], statuses["illegal_sent"])
            expected += self.unique_orders + statuses["illegal_sent"]
        return (expected, expected) if self.ok else (min(found, expected), expected)

    def with_statuses(self, found: StatusAudit) -> VerifyReport:
        """This report with the status audit; `ok` covers it too."""
        violations = list(self.violations)
        if not found.ok:
            violations.append(
                f"status updates: {found.final_state_mismatches} final state mismatch(es), "
                f"{found.illegal_dead_lettered} of {found.illegal_sent} illegal dead-lettered"
            )
        return replace(
            self, ok=self.ok and found.ok, violations=violations, status_updates=found.to_json()
        )

    def with_invariants(self, found: SagaInvariants) -> VerifyReport:
        """This report with the saga's invariants; `ok` covers them too."""
        violations = list(self.violations)
        if not found.ok:
            violations.append("saga invariants broken: " + ", ".join(found.broken()))
        return replace(
            self, ok=self.ok and found.ok, violations=violations, invariants=found.to_json()
        )

    def with_consumer(self, name: str, found: ConsumerAudit) -> VerifyReport:
        """This report with one fan-out consumer's audit; `ok` covers it too."""
        violations = list(self.violations)
        if not found.ok:
            violations.append(
                f"{name}: {found.doubled} doubled, {found.missing} missing, "
                f"{found.stuck_in_progress} stuck in progress"
            )
        return replace(
            self,
            ok=self.ok and found.ok,
            violations=violations,
            fanout={**self.fanout, name: found.to_json()},
        )


def _request_hash_of(body: bytes) -> str | None:
    try:
        return request_hash(parse_order(body).canonical_payload())
    except MessageRejected:
        return None


def _lines_of(body: str) -> list[tuple[str, int]]:
    order = parse_order(body.encode("utf-8"))
    return [(line.sku, line.quantity) for line in order.lines]


@dataclass
class _OrderFindings:
    duplicate_orders: int = 0
    stored_first: int = 0
    stored_conflicting: int = 0
    missing: list[str] = field(default_factory=list)


def _audit_orders(sends: _Sends, stored: StoredRun, violations: list[str]) -> _OrderFindings:
    """Every order stored once, with a payload that was sent for it and all its lines."""
    found = _OrderFindings()
    for order_id, docs in stored.orders.items():
        if len(docs) > 1:
            found.duplicate_orders += 1
            violations.append(f"order {order_id} is stored {len(docs)} times")
        if order_id not in sends.originals:
            violations.append(f"order {order_id} is in the store but was never sent as an order")
            continue
        stored_hash = docs[0].request_hash
        original = sends.originals[order_id]
        conflict = sends.conflicts.get(order_id) or sends.in_window.get(order_id)
        if stored_hash == original.request_hash:
            found.stored_first += 1
            stored_body = original.body
        elif conflict is not None and stored_hash == conflict.request_hash:
            # Competing consumers (or a lost lock) let the later payload win the race; the
            # other one must then be the dead-lettered mismatch.
            found.stored_conflicting += 1
            stored_body = conflict.body
        else:
            violations.append(f"order {order_id} has requestHash {stored_hash} matching no send")
            continue
        expected_lines = _lines_of(stored_body)
        actual_lines = [(line.sku, line.quantity) for line in stored.lines.get(order_id, ())]
        if actual_lines != expected_lines:
            if len(actual_lines) > len(expected_lines):
                found.duplicate_orders += 1
            violations.append(
                f"order {order_id} has lines {actual_lines}, expected {expected_lines}"
            )
    for order_id in stored.lines.keys() - stored.orders.keys():
        violations.append(
            f"{len(stored.lines[order_id])} line(s) of {order_id} without their order"
        )
    # The outbox event rides in the order's batch: exactly one per stored order, none without.
    for order_id in stored.orders.keys() | stored.outbox_events.keys():
        events = stored.outbox_events.get(order_id, 0)
        if events != 1 or order_id not in stored.orders:
            violations.append(f"order {order_id} has {events} outbox event(s), expected 1")
    # A cancel's event rides in the cancel's batch: one per cancelled order, none otherwise.
    for order_id in stored.cancel_events.keys() | stored.orders.keys():
        cancelled = any(order.cancelled for order in stored.orders.get(order_id, ()))
        events = stored.cancel_events.get(order_id, 0)
        if events != int(cancelled):
            violations.append(
                f"order {order_id} has {events} cancel event(s), expected {int(cancelled)}"
            )
    found.missing = sorted(sends.originals.keys() - stored.orders.keys())
    violations.extend(f"order {order_id} was sent but is not stored" for order_id in found.missing)
    return found


DeadLetterKey = tuple[str | None, str | None]  # (message id, reason)


@dataclass
class _DeadLetterFindings:
    expected: Counter[DeadLetterKey]
    allowed: set[DeadLetterKey]
    of_this_run: int = 0
    unexpected: int = 0
    in_window_dead_lettered: int = 0


def _audit_dead_letters(
    plan: LoadPlan,
    sends: _Sends,
    dead_letters: list[DeadLetteredMessage],
    stored: StoredRun,
    violations: list[str],
) -> _DeadLetterFindings:
    """Dead letters as a multiset of (message id, reason) expected, matched one for one."""
    mismatch = DeadLetterReason.REQUEST_HASH_MISMATCH.value
    expected: Counter[DeadLetterKey] = Counter(
        (s.message_id, s.expected_reason) for s in plan.sends if s.kind is SendKind.POISON
    )
    expected.update((order_id, mismatch) for order_id in sends.conflicts)
    # An in-window conflict is normally dropped by the broker; if one does get through (say a
    # crash made the original late), it is a mismatch like any other. Either is fine.
    found = _DeadLetterFindings(expected, {(order_id, mismatch) for order_id in sends.in_window})
    remaining = expected.copy()
    for dead in dead_letters:
        if not (dead.message_id and dead.message_id.startswith(f"{plan.run_id}-")):
            continue  # another run's
        found.of_this_run += 1
        key: DeadLetterKey = (dead.message_id, dead.reason)
        if remaining[key] > 0:
            remaining[key] -= 1
        elif key in found.allowed:
            found.in_window_dead_lettered += 1
        else:
            found.unexpected += 1
            violations.append(
                f"unexpected dead letter {dead.message_id} reason={dead.reason}: {dead.description}"
            )
            continue
        if dead.reason == mismatch:
            _check_mismatch(dead, stored.orders, violations)
    for (message_id, reason), count in remaining.items():
        if count > 0:
            violations.append(f"expected dead letter {message_id} reason={reason} is missing")
    # Every rejection the consumer filed must be one it was expected to dead-letter.
    for rejection in stored.rejections:
        filed: DeadLetterKey = (rejection.message_id, rejection.reason)
        if filed not in expected and filed not in found.allowed:
            violations.append(f"unexpected rejection record {rejection.document_id!r}")
    return found


@dataclass(frozen=True)
class _Sends:
    originals: dict[str, PlannedSend]
    conflicts: dict[str, PlannedSend]
    in_window: dict[str, PlannedSend]

    @classmethod
    def of(cls, plan: LoadPlan) -> _Sends:
        def by_id(kind: SendKind) -> dict[str, PlannedSend]:
            return {s.message_id: s for s in plan.sends if s.kind is kind}

        return cls(
            by_id(SendKind.ORIGINAL), by_id(SendKind.CONFLICT), by_id(SendKind.CONFLICT_IN_WINDOW)
        )


def audit(
    plan: LoadPlan,
    stored: StoredRun,
    dead_letters: list[DeadLetteredMessage],
) -> VerifyReport:
    violations = [f"unexpected document {found!r} in the store" for found in stored.unexpected]
    sends = _Sends.of(plan)
    orders = _audit_orders(sends, stored, violations)
    letters = _audit_dead_letters(plan, sends, dead_letters, stored, violations)
    return VerifyReport(
        ok=not violations,
        run_id=plan.run_id,
        sent=len(plan.sends),
        unique_orders=len(sends.originals),
        orders_in_store=sum(len(docs) for docs in stored.orders.values()),
        duplicate_orders=orders.duplicate_orders,
        missing_orders=len(orders.missing),
        dead_lettered=letters.of_this_run,
        expected_dead_letters=sum(letters.expected.values()),
        unexpected_dead_letters=letters.unexpected,
        stored_first_payload=orders.stored_first,
        stored_conflicting_payload=orders.stored_conflicting,
        rejections_recorded=len(stored.rejections),
        conflicts_in_window={
            "sent": len(sends.in_window),
            "dropped_by_broker": len(sends.in_window) - letters.in_window_dead_lettered,
            "dead_lettered": letters.in_window_dead_lettered,
        },
        sends_by_kind=dict(Counter(s.kind.value for s in plan.sends)),
        violations=violations,
    )


def _check_mismatch(
    dead: DeadLetteredMessage,
    orders: dict[str, tuple[AuditedOrder, ...]],
    violations: list[str],
) -> None:
    """The dead-lettered copy must be the payload that did NOT win."""
    stored = orders.get(dead.message_id or "")
    if not stored:
        return  # reported as missing already
    if _request_hash_of(dead.body) == stored[0].request_hash:
        violations.append(
            f"{dead.message_id} was dead-lettered as a mismatch with the stored payload itself"
        )
