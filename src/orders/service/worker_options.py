"""How a competing-consumer worker runs, and what it counts: plain data for every host."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Subscriber(StrEnum):
    """The consumers of the events topic, each on its own subscription."""

    SHIPPING = "shipping"
    BILLING = "billing"
    STATUS = "status"  # the status queue (not a subscription): natural idempotency


@dataclass(frozen=True)
class Source:
    """Where a worker competes: a queue, or a subscription of a topic (one pipeline for both)."""

    queue: str | None = None
    topic: str | None = None
    subscription: str | None = None

    def __post_init__(self) -> None:
        if (self.queue is None) == (self.topic is None or self.subscription is None):
            raise ValueError("a source is a queue, or a topic with one of its subscriptions")

    def __str__(self) -> str:
        return self.queue or f"{self.topic}/Subscriptions/{self.subscription}"


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


@dataclass
class WorkerStats:
    received: int = 0
    settled: int = 0
    settlement_failures: int = 0
