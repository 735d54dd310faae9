"""Status updates end to end, in both modes: versions on a plain queue, and sessions.

Real processes: both emulators, an `orders worker` and `orders worker --subscription status`;
the load sends each order's updates newest first, shuffled and duplicated, plus strays that can
never apply. Every order must end at its highest legal version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from e2e_support import FAST_QUEUE, NO_DUPLICATES, new_plan, send

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.domain.load_plan import LoadPlan, plan_load
from orders.entrypoints.demo import wait_for_audit
from orders.entrypoints.localstack import LocalStack, local_stack
from orders.service.verify import VerifyReport

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(params=["versions", "sessions"])
def status_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalStack]:
    sessions = request.param == "sessions"
    queue = replace(
        FAST_QUEUE,
        status_sessions=sessions,
        status_queue="order-status-sessions" if sessions else "order-status",
    )
    with local_stack(queue, tmp_path) as running:
        asyncio.run(prepare_local_cosmos(running.settings()))
        yield running
    assert not [p.name for p in running.processes if p.running], "processes left running"


def status_plan(orders: int) -> LoadPlan:
    return plan_load(
        orders,
        NO_DUPLICATES,
        seed=11,
        run_id=new_plan(1).run_id,
        status_updates=True,
        reorder=True,
    )


def settled(stack: LocalStack, plan: LoadPlan) -> VerifyReport:
    return asyncio.run(wait_for_audit(stack, plan, within=90))


def test_reordered_and_duplicated_updates_end_at_the_highest_legal_version(
    status_stack: LocalStack,
) -> None:
    plan = status_plan(40)
    status_stack.start_worker()
    status_stack.start_subscriber("status")
    status_stack.start_subscriber("status")

    send(status_stack, plan)
    report = settled(status_stack, plan)

    assert report.ok, report.violations
    found = report.status_updates
    assert found is not None
    assert found["final_state_mismatches"] == 0
    assert found["illegal_dead_lettered"] == found["illegal_sent"] > 0
    assert (
        found["applied"] + found["stale"] + found["illegal_dead_lettered"]
        == found["distinct_updates"]
    )
    decisions = [
        d["outcome"]
        for process in status_stack.processes
        if process.name.startswith("status")
        for d in process.decisions()
    ]
    assert decisions.count("processed") == found["applied"]
