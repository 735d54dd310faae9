"""`run_load` against a recording sender, a fake sleep and a fixed clock: the phases, the wait
past the broker's window, and the concurrent copies scheduled for one instant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from orders.domain.load_plan import LoadMix, Phase, PlannedSend, SendKind, plan_load
from orders.service.load import SCHEDULE_LEAD_SECONDS, WINDOW_MARGIN_SECONDS, run_load

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WINDOW = 5.0


class RecordingSender:
    def __init__(self) -> None:
        self.events: list[tuple[str, list[PlannedSend], datetime | None]] = []

    async def send(self, sends: Sequence[PlannedSend]) -> None:
        self.events.append(("send", list(sends), None))

    async def schedule(self, sends: Sequence[PlannedSend], at: datetime) -> None:
        self.events.append(("schedule", list(sends), at))


async def test_phases_wait_and_schedules() -> None:
    plan = plan_load(40, LoadMix(), seed=3, run_id="runner")
    sender = RecordingSender()
    slept: list[float] = []
    sent_counts: list[int] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        sender.events.append(("sleep", [], None))

    result = await run_load(
        plan,
        sender,
        duplicate_window_seconds=WINDOW,
        batch_size=10,
        on_sent=sent_counts.append,
        sleep=fake_sleep,
        now=lambda: NOW,
    )

    kinds = [kind for kind, _, _ in sender.events]
    sleep_at = kinds.index("sleep")
    before = [s for kind, sends, _ in sender.events[:sleep_at] for s in sends]
    after = [s for kind, sends, _ in sender.events[sleep_at + 1 :] for s in sends]
    assert {s.phase for s in before} == {Phase.FIRST}
    assert {s.phase for s in after} == {Phase.AFTER_WINDOW}
    assert all(len(sends) <= 10 for kind, sends, _ in sender.events if kind == "send")
    # One wait, past the window (the fake sleep does not advance the monotonic clock).
    assert slept == [pytest.approx(WINDOW + WINDOW_MARGIN_SECONDS, abs=0.5)]
    # Both copies of each concurrent duplicate appear at the same instant, after the wait.
    instants = {at for kind, _, at in sender.events if kind == "schedule"}
    lead = WINDOW + WINDOW_MARGIN_SECONDS + SCHEDULE_LEAD_SECONDS
    assert instants == {NOW + timedelta(seconds=lead)}
    scheduled = [s for kind, sends, _ in sender.events if kind == "schedule" for s in sends]
    assert {s.message_id for s in scheduled if s.kind is SendKind.ORIGINAL} == {
        s.message_id for s in scheduled if s.kind is SendKind.CONCURRENT_DUPLICATE
    }
    assert result.sent == len(plan.sends) == sum(sent_counts)


async def test_a_plan_without_a_second_phase_never_waits() -> None:
    mix = LoadMix(producer_retries=0.2, late_duplicates=0, concurrent_duplicates=0, conflicts=0)
    plan = plan_load(20, mix, seed=1, run_id="nowait")
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    result = await run_load(
        plan, RecordingSender(), duplicate_window_seconds=WINDOW, sleep=fake_sleep, now=lambda: NOW
    )

    assert slept == [] and result.waited_seconds == 0.0
