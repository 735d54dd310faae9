"""The audit: what a load run sent (its plan) against what the store and the DLQ hold.

Pure logic over plain data, so every rule is unit-testable; the adapters fetch the documents
and dead-lettered messages.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from orders.domain.documents import LINE_DOCUMENT_TYPE, ORDER_DOCUMENT_TYPE
from orders.domain.hashing import request_hash
from orders.domain.load_plan import LoadPlan, SendKind
from orders.domain.messages import DeadLetterReason, MessageRejected, parse_order
from orders.domain.rejections import REJECTION_DOCUMENT_TYPE


@dataclass(frozen=True)
class DeadLetteredMessage:
    message_id: str | None
    reason: str | None
    description: str | None
    body: bytes


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _request_hash_of(body: bytes) -> str | None:
    try:
        return request_hash(parse_order(body).canonical_payload())
    except MessageRejected:
        return None


def _lines_of(body: str) -> list[tuple[str, int]]:
    order = parse_order(body.encode("utf-8"))
    return [(line.sku, line.quantity) for line in order.lines]


def audit(
    plan: LoadPlan,
    documents: list[dict[str, Any]],
    dead_letters: list[DeadLetteredMessage],
) -> VerifyReport:
    violations: list[str] = []
    originals = {s.message_id: s for s in plan.sends if s.kind is SendKind.ORIGINAL}
    conflicts = {s.message_id: s for s in plan.sends if s.kind is SendKind.CONFLICT}
    in_window = {s.message_id: s for s in plan.sends if s.kind is SendKind.CONFLICT_IN_WINDOW}

    order_docs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    line_docs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rejection_docs: list[dict[str, Any]] = []
    for document in documents:
        if document.get("type") == ORDER_DOCUMENT_TYPE:
            order_docs[document["orderId"]].append(document)
        elif document.get("type") == LINE_DOCUMENT_TYPE:
            line_docs[document["orderId"]].append(document)
        elif document.get("type") == REJECTION_DOCUMENT_TYPE:
            rejection_docs.append(document)
        else:
            violations.append(f"unexpected document {document.get('id')!r} in the store")

    duplicate_orders = 0
    stored_first = stored_conflicting = 0
    for order_id, docs in order_docs.items():
        if len(docs) > 1:
            duplicate_orders += 1
            violations.append(f"order {order_id} is stored {len(docs)} times")
        if order_id not in originals:
            violations.append(f"order {order_id} is in the store but was never sent as an order")
            continue
        stored_hash = docs[0].get("requestHash")
        original = originals[order_id]
        conflict = conflicts.get(order_id) or in_window.get(order_id)
        if stored_hash == original.request_hash:
            stored_first += 1
            stored_body = original.body
        elif conflict is not None and stored_hash == conflict.request_hash:
            # Competing consumers (or a lost lock) let the later payload win the race; the
            # other one must then be the dead-lettered mismatch.
            stored_conflicting += 1
            stored_body = conflict.body
        else:
            violations.append(f"order {order_id} has requestHash {stored_hash} matching no send")
            continue
        expected_lines = _lines_of(stored_body)
        stored_lines = sorted(
            line_docs.get(order_id, []), key=lambda d: int(d.get("lineNumber", 0))
        )
        actual_lines = [(d.get("sku"), d.get("quantity")) for d in stored_lines]
        if actual_lines != expected_lines:
            if len(actual_lines) > len(expected_lines):
                duplicate_orders += 1
            violations.append(
                f"order {order_id} has lines {actual_lines}, expected {expected_lines}"
            )
    for order_id in line_docs.keys() - order_docs.keys():
        violations.append(f"{len(line_docs[order_id])} line(s) of {order_id} without their order")

    missing = sorted(originals.keys() - order_docs.keys())
    violations.extend(f"order {order_id} was sent but is not stored" for order_id in missing)

    # Dead letters: a multiset of (message id, reason) expected, matched one for one.
    expected: Counter[tuple[str | None, str | None]] = Counter(
        (s.message_id, s.expected_reason) for s in plan.sends if s.kind is SendKind.POISON
    )
    expected.update(
        (order_id, DeadLetterReason.REQUEST_HASH_MISMATCH.value) for order_id in conflicts
    )
    # An in-window conflict is normally dropped by the broker; if one does get through (say a
    # crash made the original late), it is a mismatch like any other. Either is fine.
    allowed = {(order_id, DeadLetterReason.REQUEST_HASH_MISMATCH.value) for order_id in in_window}
    run_dead_letters = [
        d for d in dead_letters if d.message_id and d.message_id.startswith(f"{plan.run_id}-")
    ]
    remaining = expected.copy()
    unexpected = in_window_dead_lettered = 0
    for dead in run_dead_letters:
        key = (dead.message_id, dead.reason)
        if remaining[key] > 0 or key in allowed:
            if remaining[key] > 0:
                remaining[key] -= 1
            else:
                in_window_dead_lettered += 1
            if dead.reason == DeadLetterReason.REQUEST_HASH_MISMATCH.value:
                _check_mismatch(dead, order_docs, violations)
        else:
            unexpected += 1
            violations.append(
                f"unexpected dead letter {dead.message_id} reason={dead.reason}: {dead.description}"
            )
    for (message_id, reason), count in remaining.items():
        if count > 0:
            violations.append(f"expected dead letter {message_id} reason={reason} is missing")
    # Every rejection the consumer filed must be one it was expected to dead-letter.
    for rejection in rejection_docs:
        key = (rejection.get("messageId"), rejection.get("reason"))
        if key not in expected and key not in allowed:
            violations.append(f"unexpected rejection record {rejection.get('id')!r}")

    return VerifyReport(
        ok=not violations,
        run_id=plan.run_id,
        sent=len(plan.sends),
        unique_orders=len(originals),
        orders_in_store=sum(len(docs) for docs in order_docs.values()),
        duplicate_orders=duplicate_orders,
        missing_orders=len(missing),
        dead_lettered=len(run_dead_letters),
        expected_dead_letters=sum(expected.values()),
        unexpected_dead_letters=unexpected,
        stored_first_payload=stored_first,
        stored_conflicting_payload=stored_conflicting,
        rejections_recorded=len(rejection_docs),
        conflicts_in_window={
            "sent": len(in_window),
            "dropped_by_broker": len(in_window) - in_window_dead_lettered,
            "dead_lettered": in_window_dead_lettered,
        },
        sends_by_kind=dict(Counter(s.kind.value for s in plan.sends)),
        violations=violations,
    )


def _check_mismatch(
    dead: DeadLetteredMessage,
    order_docs: dict[str, list[dict[str, Any]]],
    violations: list[str],
) -> None:
    """The dead-lettered copy must be the payload that did NOT win."""
    stored = order_docs.get(dead.message_id or "")
    if not stored:
        return  # reported as missing already
    if _request_hash_of(dead.body) == stored[0].get("requestHash"):
        violations.append(
            f"{dead.message_id} was dead-lettered as a mismatch with the stored payload itself"
        )
