"""The orders app's billing through a payment provider brownout (issue 43), on the local stack:
both emulators and the payment stand-in as processes, billing on the core's worker.

The stand-in's fault switch refuses every charge (503) for the brownout; billing says "later"
through the core's public way (`RetryLater`, no private list of its own), so each message backs
off in place with its lock renewed. With MaxDeliveryCount 5 nothing is dead-lettered, each
order is charged once, and each message took one delivery.

The brownout is 20 s at the default backoff, both scaled by 1/4 by settings (5 s refused;
delays of 0.125 s doubling up to 3.75 s, a budget of 30 s): the same waits, a quarter of the
time. tests/core/test_downstream_brownout.py runs the same for a consumer written from the
guide.

The "10-minute" brownout runs past the in-place budget (both, and the delayed retries' delays,
at a sixtieth of their defaults by settings: `tests/brownouts.py`): the worker schedules each
event's copy on the topic for the billing subscription and completes the delivery, so nothing
is dead-lettered and each order is charged once, through delayed retries.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from brownouts import (
    BROWNOUT_SECONDS,
    LONG_BROWNOUT_SECONDS,
    LONG_SCALED_BACKOFF,
    LONG_SCALED_DELAYED_RETRIES,
    SCALED_BACKOFF,
)
from e2e_support import FAST_QUEUE, fault_token_header, poll_until, store_order
from poison_corpus import valid_event_document, valid_order_document

from exactly_once.worker import WorkerOptions
from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.adapters.servicebus_worker import run_worker_on
from orders.bootstrap import build_subscriber_runtime
from orders.entrypoints.localstack import LocalStack, local_stack
from orders.service.registry import BILLING, consumer_named

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ORDERS = 5


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    """The local stack with MaxDeliveryCount 5 (or the test's indirect parameter): five quick
    abandons dead-letter a message."""
    deliveries = getattr(request, "param", 5)
    with local_stack(replace(FAST_QUEUE, max_delivery_count=deliveries), tmp_path) as running:
        asyncio.run(prepare_local_cosmos(running.settings()))
        yield running
    assert not [p.name for p in running.processes if p.running], "processes left running"


def payments_of(stack: LocalStack, order_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{stack.payments_url}/payments", params={"orderId": order_id}, timeout=10)
    answer.raise_for_status()
    payments: list[dict[str, Any]] = answer.json()["payments"]
    return payments


def faults(stack: LocalStack) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{stack.payments_url}/faults", headers=fault_token_header(stack), timeout=10
    )
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["faults"]
    return found


def end_brownout(stack: LocalStack) -> int:
    """Clear the stand-in's faults; how many charges they refused."""
    refused = sum(int(rule["hits"]) for rule in faults(stack))
    httpx.delete(
        f"{stack.payments_url}/faults", headers=fault_token_header(stack), timeout=10
    ).raise_for_status()
    return refused


async def billing_dead_letters(stack: LocalStack) -> int:
    settings = stack.settings()
    async with (
        ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client,
        client.get_subscription_receiver(
            settings.order_events_topic, BILLING, sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as receiver,
    ):
        return len(await receiver.peek_messages(max_message_count=100, sequence_number=1))


async def bill_until_charged(
    stack: LocalStack, order_ids: list[str], options: WorkerOptions, brownout_seconds: float
) -> tuple[int, int]:
    """Billing on the core's worker until every order has a payment, the brownout ended after
    its length; (messages received, waits announced)."""
    settings = stack.settings()
    runtime = await build_subscriber_runtime(settings, consumer_named(BILLING))
    waits: list[object] = []
    stop = asyncio.Event()
    try:
        async with ServiceBusClient.from_connection_string(
            stack.servicebus_connection_string
        ) as client:
            worker = asyncio.create_task(
                run_worker_on(
                    client,
                    runtime.source,
                    runtime.handler,
                    options,
                    stop,
                    on_retry=waits.append,
                    consumer=BILLING,
                )
            )
            began = time.monotonic()
            # The brownout lasts its length on the wall clock: that is what is outlasted.
            await asyncio.sleep(brownout_seconds)
            refused_charges = await asyncio.to_thread(end_brownout, stack)
            assert time.monotonic() - began >= brownout_seconds
            await asyncio.to_thread(
                poll_until,
                lambda: all(payments_of(stack, order_id) for order_id in order_ids),
                60,
                "every order charged",
            )
            stop.set()
            stats = await worker
    finally:
        await runtime.close()
    assert refused_charges >= len(order_ids)  # every message met the brownout
    return stats.received, len(waits)


def start_brownout_and_publish(stack: LocalStack, order_ids: list[str]) -> None:
    """The stand-in refuses every charge from now on; then each order and its event."""
    stack.start_payments()
    httpx.post(
        f"{stack.payments_url}/faults",
        json={"kind": "refuse", "operation": "charge", "count": 1_000_000},
        headers=fault_token_header(stack),
        timeout=10,
    ).raise_for_status()
    for order_id in order_ids:
        store_order(stack, valid_order_document(order_id))

    async def publish() -> None:
        async with (
            ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client,
            client.get_topic_sender(stack.queue.events_topic) as sender,
        ):
            for order_id in order_ids:
                event = valid_event_document(order_id)
                await sender.send_messages(
                    ServiceBusMessage(json.dumps(event), message_id=event["eventId"])
                )

    asyncio.run(publish())


def test_a_20_s_payment_brownout_dead_letters_nothing_and_charges_each_order_once(
    stack: LocalStack,
) -> None:
    run = f"pb{uuid.uuid4().hex[:6]}"
    order_ids = [f"{run}-{number}" for number in range(ORDERS)]
    start_brownout_and_publish(stack, order_ids)

    options = WorkerOptions(concurrency=ORDERS, backoff=SCALED_BACKOFF)
    received, waits = asyncio.run(bill_until_charged(stack, order_ids, options, BROWNOUT_SECONDS))

    assert asyncio.run(billing_dead_letters(stack)) == 0
    assert [len(payments_of(stack, order_id)) for order_id in order_ids] == [1] * ORDERS
    assert received == ORDERS  # one delivery each: no abandon spent one
    assert waits >= ORDERS


# MaxDeliveryCount 2: the brownout outlasts two in-place budgets, so two abandons (delayed
# retries off) would dead-letter every event; nothing dead-lettered shows none was abandoned.
@pytest.mark.parametrize("stack", [2], indirect=True)
def test_a_10_minute_payment_brownout_is_outlasted_by_delayed_retries(
    stack: LocalStack,
) -> None:
    """Longer than the in-place budget: each delivery that spent it is completed once its copy
    is scheduled on the topic (for the billing subscription), so no delivery is spent on an
    abandon; the copies come back until the stand-in charges again, once per order."""
    run = f"pl{uuid.uuid4().hex[:6]}"
    order_ids = [f"{run}-{number}" for number in range(ORDERS)]
    assert 3 * LONG_SCALED_BACKOFF.budget_seconds < LONG_BROWNOUT_SECONDS
    start_brownout_and_publish(stack, order_ids)

    options = WorkerOptions(
        concurrency=ORDERS,
        backoff=LONG_SCALED_BACKOFF,
        delayed_retries=LONG_SCALED_DELAYED_RETRIES,
    )
    received, _ = asyncio.run(bill_until_charged(stack, order_ids, options, LONG_BROWNOUT_SECONDS))

    assert asyncio.run(billing_dead_letters(stack)) == 0
    assert [len(payments_of(stack, order_id)) for order_id in order_ids] == [1] * ORDERS
    # Every event outlived its first delivery's budget: each came back at least as one copy.
    assert received >= 2 * ORDERS
