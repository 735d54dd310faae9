"""Sending a load plan: the first phase, a wait past the duplicate-detection window, the rest."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from orders.domain.load_plan import LoadPlan, Phase, PlannedSend, PlannedStatus

# Slack beyond the broker's window, for clocks and in-flight sends.
WINDOW_MARGIN_SECONDS = 1.0
# How far past the wait the concurrent copies are scheduled to appear together.
SCHEDULE_LEAD_SECONDS = 2.0


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
    batch_size: int = 50,
    on_sent: Callable[[int], None] = lambda count: None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> LoadResult:
    first = plan.in_phase(Phase.FIRST)
    after = plan.in_phase(Phase.AFTER_WINDOW)

    async def send_in_batches(sends: list[PlannedSend]) -> None:
        for start in range(0, len(sends), batch_size):
            chunk = sends[start : start + batch_size]
            await sender.send(chunk)
            on_sent(len(chunk))

    async def send_statuses(updates: list[PlannedStatus]) -> None:
        for start in range(0, len(updates), batch_size):
            chunk = updates[start : start + batch_size]
            await sender.send_status(chunk)
            on_sent(len(chunk))

    await send_in_batches([s for s in first if not s.scheduled_together])
    await send_statuses(plan.statuses_in_phase(Phase.FIRST))
    window_over_at = time.monotonic() + duplicate_window_seconds + WINDOW_MARGIN_SECONDS
    scheduled_at: datetime | None = None
    together_first = [s for s in first if s.scheduled_together]
    if together_first:
        wait = duplicate_window_seconds + WINDOW_MARGIN_SECONDS + SCHEDULE_LEAD_SECONDS
        scheduled_at = now() + timedelta(seconds=wait)
        await sender.schedule(together_first, scheduled_at)
        on_sent(len(together_first))
        window_over_at = time.monotonic() + duplicate_window_seconds + WINDOW_MARGIN_SECONDS

    waited = 0.0
    after_statuses = plan.statuses_in_phase(Phase.AFTER_WINDOW)
    if after or after_statuses:
        waited = max(0.0, window_over_at - time.monotonic())
        await sleep(waited)  # the broker's window is a wall-clock rule: waiting it out is the point
        together_after = [s for s in after if s.scheduled_together]
        if together_after:
            assert scheduled_at is not None
            await sender.schedule(together_after, scheduled_at)
            on_sent(len(together_after))
        await send_in_batches([s for s in after if not s.scheduled_together])
        await send_statuses(after_statuses)
    return LoadResult(sent=len(plan.sends) + len(plan.status_updates), waited_seconds=waited)
