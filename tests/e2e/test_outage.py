"""The orders app's outage drill: a 60 s Cosmos outage in the middle of a load.

Real processes with their defaults (the backoff included): two `orders worker`s, the
dispatcher, billing (with the payment stand-in), shipping and the status consumer, on the
project's MaxDeliveryCount of 10. Every Cosmos request answers 503 for 60 s. Before backing
off, each delivery failed in about 2 s and was redelivered at once, so an outage this long
dead-lettered most valid orders (issue 34: 16 of 20). Now every order is stored once, every
consumer's effect happens once, nothing is dead-lettered, and `orders verify` is green.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from e2e_support import (
    begin_cosmos_outage,
    end_cosmos_outage,
    new_plan,
    orders_cli,
    poll_until,
    send,
)

from orders.adapters.servicebus import create_servicebus_client
from orders.domain.load_plan import plan_to_json
from orders.entrypoints.demo import wait_for_audit
from orders.entrypoints.localstack import LocalStack
from orders.service.registry import downstream_consumers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

OUTAGE_SECONDS = 60.0
ORDERS = 40


async def dead_letter_counts(stack: LocalStack) -> dict[str, int]:
    """How many messages each entity the app consumes holds in its dead-letter queue."""
    settings = stack.settings()
    counts: dict[str, int] = {}
    client: ServiceBusClient
    async with create_servicebus_client(settings) as client:
        receivers = {
            queue: client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
            for queue in (settings.orders_queue, settings.status_queue)
        } | {
            subscription: client.get_subscription_receiver(
                settings.order_events_topic,
                subscription,
                sub_queue=ServiceBusSubQueue.DEAD_LETTER,
            )
            for subscription in stack.queue.subscriptions
        }
        for name, receiver in receivers.items():
            async with receiver:
                peeked = await receiver.peek_messages(max_message_count=250, sequence_number=1)
                counts[name] = len(peeked)
    return counts


def test_a_60_s_cosmos_outage_during_a_load_dead_letters_nothing_and_doubles_nothing(
    stack: LocalStack, tmp_path: Path
) -> None:
    plan = new_plan(ORDERS, seed=34)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(plan_to_json(plan)))
    stack.start_payments()
    order_workers = [stack.start_worker(), stack.start_worker()]
    stack.start_dispatcher()
    subscribers = [stack.start_subscriber(spec.name) for spec in downstream_consumers()]
    first_half = replace(plan, sends=plan.sends[: ORDERS // 2])
    second_half = replace(plan, sends=plan.sends[ORDERS // 2 :])

    send(stack, first_half)
    # The outage begins once every consumer has decided something (each has messages on the
    # way), and the second half of the load is sent during it.
    poll_until(
        lambda: all(subscriber.decisions() for subscriber in subscribers),
        within=120,
        what="every consumer's first decision",
    )
    begin_cosmos_outage(stack)
    began = time.monotonic()
    send(stack, second_half)
    # The outage lasts its length on the wall clock: that is what the workers must outlast.
    threading.Event().wait(max(OUTAGE_SECONDS - (time.monotonic() - began), 0))
    end_cosmos_outage(stack)

    all_consumers = frozenset(spec.name for spec in downstream_consumers())
    report = asyncio.run(wait_for_audit(stack, plan, 240, all_consumers))
    printed = orders_cli(stack, "verify", "--manifest", str(manifest), "--json")

    assert report.ok, report.violations
    assert report.orders_in_store == ORDERS and report.duplicate_orders == 0
    assert report.dead_lettered == 0
    assert asyncio.run(dead_letter_counts(stack)) == dict.fromkeys(
        [stack.settings().orders_queue, stack.settings().status_queue, *stack.queue.subscriptions],
        0,
    )
    assert json.loads(printed.stdout)["ok"] is True, printed.stderr
    dead_lettered = [
        (process.name, decision)
        for process in stack.processes
        for decision in process.decisions()
        if decision["settlement"] == "dead_letter"
    ]
    assert dead_lettered == []
    # The outage was felt, and waited out: the order workers backed off rather than spent
    # deliveries (each wait is one `backoff` line in the worker's journal).
    waits = {process.name: len(process.backoffs()) for process in stack.processes}
    assert sum(waits[worker.name] for worker in order_workers) > 0, waits
