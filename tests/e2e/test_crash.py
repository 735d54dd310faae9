"""Crashes and store outages: nothing lost, nothing doubled.

Real processes throughout: our Service Bus and Cosmos emulators, `orders worker` processes
killed with SIGKILL, and the audit of `orders verify`.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading

import httpx
import pytest
from e2e_support import (
    add_cosmos_fault,
    cosmos_faults_url,
    fault_token_header,
    new_plan,
    poll_until,
    send,
    wait_for_decision,
)

from orders.adapters.servicebus import create_servicebus_client
from orders.adapters.servicebus_load import count_active_messages
from orders.domain.load_plan import LoadMix
from orders.entrypoints.demo import wait_for_audit
from orders.entrypoints.localstack import LocalStack
from orders.entrypoints.worker import CRASH_AFTER_WRITE_ENV, CRASH_EXIT_CODE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def queue_is_empty(stack: LocalStack) -> bool:
    async def count() -> int:
        async with create_servicebus_client(stack.settings()) as client:
            return await count_active_messages(client, stack.queue.name)

    return asyncio.run(count()) == 0


def test_workers_killed_at_random_moments_lose_and_double_nothing(stack: LocalStack) -> None:
    plan = new_plan(150, LoadMix(), seed=21)
    for _ in range(3):
        stack.start_worker(concurrency=4, prefetch=4)
    loader = threading.Thread(target=send, args=(stack, plan))
    chaos = random.Random(5)
    kills = 0

    loader.start()
    while loader.is_alive() or kills < 6:
        # Random moments are the point of this test, not a synchronisation.
        threading.Event().wait(chaos.uniform(0.2, 1.0))
        victim = chaos.choice([w for w in stack.workers() if w.running])
        victim.signal(signal.SIGKILL)
        victim.process.wait(timeout=10)
        kills += 1
        stack.start_worker(concurrency=4, prefetch=4)
    loader.join()
    report = asyncio.run(wait_for_audit(stack, plan, within=120))

    assert report.violations == []
    assert report.ok and report.orders_in_store == 150 and report.duplicate_orders == 0
    assert sum(w.process.returncode == -signal.SIGKILL for w in stack.workers()) == kills


def test_crash_between_write_and_settlement_is_completed_as_a_duplicate(
    stack: LocalStack,
) -> None:
    plan = new_plan(1)
    order_id = plan.sends[0].message_id
    crashing = stack.start_worker(extra_env={CRASH_AFTER_WRITE_ENV: order_id})

    send(stack, plan)
    assert crashing.process.wait(timeout=60) == CRASH_EXIT_CODE
    # The write is durable, the message was never settled: it is still in the queue.
    stored = asyncio.run(wait_for_audit(stack, plan, within=0))
    assert stored.orders_in_store == 1
    assert not queue_is_empty(stack)

    survivor = stack.start_worker()
    wait_for_decision(survivor, outcome="duplicate", settlement="complete", order_id=order_id)
    poll_until(lambda: queue_is_empty(stack), within=30, what="the redelivery to be completed")
    report = asyncio.run(wait_for_audit(stack, plan, within=10))

    assert report.ok and report.orders_in_store == 1 and report.dead_lettered == 0
    # Checked after the positive sync point above: the survivor decided, and never to write.
    assert [d["outcome"] for d in survivor.decisions()] == ["duplicate"]
    [written] = crashing.decisions()
    assert (written["outcome"], written["settlement"], written["order_id"]) == (
        "processed",
        "complete",
        order_id,
    )


def test_store_throttling_and_outage_abandon_then_store_exactly_once(stack: LocalStack) -> None:
    # 429s are absorbed by the Cosmos SDK's own retry policy (it honours x-ms-retry-after-ms);
    # 503s on the batch reach the consumer, which abandons so the broker redelivers.
    throttle = {"status": 429, "count": 4, "operation": "Batch", "retry_after_ms": 5}
    outage = {"status": 503, "count": 12, "operation": "Batch"}
    for rule in (throttle, outage):
        add_cosmos_fault(stack, rule)
    worker = stack.start_worker(concurrency=2)
    plan = new_plan(10)

    send(stack, plan)
    report = asyncio.run(wait_for_audit(stack, plan, within=90))

    assert report.ok, report.violations
    assert report.orders_in_store == 10 and report.dead_lettered == 0
    # Exhausted rules are removed: all were hit.
    assert (
        httpx.get(cosmos_faults_url(stack), headers=fault_token_header(stack)).json()["faults"]
        == []
    )
    outcomes = [(d["outcome"], d["settlement"]) for d in worker.decisions()]
    assert ("transient_failure", "abandon") in outcomes
    assert outcomes.count(("processed", "complete")) == 10
