"""`orders worker`: a standalone competing consumer process.

Runs until SIGTERM or SIGINT, then stops receiving, finishes (or abandons) what is in flight and
exits 0. Several processes compete on one queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from exactly_once.decisions import Decision, Outcome
from exactly_once.retries import Retry
from exactly_once.worker import WorkerOptions, WorkerStats
from orders.adapters.servicebus_worker import run_session_worker_on, run_worker_on
from orders.bootstrap import ProcessClients, StoreFactory, build_subscriber_runtime
from orders.domain.payments import Charge, Refund
from orders.service.billing import AfterCharge, AfterRefund
from orders.service.registry import ORDERS, ConsumerSpec, consumer_named
from orders.settings import Settings

logger = logging.getLogger("orders.worker")

# Fault injection for crash tests: comma-separated orderIds whose first successful write is
# followed by an immediate process exit, before the message is settled.
CRASH_AFTER_WRITE_ENV = "ORDERS_FAULT_CRASH_AFTER_WRITE"
CRASH_EXIT_CODE = 86
# The billing consumer's drill: comma-separated orderIds whose charge is followed by an
# immediate exit, before the billing record is marked completed.
CRASH_AFTER_CHARGE_ENV = "ORDERS_FAULT_CRASH_AFTER_CHARGE"
CRASH_AFTER_REFUND_ENV = "ORDERS_FAULT_CRASH_AFTER_REFUND"


DecisionHook = Callable[[Decision], None]
RetryHook = Callable[[Retry], None]


@dataclass(frozen=True)
class JournalHooks:
    """What a worker tells its journal: each decision, and each backoff before one is made
    again (the console lists the messages waiting one out)."""

    decision: DecisionHook
    retry: RetryHook


@contextlib.contextmanager
def decision_journal(path: Path | None) -> Iterator[JournalHooks | None]:
    """One JSON line per decision (each one decided again after a backoff included), and one
    per backoff, flushed as it is made: outcomes as data for the demo, the console and the
    tests, so the log's wording stays free to change."""
    if path is None:
        yield None
        return
    with path.open("a", encoding="utf-8") as journal:

        def retry(waiting: Retry) -> None:
            now = time.time()
            entry = {
                "backoff": {
                    "message_id": waiting.message_id,
                    "attempt": waiting.attempt,
                    "outcome": waiting.outcome,
                    "retry_at": now + waiting.delay_seconds,
                },
                "at": now,
            }
            journal.write(json.dumps(entry) + "\n")
            journal.flush()

        def record(decision: Decision) -> None:
            entry = {
                "outcome": str(decision.outcome),
                "settlement": decision.settlement.value,
                "order_id": decision.key,
                "dead_letter_reason": decision.dead_letter_reason,
                "at": time.time(),
            }
            journal.write(json.dumps(entry) + "\n")
            journal.flush()

        yield JournalHooks(record, retry)


def chain(*hooks: DecisionHook | None) -> DecisionHook | None:
    present = [hook for hook in hooks if hook is not None]
    if not present:
        return None

    def run_all(decision: Decision) -> None:
        for hook in present:
            hook(decision)

    return run_all


def crash_hook_from_env() -> Callable[[Decision], None] | None:
    targets = {t for t in os.environ.get(CRASH_AFTER_WRITE_ENV, "").split(",") if t}
    if not targets:
        return None

    def crash_after_write(decision: Decision) -> None:
        if decision.outcome is Outcome.PROCESSED and decision.key in targets:
            logger.warning("fault injection: exiting after writing %s", decision.key)
            logging.shutdown()
            os._exit(CRASH_EXIT_CODE)

    return crash_after_write


def crash_after_charge_from_env() -> Callable[[Charge], None] | None:
    targets = {t for t in os.environ.get(CRASH_AFTER_CHARGE_ENV, "").split(",") if t}
    if not targets:
        return None

    def crash_after_charge(charge: Charge) -> None:
        if charge.order_id in targets:
            logger.warning("fault injection: exiting after charging %s", charge.order_id)
            logging.shutdown()
            os._exit(CRASH_EXIT_CODE)

    return crash_after_charge


def crash_after_refund_from_env() -> Callable[[Refund], None] | None:
    targets = {t for t in os.environ.get(CRASH_AFTER_REFUND_ENV, "").split(",") if t}
    if not targets:
        return None

    def crash_after_refund(refund: Refund) -> None:
        if refund.order_id in targets:
            logger.warning("fault injection: exiting after refunding %s", refund.order_id)
            logging.shutdown()
            os._exit(CRASH_EXIT_CODE)

    return crash_after_refund


async def run_subscriber(
    settings: Settings,
    spec: ConsumerSpec,
    options: WorkerOptions,
    stop: asyncio.Event,
    *,
    after_decision: DecisionHook | None = None,
    after_charge: AfterCharge | None = None,
    after_refund: AfterRefund | None = None,
    on_retry: RetryHook | None = None,
    store_factory: StoreFactory | None = None,
) -> WorkerStats:
    """One registered consumer (the orders queue, a subscription of the events topic, or the
    status queue), competing until `stop`, over clients of its own; the queue's sessions where
    its spec runs them and `STATUS_SESSIONS` is on."""
    settings.require_servicebus()
    async with AsyncExitStack() as stack:
        clients = ProcessClients(settings)
        stack.push_async_callback(clients.close)
        runtime = await build_subscriber_runtime(
            settings,
            spec,
            clients=clients,
            after_charge=after_charge,
            after_refund=after_refund,
            store_factory=store_factory,
        )
        stack.push_async_callback(runtime.close)
        run = run_session_worker_on if spec.runs_sessions(settings) else run_worker_on
        return await run(
            clients.servicebus(),
            runtime.source,
            runtime.handler,
            options,
            stop,
            after_decision,
            on_retry,
            consumer=spec.name,
        )


def run_until_signalled(
    settings: Settings,
    options: WorkerOptions,
    *,
    decisions: Path | None = None,
    store_factory: StoreFactory | None = None,
    subscriber: ConsumerSpec | None = None,
) -> WorkerStats:
    """Run until SIGTERM or SIGINT; returns after a graceful stop.

    Without `subscriber` it runs the order consumer of the orders queue; with one (another
    registered consumer), that consumer's subscription or queue, through the same pipeline.
    """

    async def main(journal: JournalHooks | None) -> WorkerStats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        # The journal first: a crash hook that exits must find the decision already recorded.
        on_retry = journal.retry if journal is not None else None
        recorded = journal.decision if journal is not None else None
        after_decision = chain(recorded, crash_hook_from_env())
        return await run_subscriber(
            settings,
            subscriber or consumer_named(ORDERS),
            options,
            stop,
            after_decision=after_decision,
            after_charge=crash_after_charge_from_env(),
            after_refund=crash_after_refund_from_env(),
            on_retry=on_retry,
            store_factory=store_factory,
        )

    with decision_journal(decisions) as journal:
        return asyncio.run(main(journal))
