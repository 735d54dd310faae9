"""The consumers of the events topic and where a worker competes for their messages."""

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
