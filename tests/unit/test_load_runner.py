"""`run_load` against a recording sender, a fake sleep and a fixed clock: the phases, the wait
past the broker's window, and the concurrent copies scheduled for one instant."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from orders.domain.load_plan import (
    LoadMix,
    Phase,
    PlannedSend,
    PlannedStatus,
    SendKind,
    StatusKind,
    plan_from_json,
    plan_load,
    plan_to_json,
)
from orders.domain.status import OrderStatus, reachable
from orders.service.load import (
    SCHEDULE_LEAD_SECONDS,
    SCHEDULE_SECONDS_PER_MESSAGE,
    WINDOW_MARGIN_SECONDS,
    run_load,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WINDOW = 5.0


class RecordingSender:
    def __init__(self) -> None:
        self.events: list[tuple[str, list[PlannedSend], datetime | None]] = []
        self.statuses: list[list[PlannedStatus]] = []

    async def send(self, sends: Sequence[PlannedSend]) -> None:
        self.events.append(("send", list(sends), None))

    async def schedule(self, sends: Sequence[PlannedSend], at: datetime) -> None:
        self.events.append(("schedule", list(sends), at))

    async def send_status(self, updates: Sequence[PlannedStatus]) -> None:
        self.statuses.append(list(updates))


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
    # Both copies of each concurrent duplicate appear at the same instant, after the wait and
    # the time their scheduling is allowed, in calls of at most the batch size.
    instants = {at for kind, _, at in sender.events if kind == "schedule"}
    scheduled = [s for kind, sends, _ in sender.events if kind == "schedule" for s in sends]
    lead = (
        WINDOW
        + WINDOW_MARGIN_SECONDS
        + SCHEDULE_LEAD_SECONDS
        + len(scheduled) * SCHEDULE_SECONDS_PER_MESSAGE
    )
    assert instants == {NOW + timedelta(seconds=lead)}
    assert all(len(sends) <= 10 for kind, sends, _ in sender.events if kind == "schedule")
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


async def test_status_updates_go_out_first_phase_then_after_the_window() -> None:
    plan = plan_load(30, LoadMix(), seed=5, run_id="st", status_updates=True, reorder=True)
    sender = RecordingSender()

    async def no_sleep(seconds: float) -> None:
        sender.events.append(("sleep", [], None))

    result = await run_load(
        plan, sender, duplicate_window_seconds=WINDOW, sleep=no_sleep, now=lambda: NOW
    )

    sent = [update for chunk in sender.statuses for update in chunk]
    assert sent == list(plan.status_updates)
    assert result.sent == len(plan.sends) + len(plan.status_updates)
    kinds = [update.kind for update in sent]
    first_duplicate = kinds.index(StatusKind.DUPLICATE)
    assert all(kind is StatusKind.DUPLICATE for kind in kinds[first_duplicate:])


def test_status_updates_follow_one_legal_path_per_order_and_survive_the_manifest() -> None:
    plan = plan_load(200, LoadMix(), seed=9, run_id="st", status_updates=True, reorder=True)
    by_order: dict[str, list[PlannedStatus]] = {}
    for update in plan.status_updates:
        if update.kind is StatusKind.UPDATE:
            by_order.setdefault(update.order_id, []).append(update)
    assert len(by_order) == 200
    for updates in by_order.values():
        path = sorted(updates, key=lambda u: u.version)
        statuses = [OrderStatus.PLACED] + [OrderStatus(u.status) for u in path]
        assert all(reachable(a, b) for a, b in itertools.pairwise(statuses))
    strays = [u for u in plan.status_updates if u.kind is StatusKind.ILLEGAL]
    assert strays and all((u.status, u.version) == ("placed", 7) for u in strays)
    assert any(u.kind is StatusKind.DUPLICATE for u in plan.status_updates)
    # Reordered: some order's newest update is sent before its oldest.
    assert any(
        updates[0].version > updates[-1].version
        for updates in by_order.values()
        if len(updates) > 1
    )
    assert plan_from_json(plan_to_json(plan)) == plan
