"""Backing off in place: a transient decision is decided again, within the same delivery, after
an exponential, jittered delay; only when the budget is spent is the message given back.

Why in place: an abandoned message is redelivered at once, and every delivery counts towards
the entity's MaxDeliveryCount (10 in this project's config). Abandoning at once, ten quick
failures in a short store outage dead-letter a valid message. Held (its lock renewed: by the
worker's `AutoLockRenewer`, or by the Functions host up to `maxAutoLockRenewalDuration`), the
message spends time rather than deliveries.

What is retried: a decision that abandons with the outcome `transient_failure` (the store or a
downstream may answer later: timeouts, 408, 429, 449, 5xx, connection errors; see
`exactly_once._transient`) or `in_progress_elsewhere` (another delivery holds the work), within
the budget; and `unexpected_failure` (a bug, a 401/403 from a missing role), a few times at once
(`immediate_retries`, short delays), since a glitch may pass while a bug will not. Everything
else is settled at once: a dead letter is final.

Each attempt of one delivery runs in one `exactly_once._attempts.DeliveryAttempts`: its claims
keep one owner, and only its final decision gets an outcome line; each wait is one INFO line
that says so ("backing off, deciding again in 2.0 s"), never an abandon that did not happen.

The default budget (`Backoff()`): delays of 0.5, 1, 2, 4, 8, then 15 s (each between half and
all of that, at random), for up to 120 s of one delivery. One delivery outlasts any outage that
ends within the budget less one delay and one attempt (about 120 - 15 - the SDK's own retries);
a longer outage costs one delivery per budget, so MaxDeliveryCount 10 covers about 20 minutes.
`tests/unit/test_backoff.py` holds the arithmetic to a 60 s outage with a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from exactly_once._attempts import DeliveryAttempts, one_delivery
from exactly_once._logs import log_value
from exactly_once.decisions import Outcome, Settleable, Settlement
from exactly_once.telemetry import Telemetry

logger = logging.getLogger("exactly_once.backoff")

# The outcomes worth deciding again after a wait (the app's outcome types share these values).
RETRIED_OUTCOMES = frozenset({Outcome.TRANSIENT_FAILURE.value, Outcome.IN_PROGRESS_ELSEWHERE.value})


Decided = TypeVar("Decided", bound=Settleable)


def is_retried(decision: Settleable) -> bool:
    """Whether `decision` is worth deciding again after a wait: it abandons, and its `outcome`
    (a decision type of yours may have none: then never) is a transient one."""
    return str(decision.settlement) == Settlement.ABANDON.value and (
        str(getattr(decision, "outcome", "")) in RETRIED_OUTCOMES
    )


def is_unexpected(decision: Settleable) -> bool:
    """Whether `decision` hands back an unexpected failure (retried a few times at once)."""
    return (
        str(decision.settlement) == Settlement.ABANDON.value
        and str(getattr(decision, "outcome", "")) == Outcome.UNEXPECTED_FAILURE.value
    )


@dataclass(frozen=True)
class Backoff:
    """How long one delivery backs off before its message is given back.

    The n-th wait is between half and all of `min(max_delay_seconds, first_delay_seconds *
    2**(n-1))` (equal jitter: never a hot loop, never in step with other messages); no attempt
    starts more than `budget_seconds` after the first. `budget_seconds=0` turns backing off
    off (a transient failure is abandoned at once, as before, and so is an unexpected one).

    An unexpected failure gets `immediate_retries` more attempts (3 by default), the n-th after
    between half and all of `immediate_delay_seconds * 2**(n-1)` (0.2, 0.4, 0.8 s), within the
    same budget; `immediate_retries=0` hands it back at once."""

    first_delay_seconds: float = 0.5
    max_delay_seconds: float = 15.0
    budget_seconds: float = 120.0
    immediate_retries: int = 3
    immediate_delay_seconds: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.first_delay_seconds <= self.max_delay_seconds:
            raise ValueError("a backoff needs 0 < first_delay_seconds <= max_delay_seconds")
        if self.budget_seconds < 0:
            raise ValueError("a backoff budget cannot be negative")
        if self.immediate_retries < 0 or self.immediate_delay_seconds < 0:
            raise ValueError("immediate_retries and immediate_delay_seconds cannot be negative")

    def delay(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        """The wait before retry number `retry` (1 for the first), with `draw()` in [0, 1)."""
        ceiling = min(self.max_delay_seconds, self.first_delay_seconds * 2 ** min(retry - 1, 30))
        return float(ceiling / 2 + ceiling / 2 * draw())

    def immediate_delay(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        """The wait before immediate retry number `retry` of an unexpected failure."""
        ceiling = self.immediate_delay_seconds * 2 ** min(retry - 1, 30)
        return float(ceiling / 2 + ceiling / 2 * draw())


@dataclass(frozen=True)
class Retry:
    """One wait announced before it starts: what failed, and when it is decided again."""

    message_id: str | None
    attempt: int
    """The attempt that failed (1 for the delivery's first)."""
    delay_seconds: float
    outcome: str
    error: str | None
    key: str | None = None
    """The message's key as its consumer defines it, when the decision names it."""
    consumer: str | None = None
    """The consumer that decided, when it was an `ExactlyOnceConsumer`."""


async def _wait_unless_stopped(seconds: float, stop: asyncio.Event | None) -> bool:
    """Wait `seconds`; False at once when `stop` is set (then the message is given back)."""
    if stop is None:
        await asyncio.sleep(seconds)
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return not stop.is_set()


class Retrier:
    """Decides again, after a wait, while the decision is transient and the budget lasts; one
    log line and one count (`exactly_once.backoffs`) per wait, and `on_retry` told of it."""

    def __init__(
        self,
        backoff: Backoff | None = None,
        *,
        telemetry: Telemetry | None = None,
        on_retry: Callable[[Retry], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float, asyncio.Event | None], Awaitable[bool]] = _wait_unless_stopped,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.backoff = backoff or Backoff()
        self._telemetry = telemetry or Telemetry()
        self._on_retry = on_retry
        self._clock = clock
        self._wait = wait
        self._draw = draw

    @property
    def telemetry(self) -> Telemetry:
        """Where its waits are counted; the worker opens each delivery's span with it too."""
        return self._telemetry

    async def decide(
        self,
        decide: Callable[[], Awaitable[Decided]],
        *,
        message_id: str | None,
        source: str = "",
        stop: asyncio.Event | None = None,
        then: Callable[[Decided], Decided] | None = None,
    ) -> Decided:
        """The first decision that is not retried, or the last one when the budget (or the
        immediate retries) are spent or `stop` is set: the caller settles it. All attempts run
        in one delivery (`exactly_once._attempts`), whose final outcome line is logged here.

        `then` turns the last decision into the one settled (a delayed retry instead of an
        abandon): the outcome line names what is settled, not what the last attempt said."""
        with one_delivery() as attempts:
            attempts.message_id = message_id
            final: Decided | None = None
            try:
                final = await self._decide(decide, attempts, message_id, source, stop)
                if then is not None:
                    final = then(final)
                return final
            finally:
                if attempts.outcome_line is not None:
                    attempts.outcome_line(attempts.attempt, final)
                    attempts.outcome_line = None

    async def _decide(
        self,
        decide: Callable[[], Awaitable[Decided]],
        attempts: DeliveryAttempts,
        message_id: str | None,
        source: str,
        stop: asyncio.Event | None,
    ) -> Decided:
        started = self._clock()
        transient_retries = immediate_retries = 0
        while True:
            decision = await decide()
            if stop is not None and stop.is_set():
                return decision
            if is_retried(decision):
                transient_retries += 1
                delay = self.backoff.delay(transient_retries, self._draw)
            elif is_unexpected(decision) and immediate_retries < self.backoff.immediate_retries:
                immediate_retries += 1
                delay = self.backoff.immediate_delay(immediate_retries, self._draw)
            else:
                return decision
            if self._clock() - started + delay > self.backoff.budget_seconds:
                return decision
            retry = Retry(
                message_id,
                attempts.attempt,
                delay,
                str(getattr(decision, "outcome", "")),
                getattr(decision, "error", None),
                key=getattr(decision, "key", None),
                consumer=attempts.consumer,
            )
            # Not the outcome: the message is not settled, so this attempt's line is dropped
            # and the wait's line says what happens instead.
            attempts.outcome_line = None
            self._announce(retry, source)
            if not await self._wait(delay, stop):
                return decision
            attempts.attempt += 1

    def _announce(self, retry: Retry, source: str) -> None:
        fields: dict[str, object] = {
            "consumer": retry.consumer,
            "key": retry.key or retry.message_id or "",
            "message_id": retry.message_id if retry.key not in (None, retry.message_id) else None,
            "source": source or None,
            "outcome": retry.outcome,
            "attempt": retry.attempt,
            "detail": retry.error,
        }
        logger.info(
            "backing off, deciding again in %.1f s: %s",
            retry.delay_seconds,
            " ".join(
                f"{name}={log_value(value)}" for name, value in fields.items() if value is not None
            ),
        )
        self._telemetry.count_backoff(retry.outcome, source)
        if self._on_retry is not None:
            self._on_retry(retry)
