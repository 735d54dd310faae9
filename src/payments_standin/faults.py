"""Faults on purpose, for the next N charge or refund requests (the rule's `operation`),
optionally only those of one orderId (for a refund, the refunded payment's).

- `refuse`: answer 503 and do nothing (a provider shedding load).
- `fail_after_charge` / `fail_after_refund`: record the charge / refund, then answer 500 (the
  caller cannot know it happened; a retry with the same key must get it back).
- `delay`: record the charge or refund, then hold the answer `delay_seconds` (beyond the
  caller's timeout: the same ambiguity as a lost answer).

Rules live in memory only: a restart clears them, as it would clear a real outage.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from .validation import InvalidInput, order_id

FaultKind = Literal["refuse", "fail_after_charge", "fail_after_refund", "delay"]
KINDS: tuple[FaultKind, ...] = ("refuse", "fail_after_charge", "fail_after_refund", "delay")
Operation = Literal["charge", "refund"]
OPERATIONS: tuple[Operation, ...] = ("charge", "refund")
# The one operation a kind can apply to; the others apply to either.
ONLY_FOR: dict[FaultKind, Operation] = {
    "fail_after_charge": "charge",
    "fail_after_refund": "refund",
}
MAX_COUNT = 1_000_000
MAX_DELAY_SECONDS = 60.0  # longer would look like a hung process, not a slow provider

_ids = itertools.count(1)


@dataclass
class FaultRule:
    kind: FaultKind
    operation: Operation = "charge"
    count: int = 1
    order_id: str | None = None
    delay_seconds: float = 0.0
    rule_id: int = field(default_factory=lambda: next(_ids))
    hits: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.rule_id,
            "kind": self.kind,
            "operation": self.operation,
            "remaining": self.count,
            "order_id": self.order_id,
            "delay_seconds": self.delay_seconds,
            "hits": self.hits,
        }


class FaultInjector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [rule.to_json() for rule in self._rules]

    def take(self, operation: Operation, order_id: str | None) -> FaultRule | None:
        """Use up one application of the first rule matching this request, if any (`order_id`
        None: a refund of an unknown payment, which only rules for any order match)."""
        with self._lock:
            for rule in self._rules:
                if rule.operation == operation and rule.order_id in (None, order_id):
                    rule.count -= 1
                    rule.hits += 1
                    if rule.count <= 0:
                        self._rules.remove(rule)
                    return rule
        return None


def fault_rule_from(spec: object) -> FaultRule:
    """A rule from `POST /faults` or `--fault`; a wrong field is an InvalidInput naming it."""
    if not isinstance(spec, dict):
        raise InvalidInput("a fault rule must be a JSON object")
    unknown = set(spec) - {"kind", "operation", "count", "order_id", "delay_seconds"}
    if unknown:
        raise InvalidInput(
            f"unknown fault fields: {sorted(str(name)[:40] for name in unknown)[:5]}"
        )
    kind = spec.get("kind")
    if kind not in KINDS:
        raise InvalidInput(f"fault kind must be one of {list(KINDS)}")
    # A kind for one operation implies it; otherwise charges, as before operations existed.
    operation = spec.get("operation", ONLY_FOR.get(kind, "charge"))
    if operation not in OPERATIONS:
        raise InvalidInput(f"fault operation must be one of {list(OPERATIONS)}")
    if ONLY_FOR.get(kind, operation) != operation:
        raise InvalidInput(f"a {kind} fault applies to the {ONLY_FOR[kind]} operation only")
    count = spec.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
        raise InvalidInput(f"fault count must be an integer from 1 to {MAX_COUNT}")
    delay = spec.get("delay_seconds", 0)
    if (
        not isinstance(delay, int | float)
        or isinstance(delay, bool)
        or not 0 <= delay <= MAX_DELAY_SECONDS
    ):
        raise InvalidInput(f"delay_seconds must be a number from 0 to {MAX_DELAY_SECONDS:g}")
    if (kind == "delay") != (delay > 0):
        raise InvalidInput("delay_seconds (> 0) belongs to a `delay` fault, and only to it")
    matched = spec.get("order_id")
    return FaultRule(
        kind=kind,
        operation=operation,
        count=count,
        order_id=None if matched is None else order_id(matched),
        delay_seconds=float(delay),
    )
