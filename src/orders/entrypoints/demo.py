"""`orders demo`: the whole pipeline on the embedded local stack, then the audit.

Starts our Service Bus and Cosmos emulators on free ports, K competing worker processes and a
load with about 30% duplicates of every kind plus conflicting and poison messages; polls the
verifier until everything is accounted for (or a deadline passes); stops all it started.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.domain.load_plan import CancelPoint, LoadMix, LoadPlan, plan_load
from orders.entrypoints.localstack import LocalStack, QueueOptions, local_stack
from orders.entrypoints.runs import send_cancels, send_load, verify_run
from orders.service.cancels import CancelResults
from orders.service.registry import SHIPPING, downstream_consumers
from orders.service.verify import VerifyReport

VERIFY_POLL_SECONDS = 1.0
# The audit reads the whole run each time: the next poll waits this many times as long as the
# last one took, so that polling a big run leaves the workers most of the machine.
VERIFY_POLL_SHARE = 2.0


@dataclass(frozen=True)
class DemoOptions:
    orders: int = 300
    workers: int = 3
    concurrency: int = 4
    seed: int = 7
    mix: LoadMix = field(default_factory=LoadMix)
    # How long the audit may go on failing with nothing new accounted for.
    settle_timeout_seconds: float = 120.0
    queue: QueueOptions = field(default_factory=QueueOptions)
    # The fan-out after the order: dispatcher, billing (with the payment stand-in), shipping.
    fanout: bool = True
    # Versioned status updates, duplicated and reordered, through the status consumer.
    status_updates: bool = True
    # Orders cancelled at every point of the saga (needs the fan-out).
    cancels: int = 40

    @property
    def audited_consumers(self) -> frozenset[str]:
        return (
            frozenset(spec.name for spec in downstream_consumers()) if self.fanout else frozenset()
        )


@dataclass
class DemoResult:
    report: VerifyReport
    plan: LoadPlan
    seconds: float
    worker_exit_codes: list[int]
    processes_left_running: list[str]
    consumer_outcomes: dict[str, int]
    decisions: list[dict[str, Any]]
    subscriber_outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    cancel_answers: dict[str, dict[str, int]] = field(default_factory=dict)


def all_decisions(stack: LocalStack) -> list[dict[str, Any]]:
    """What the order workers decided, from their decision journals (one JSON line each)."""
    return [decision for worker in stack.workers() for decision in worker.decisions()]


def subscriber_outcomes(stack: LocalStack) -> dict[str, dict[str, int]]:
    """Per fan-out consumer, how its deliveries were decided."""
    found: dict[str, Counter[str]] = {}
    for process in stack.processes:
        consumer = process.name.rsplit("-", 1)[0]
        if consumer in {spec.name for spec in downstream_consumers()}:
            counts = found.setdefault(consumer, Counter())
            counts.update(decision["outcome"] for decision in process.decisions())
    return {consumer: dict(counts) for consumer, counts in found.items()}


def consumer_outcomes(stack: LocalStack) -> dict[str, int]:
    return dict(Counter(decision["outcome"] for decision in all_decisions(stack)))


async def wait_for_audit(
    stack: LocalStack,
    plan: LoadPlan,
    within: float,
    fanout: frozenset[str] = frozenset(),
    cancel_results: CancelResults | None = None,
    on_progress: Callable[[int, int], None] = lambda found, expected: None,
) -> VerifyReport:
    """Poll the verifier until it passes, or until `within` seconds go by without anything new
    accounted for (`audit_until_drained`). Returns the last report."""

    def audit() -> Awaitable[VerifyReport]:
        return verify_run(stack.settings(), plan, fanout=fanout, cancel_results=cancel_results)

    return await audit_until_drained(audit, within, on_progress)


async def audit_until_drained(
    audit: Callable[[], Awaitable[VerifyReport]],
    within: float,
    on_progress: Callable[[int, int], None] = lambda found, expected: None,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> VerifyReport:
    """Audit until the report passes, or until `within` seconds go by with nothing new
    accounted for (`VerifyReport.accounted_for`, reported to `on_progress`): a big run drains
    for as long as it keeps draining. The deadline counts from the end of a poll, since a big
    run's audit may itself take longer than `within`; the next poll waits `VERIFY_POLL_SHARE`
    times as long as the last one took."""
    best: int | None = None
    deadline = clock() + within
    while True:
        started = clock()
        report = await audit()
        took = clock() - started
        found, expected = report.accounted_for()
        on_progress(found, expected)
        if best is None or found > best:
            deadline = clock() + within
            best = found
        if report.ok or clock() >= deadline:
            return report
        await sleep(max(VERIFY_POLL_SECONDS, VERIFY_POLL_SHARE * took))


async def load_and_cancel(
    stack: LocalStack,
    plan: LoadPlan,
    options: DemoOptions,
    on_sent: Callable[[int], None],
    on_stage: Callable[[str], None],
    defer_shipping: bool,
) -> CancelResults | None:
    """Send the load while the cancels meant for before shipping wait for their points; then
    start shipping (when deferred) and send the cancels meant for after it."""
    settings = stack.settings()
    early = [c for c in plan.cancels if c.point is not CancelPoint.AFTER_SHIP]
    late = [c for c in plan.cancels if c.point is CancelPoint.AFTER_SHIP]
    cancelling = asyncio.create_task(send_cancels(settings, early)) if early else None
    await send_load(
        settings,
        plan,
        duplicate_window_seconds=options.queue.duplicate_window_seconds,
        on_sent=on_sent,
    )
    if not plan.cancels:
        return None
    results = await cancelling if cancelling is not None else CancelResults()
    on_stage(f"{len(early)} cancels before shipping answered")
    if defer_shipping:
        stack.start_subscriber(SHIPPING)
        on_stage("shipping consumer started")
    if late:
        results = results.merged(await send_cancels(settings, late))
    return results


def start_pipeline(
    stack: LocalStack,
    options: DemoOptions,
    *,
    defer_shipping: bool = False,
    on_stage: Callable[[str], None] = lambda stage: None,
) -> None:
    """The database and containers, the order workers and, as `options` ask, the payment
    service, the dispatcher and every downstream consumer (shipping later when deferred)."""
    asyncio.run(prepare_local_cosmos(stack.settings()))
    for _ in range(options.workers):
        stack.start_worker(concurrency=options.concurrency)
    on_stage(f"{options.workers} workers started")
    if options.fanout:
        stack.start_payments()
        stack.start_dispatcher()
        # Every registered consumer of the events topic (shipping maybe later, see above).
        for spec in downstream_consumers():
            if spec.on_topic and not (defer_shipping and spec.name == SHIPPING):
                stack.start_subscriber(spec.name)
    if options.fanout or options.status_updates:
        for spec in downstream_consumers():
            if not spec.on_topic:
                stack.start_subscriber(spec.name)
        consumers = ", ".join(spec.name for spec in downstream_consumers())
        on_stage(f"payment service, dispatcher and the {consumers} consumers started")


def run_demo(
    options: DemoOptions,
    *,
    on_sent: Callable[[int], None] = lambda count: None,
    on_stage: Callable[[str], None] = lambda stage: None,
    on_drained: Callable[[int, int], None] = lambda found, expected: None,
    on_planned: Callable[[LoadPlan], None] = lambda plan: None,
    workdir: Path | None = None,
) -> DemoResult:
    started = time.monotonic()
    run_id = f"demo{uuid.uuid4().hex[:8]}"
    plan = plan_load(
        options.orders,
        options.mix,
        seed=options.seed,
        run_id=run_id,
        status_updates=options.status_updates,
        reorder=options.status_updates,
        cancels=options.cancels if options.fanout else 0,
    )
    on_planned(plan)
    with local_stack(options.queue, workdir) as stack:
        on_stage("emulators started")
        # With cancels, shipping starts once the cancels meant to land before it have been
        # answered, so every point of the saga is reached in every run (not only by chance).
        defer_shipping = options.fanout and bool(plan.cancels)
        start_pipeline(stack, options, defer_shipping=defer_shipping, on_stage=on_stage)
        cancel_results = asyncio.run(
            load_and_cancel(stack, plan, options, on_sent, on_stage, defer_shipping)
        )
        on_stage("load sent; waiting for the workers to drain the queue")
        report = asyncio.run(
            wait_for_audit(
                stack,
                plan,
                options.settle_timeout_seconds,
                options.audited_consumers,
                cancel_results,
                on_drained,
            )
        )
        exit_codes = stack.stop_workers()
        on_stage("workers stopped")
        decisions = all_decisions(stack)
        fanout_outcomes = subscriber_outcomes(stack)
    outcomes = dict(Counter(decision["outcome"] for decision in decisions))
    left = [p.name for p in stack.processes if p.running]
    seconds = time.monotonic() - started
    return DemoResult(
        report,
        plan,
        seconds,
        exit_codes,
        left,
        outcomes,
        decisions,
        fanout_outcomes,
        cancel_results.to_json() if cancel_results is not None else {},
    )
