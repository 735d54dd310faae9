"""The app's standalone workers on the core's worker loop (`exactly_once.worker`).

The loop itself (PeekLock, slots refilled one at a time, the wire lock, lock renewal, the
graceful stop, sessions) is the core's, and so is the handler: the consumer's door
(`adapters/servicebus_consumers.py`), whose `decide_message` the guide gives a worker. What is
the app's is the `after_decision` hook (the decision journal, fault injection), which sees each
decision before it is settled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient

from exactly_once.decisions import Decision
from exactly_once.retries import Retrier, Retry
from exactly_once.servicebus import ExactlyOnceConsumer
from exactly_once.worker import Handle, WorkerOptions, WorkerStats, run_session_worker, run_worker
from orders.adapters.servicebus_consumers import registered_door
from orders.service.ports import RegisteredConsumer
from orders.service.subscribers import Source


def door_handle(
    consumer: ExactlyOnceConsumer[Any], after_decision: Callable[[Decision], None] | None = None
) -> Handle[Decision]:
    """The core worker's handler for one of the app's consumers: the consumer's door decides
    (`decide_message`), and `after_decision` sees the decision before it is settled (a hook
    that raises gets the message abandoned, as a handler that raises does)."""

    async def handle(message: ServiceBusReceivedMessage) -> Decision:
        decision = await consumer.decide_message(message)
        if after_decision is not None:
            after_decision(decision)
        return decision

    return handle


def retrier_for(options: WorkerOptions, on_retry: Callable[[Retry], None] | None) -> Retrier:
    """The core's backoff with the options' budget, telling `on_retry` (the journal) of each
    wait; counted on the global meter the app's monitoring configures."""
    return Retrier(options.backoff, on_retry=on_retry)


async def run_worker_on(
    client: ServiceBusClient,
    source: Source,
    registered: RegisteredConsumer,
    options: WorkerOptions,
    stop: asyncio.Event,
    after_decision: Callable[[Decision], None] | None = None,
    on_retry: Callable[[Retry], None] | None = None,
    *,
    consumer: str,
) -> WorkerStats:
    """Compete for `source` (a queue or a subscription) in PeekLock until `stop` is set, each
    message decided through the door of the registered consumer `consumer` (`registered`: its
    own door, or its core made one)."""
    door = registered_door(consumer, registered)
    return await run_worker(
        client,
        handle=door_handle(door, after_decision),
        stop=stop,
        queue_name=source.queue,
        topic_name=source.topic,
        subscription_name=source.subscription,
        options=options,
        retrier=retrier_for(options, on_retry),
    )


async def run_session_worker_on(
    client: ServiceBusClient,
    source: Source,
    registered: RegisteredConsumer,
    options: WorkerOptions,
    stop: asyncio.Event,
    after_decision: Callable[[Decision], None] | None = None,
    on_retry: Callable[[Retry], None] | None = None,
    *,
    consumer: str,
) -> WorkerStats:
    """Compete for the sessions of a session-enabled queue until `stop` is set, each message
    decided through the door of the registered consumer `consumer` (`registered`: its own
    door, or its core made one)."""
    assert source.queue is not None, "sessions are consumed from a queue here"
    door = registered_door(consumer, registered)
    return await run_session_worker(
        client,
        handle=door_handle(door, after_decision),
        stop=stop,
        queue_name=source.queue,
        options=options,
        retrier=retrier_for(options, on_retry),
    )
