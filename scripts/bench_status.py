"""Status updates, versions against sessions, on the embedded local stack (prints numbers only).

For each mode, the same plan: N orders stored first, then each order's absolute, versioned
status updates sent newest first, shuffled, some duplicated and some strays that never apply.
K status consumer processes drain them; updates/s = distinct updates / time from the first
status update sent to every order at its highest legal version (polled through the verifier).

    python scripts/bench_status.py [--orders 200] [--consumers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.domain.load_plan import LoadMix, LoadPlan, plan_load
from orders.entrypoints.localstack import LocalStack, QueueOptions, local_stack
from orders.entrypoints.runs import send_load, verify_run

NO_DUPLICATES = LoadMix(0, 0, 0, 0, 0, 0)
POLL_SECONDS = 0.5


def statuses_only(plan: LoadPlan) -> LoadPlan:
    return replace(plan, sends=())


async def settle(stack: LocalStack, plan: LoadPlan, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        report = await verify_run(stack.settings(), plan)
        if report.status_updates and report.status_updates["ok"]:
            return
        await asyncio.sleep(POLL_SECONDS)
    raise TimeoutError("the status updates did not settle")


def run_mode(sessions: bool, orders: int, consumers: int, workdir: Path) -> dict[str, float]:
    queue = replace(
        QueueOptions(duplicate_window_seconds=2, lock_seconds=30),
        status_sessions=sessions,
        status_queue="order-status-sessions" if sessions else "order-status",
    )
    run_id = f"bench{uuid.uuid4().hex[:6]}"
    plan = plan_load(
        orders, NO_DUPLICATES, seed=3, run_id=run_id, status_updates=True, reorder=True
    )
    with local_stack(queue, workdir) as stack:
        settings = stack.settings()
        asyncio.run(prepare_local_cosmos(settings))
        stack.start_worker()
        orders_only = replace(plan, status_updates=())
        asyncio.run(send_load(settings, orders_only, duplicate_window_seconds=2))
        asyncio.run(settle_orders(stack, orders_only))
        for _ in range(consumers):
            stack.start_subscriber("status")
        sent_at = time.monotonic()
        asyncio.run(send_load(settings, statuses_only(plan), duplicate_window_seconds=2))
        asyncio.run(settle(stack, plan, within=300))
        seconds = time.monotonic() - sent_at
        report = asyncio.run(verify_run(settings, plan))
        outcomes = Counter(
            d["outcome"]
            for p in stack.processes
            if p.name.startswith("status")
            for d in p.decisions()
        )
    assert report.status_updates is not None
    distinct = report.status_updates["distinct_updates"]
    return {
        "seconds": seconds,
        "updates_per_second": distinct / seconds,
        "distinct": distinct,
        "applied": report.status_updates["applied"],
        "stale": report.status_updates["stale"],
        "illegal": report.status_updates["illegal_dead_lettered"],
        "deliveries": sum(outcomes.values()),
    }


async def settle_orders(stack: LocalStack, plan: LoadPlan, within: float = 120) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if (await verify_run(stack.settings(), plan)).ok:
            return
        await asyncio.sleep(POLL_SECONDS)
    raise TimeoutError("the orders were not stored")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--consumers", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"{args.orders} orders, {args.consumers} status consumer process(es), reordered")
    print("| mode | distinct updates | applied | stale | illegal | s | updates/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for sessions in (False, True):
        with tempfile.TemporaryDirectory(prefix="bench-status-") as workdir:
            found = run_mode(sessions, args.orders, args.consumers, Path(workdir))
        print(
            f"| {'sessions' if sessions else 'versions'} | {found['distinct']:.0f} | "
            f"{found['applied']:.0f} | {found['stale']:.0f} | {found['illegal']:.0f} | "
            f"{found['seconds']:.1f} | {found['updates_per_second']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
