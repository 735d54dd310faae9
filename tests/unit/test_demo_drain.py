"""The demo's drain: it waits while the audit keeps accounting for more, however long one
audit takes, and gives up after `within` seconds with nothing new (a clock the test moves)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from orders.entrypoints.demo import audit_until_drained
from orders.service.verify import VerifyReport

ORDERS = 10


def report(stored: int) -> VerifyReport:
    """A run of ORDERS orders with `stored` of them stored so far."""
    return VerifyReport(
        ok=stored == ORDERS,
        run_id="drain",
        sent=ORDERS,
        unique_orders=ORDERS,
        orders_in_store=stored,
        duplicate_orders=0,
        missing_orders=ORDERS - stored,
        dead_lettered=0,
        expected_dead_letters=0,
        unexpected_dead_letters=0,
        stored_first_payload=stored,
        stored_conflicting_payload=0,
        rejections_recorded=0,
        conflicts_in_window={},
        sends_by_kind={},
    )


class SlowAudit:
    """Each audit takes `seconds` on the test's clock and finds the next figure of `stored`."""

    def __init__(self, stored: list[int], seconds: float) -> None:
        self.now = 0.0
        self.stored = stored
        self.seconds = seconds
        self.calls = 0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds

    def audit(self) -> Callable[[], Awaitable[VerifyReport]]:
        async def one() -> VerifyReport:
            self.now += self.seconds
            found = self.stored[min(self.calls, len(self.stored) - 1)]
            self.calls += 1
            return report(found)

        return one


async def test_an_audit_slower_than_the_deadline_still_waits_for_a_run_that_keeps_draining() -> (
    None
):
    audits = SlowAudit([2, 4, 6, 8, 10], seconds=30)
    progress: list[tuple[int, int]] = []
    last = await audit_until_drained(
        audits.audit(),
        10,
        lambda found, expected: progress.append((found, expected)),
        sleep=audits.sleep,
        clock=audits.clock,
    )
    assert last.ok and audits.calls == 5
    assert progress == [(2, 10), (4, 10), (6, 10), (8, 10), (10, 10)]
    # Polls spaced by twice the audit's own time: 30 s audits, 60 s between them.
    assert audits.now == 5 * 30 + 4 * 60


async def test_a_run_with_nothing_new_accounted_for_gives_up_after_the_deadline() -> None:
    audits = SlowAudit([3, 5, 5], seconds=1)
    last = await audit_until_drained(audits.audit(), 10, sleep=audits.sleep, clock=audits.clock)
    assert not last.ok and last.orders_in_store == 5
    # The last new figure came with the poll that ended at 4 s; polls every 2 s after it (twice
    # the audit's second, each taking one) until the first one ending 10 s later, at 16 s.
    assert audits.now == 16


async def test_no_deadline_is_one_audit() -> None:
    audits = SlowAudit([1, 2], seconds=1)
    last = await audit_until_drained(audits.audit(), 0, sleep=audits.sleep, clock=audits.clock)
    assert audits.calls == 1 and not last.ok


def test_status_updates_still_being_applied_count_as_progress() -> None:
    def with_statuses(mismatches: int) -> VerifyReport:
        statuses = {
            "final_state_mismatches": mismatches,
            "illegal_sent": 2,
            "illegal_dead_lettered": 2,
        }
        return replace(report(ORDERS), ok=mismatches == 0, status_updates=statuses)

    # Every order stored and every dead letter in: only the status consumer is still at work.
    later, earlier = with_statuses(3).accounted_for(), with_statuses(7).accounted_for()
    assert later[0] > earlier[0] and later[1] == earlier[1]
    assert with_statuses(0).accounted_for() == (later[1], later[1])
