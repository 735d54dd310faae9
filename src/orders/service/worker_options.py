"""How a competing-consumer worker runs: plain data for every host."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 4
    # 0: the SDK asks the broker for exactly what each receive call wants (see the adapter).
    prefetch: int = 0
    max_lock_renewal_seconds: float = 300.0
    receive_wait_seconds: float = 1.0
    # How long a session worker waits on an empty session before releasing it for the next:
    # one session per order means most sessions hold a message or two.
    session_idle_seconds: float = 0.25
    shutdown_grace_seconds: float = 20.0
