"""How the demo's cost grows with the load (prints numbers only, not a test).

For each size, on the embedded local stack as `orders demo` runs it (both emulators, the order
workers, the dispatcher, the payment stand-in, billing, shipping and status consumers): a load
with the default mix and status updates (no cancels, which wait on the saga's points), then
    send msg/s   messages sent / time sending (the wait past the duplicate window left out),
    drain /s     distinct orders / time from the load's end to the audit passing,
    audit s      one more `verify_run` of the drained run, timed alone,
and every process's peak RSS (VmHWM, read from /proc before it is stopped; `bench` is this
process, which plans, sends and audits).

    python scripts/bench_load.py [--orders 1000 10000] [--workers 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from orders.domain.load_plan import LoadMix, plan_load
from orders.entrypoints.demo import DemoOptions, start_pipeline, wait_for_audit
from orders.entrypoints.localstack import LocalStack, local_stack
from orders.entrypoints.runs import send_load, verify_run

# The drain may take as long as it keeps draining; it fails after this long with nothing new.
SETTLE_WITHOUT_PROGRESS_SECONDS = 180.0


def peak_rss_mib(pid: int) -> float:
    """A live process's peak resident set (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(frozen=True)
class Run:
    orders: int
    messages: int
    ok: bool
    send_rate: float
    drain_rate: float
    audit_seconds: float
    peak_rss: dict[str, float]


def one_run(orders: int, workers: int, workdir: Path) -> Run:
    options = DemoOptions(orders=orders, workers=workers, cancels=0)
    plan = plan_load(
        orders,
        LoadMix(),
        seed=7,
        run_id=f"bench{uuid.uuid4().hex[:6]}",
        status_updates=True,
        reorder=True,
    )
    messages = len(plan.sends) + len(plan.status_updates)
    stack: LocalStack
    with local_stack(options.queue, workdir) as stack:
        start_pipeline(stack, options)
        started = time.monotonic()
        sent = asyncio.run(
            send_load(
                stack.settings(),
                plan,
                duplicate_window_seconds=options.queue.duplicate_window_seconds,
            )
        )
        sending = time.monotonic() - started - sent.waited_seconds
        load_end = time.monotonic()
        report = asyncio.run(
            wait_for_audit(stack, plan, SETTLE_WITHOUT_PROGRESS_SECONDS, options.audited_consumers)
        )
        drained = time.monotonic() - load_end
        audit_started = time.monotonic()
        asyncio.run(verify_run(stack.settings(), plan, fanout=options.audited_consumers))
        audit = time.monotonic() - audit_started
        rss = {process.name: peak_rss_mib(process.process.pid) for process in stack.processes}
    rss["bench"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Run(orders, messages, report.ok, messages / sending, orders / drained, audit, rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runs = []
    for orders in args.orders:
        with tempfile.TemporaryDirectory() as workdir:
            runs.append(one_run(orders, args.workers, Path(workdir)))
        print(f"{orders} orders: {runs[-1].messages} messages, audit ok={runs[-1].ok}", flush=True)
    print("| orders | messages | send msg/s | drain orders/s | audit s | audit ok |")
    print("|---:|---:|---:|---:|---:|---|")
    for run in runs:
        print(
            f"| {run.orders} | {run.messages} | {run.send_rate:.0f} | {run.drain_rate:.1f} "
            f"| {run.audit_seconds:.1f} | {run.ok} |"
        )
    print()
    print("| peak RSS MiB | " + " | ".join(f"{run.orders} orders" for run in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for name in sorted({name for run in runs for name in run.peak_rss}):
        cells = " | ".join(f"{run.peak_rss.get(name, float('nan')):.0f}" for run in runs)
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
