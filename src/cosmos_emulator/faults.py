"""Faults on purpose: the next N matching requests answer an error status or are delayed.

404 is there for races: "the item vanished between my 409 and my read" (deleted, or expired
by its TTL) is rare in real life and impossible to time by hand.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

_ids = itertools.count(1)


@dataclass
class FaultRule:
    status: int | None
    count: int
    delay_ms: int = 0
    retry_after_ms: int = 10
    method: str | None = None
    path_contains: str | None = None
    operation: str | None = None
    rule_id: int = field(default_factory=lambda: next(_ids))
    hits: int = 0

    def matches(self, method: str, path: str, operation: str) -> bool:
        if self.method and self.method.upper() != method.upper():
            return False
        if self.path_contains and self.path_contains not in path:
            return False
        return not (self.operation and self.operation.lower() != operation.lower())

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.rule_id,
            "status": self.status,
            "remaining": self.count,
            "delay_ms": self.delay_ms,
            "retry_after_ms": self.retry_after_ms,
            "method": self.method,
            "path_contains": self.path_contains,
            "operation": self.operation,
            "hits": self.hits,
        }


class FaultInjector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> FaultRule:
        if rule.status not in (None, 429, 503, 500, 408, 404):
            raise ValueError(f"unsupported fault status {rule.status}")
        if rule.count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.describe() for r in self._rules]

    def take(self, method: str, path: str, operation: str) -> FaultRule | None:
        """Consume one use of the first matching rule, if any."""
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path, operation):
                    rule.count -= 1
                    rule.hits += 1
                    if rule.count <= 0:
                        self._rules.remove(rule)
                    return rule
        return None
