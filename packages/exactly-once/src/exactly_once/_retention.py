"""How long the core keeps the records it writes: the `ttl` of each, from the broker settings of
the consumer's entity, checked when the consumer is built (at start-up, never on a message)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from exactly_once.exceptions import RetentionError

_DAY_SECONDS = 24 * 60 * 60


@dataclass(frozen=True)
class Retention:
    """How long the core keeps the records it writes (the Cosmos DB item `ttl` on each), from
    the broker settings of the consumer's queue or subscription.

    A record must outlive every delivery of its message: the redelivery window is
    `lock_duration_seconds` x `max_delivery_count` (every delivery may hold its lock to the
    end) plus `message_ttl_seconds` (a message may wait that long before its first delivery).
    `dead_letter_margin_seconds` covers a dead letter an operator resubmits later. The defaults
    are Service Bus's own lock duration (PT1M) and MaxDeliveryCount (10), a 14-day message TTL
    (set the entity's DefaultMessageTimeToLive: its default is unbounded) and a 7-day margin.

    `record_ttl_seconds` sets the ttl outright; below the redelivery window it is a
    `RetentionError`. None (the default) keeps the records for the window plus the margin.
    Business documents are never given a ttl: only the core's own records expire."""

    lock_duration_seconds: float = 60.0
    max_delivery_count: int = 10
    message_ttl_seconds: float = 14 * _DAY_SECONDS
    dead_letter_margin_seconds: float = 7 * _DAY_SECONDS
    record_ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.lock_duration_seconds <= 0 or self.max_delivery_count < 1:
            raise RetentionError(
                "lock_duration_seconds must be positive and max_delivery_count at least 1"
            )
        if self.message_ttl_seconds <= 0 or self.dead_letter_margin_seconds < 0:
            raise RetentionError(
                "message_ttl_seconds must be positive and dead_letter_margin_seconds not negative"
            )
        chosen = self.record_ttl_seconds
        if chosen is not None and chosen < self.redelivery_window_seconds:
            raise RetentionError(
                f"record_ttl_seconds={chosen} is below the redelivery window of "
                f"{math.ceil(self.redelivery_window_seconds)} s (lock duration "
                f"{self.lock_duration_seconds:g} s x MaxDeliveryCount {self.max_delivery_count} "
                f"+ message TTL {self.message_ttl_seconds:g} s): a redelivery could find its "
                "records gone and run the effect again"
            )

    @property
    def redelivery_window_seconds(self) -> float:
        """How long the broker may still deliver a message after it was sent."""
        return self.lock_duration_seconds * self.max_delivery_count + self.message_ttl_seconds

    @property
    def ttl_seconds(self) -> int:
        """The `ttl` every record of the consumer carries."""
        if self.record_ttl_seconds is not None:
            return self.record_ttl_seconds
        return math.ceil(self.redelivery_window_seconds + self.dead_letter_margin_seconds)


DEFAULT_RETENTION = Retention()
