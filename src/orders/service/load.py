"""Sending a load plan: the first phase, a wait past the duplicate-detection window, the rest."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from orders.domain.load_plan import LoadPlan, Phase, PlannedSend, PlannedStatus

T = TypeVar("T")

# Slack beyond the broker's window, for clocks and in-flight sends.
WINDOW_MARGIN_SECONDS = 1.0
# How far past the wait the concurrent copies are scheduled to appear together, plus the time
# allowed per copy for scheduling the second copies before that instant (our emulator takes
# about 0.2 ms per message; a broker across a network more).
SCHEDULE_LEAD_SECONDS = 2.0
SCHEDULE_SECONDS_PER_MESSAGE = 0.001
# Sends per call to the sender: it packs each call into as few batches as the broker's message
# size allows; the progress advances per call.
BATCH_SIZE = 500


class LoadSender(Protocol):
    async def send(self, sends: Sequence[PlannedSend]) -> None: ...

    async def schedule(self, sends: Sequence[PlannedSend], at: datetime) -> None: ...

    async def send_status(self, updates: Sequence[PlannedStatus]) -> None: ...


@dataclass(frozen=True)
class LoadResult:
    sent: int
    waited_seconds: float


async def run_load(
    plan: LoadPlan,
    sender: LoadSender,
    *,
    duplicate_window_seconds: float,
    batch_size: int = BATCH_SIZE,
    on_sent: Callable[[int], None] = lambda count: None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> LoadResult:
    first = plan.in_phase(Phase.FIRST)
    after = plan.in_phase(Phase.AFTER_WINDOW)

    async def in_chunks(items: Sequence[T], call: Callable[[Sequence[T]], Awaitable[None]]) -> None:
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            await call(chunk)
            on_sent(len(chunk))

    def send_in_batches(sends: list[PlannedSend]) -> Awaitable[None]:
        return in_chunks(sends, sender.send)

    def schedule_in_batches(sends: list[PlannedSend], at: datetime) -> Awaitable[None]:
        return in_chunks(sends, lambda chunk: sender.schedule(chunk, at))

    def send_statuses(updates: list[PlannedStatus]) -> Awaitable[None]:
        return in_chunks(updates, sender.send_status)

    await send_in_batches([s for s in first if not s.scheduled_together])
    await send_statuses(plan.statuses_in_phase(Phase.FIRST))
    window_over_at = time.monotonic() + duplicate_window_seconds + WINDOW_MARGIN_SECONDS
    scheduled_at: datetime | None = None
    together_first = [s for s in first if s.scheduled_together]
    together = len(together_first) + sum(1 for s in after if s.scheduled_together)
    if together_first:
        scheduled_at = now() + timedelta(seconds=schedule_lead(duplicate_window_seconds, together))
        await schedule_in_batches(together_first, scheduled_at)
        window_over_at = time.monotonic() + duplicate_window_seconds + WINDOW_MARGIN_SECONDS

    waited = 0.0
    after_statuses = plan.statuses_in_phase(Phase.AFTER_WINDOW)
    if after or after_statuses:
        waited = max(0.0, window_over_at - time.monotonic())
        await sleep(waited)  # the broker's window is a wall-clock rule: waiting it out is the point
        together_after = [s for s in after if s.scheduled_together]
        if together_after:
            assert scheduled_at is not None
            await schedule_in_batches(together_after, scheduled_at)
        await send_in_batches([s for s in after if not s.scheduled_together])
        await send_statuses(after_statuses)
    return LoadResult(sent=len(plan.sends) + len(plan.status_updates), waited_seconds=waited)


def schedule_lead(duplicate_window_seconds: float, copies: int) -> float:
    """Seconds from now to the instant both copies of each concurrent duplicate appear: past
    the window the second copies wait out, and time enough to schedule every copy before it."""
    return (
        duplicate_window_seconds
        + WINDOW_MARGIN_SECONDS
        + SCHEDULE_LEAD_SECONDS
        + copies * SCHEDULE_SECONDS_PER_MESSAGE
    )
