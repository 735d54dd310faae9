"""How a competing-consumer worker runs, and what it counts: plain data for every host."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 4
    # 0: the SDK asks the broker for exactly what each receive call wants (see the adapter).
    prefetch: int = 0
    max_lock_renewal_seconds: float = 300.0
    receive_wait_seconds: float = 1.0
    shutdown_grace_seconds: float = 20.0


@dataclass
class WorkerStats:
    received: int = 0
    settled: int = 0
    settlement_failures: int = 0
