"""Where a worker competes for a consumer's messages (the consumers are listed in
`orders.service.registry`)."""

from __future__ import annotations

from dataclasses import dataclass


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
