"""The standalone worker's receive loop over an SDK receiver (PeekLock, lock renewal).

N messages in flight, prefetch, lock renewal while processing; every message goes through the
same core and settlement mapping as the Functions trigger. On stop it receives no more, lets
in-flight messages finish and cancels those that outlive the grace period (their locks lapse
and the broker redelivers them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.aio import AutoLockRenewer, ServiceBusReceiver
from azure.servicebus.exceptions import ServiceBusError

from orders.adapters.servicebus import (
    ReceiverSettler,
    create_servicebus_client,
    to_received_order_message,
)
from orders.bootstrap import ConsumerRuntime, build_consumer_runtime
from orders.domain.outcomes import Decision
from orders.service.consumer import settle
from orders.service.ports import MessageHandler
from orders.settings import Settings

logger = logging.getLogger("orders.worker")


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int = 8
    prefetch: int = 16
    max_lock_renewal_seconds: float = 300.0
    receive_wait_seconds: float = 1.0
    shutdown_grace_seconds: float = 20.0


@dataclass
class WorkerStats:
    received: int = 0
    settled: int = 0
    settlement_failures: int = 0


class Worker:
    def __init__(
        self,
        consumer: MessageHandler,
        receiver: ServiceBusReceiver,
        renewer: AutoLockRenewer,
        options: WorkerOptions,
        after_decision: Callable[[Decision], None] | None = None,
    ) -> None:
        self._consumer = consumer
        self._receiver = receiver
        self._renewer = renewer
        self._options = options
        self._after_decision = after_decision
        self._in_flight: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self.stats = WorkerStats()

    async def run(self, stop: asyncio.Event) -> WorkerStats:
        while not stop.is_set():
            free = self._options.concurrency - len(self._in_flight)
            if free <= 0:
                await self._wait_for_slot_or(stop)
                continue
            messages = await self._receiver.receive_messages(
                max_message_count=free, max_wait_time=self._options.receive_wait_seconds
            )
            for message in messages:
                self.stats.received += 1
                task = asyncio.create_task(self._process(message))
                self._in_flight.add(task)
                task.add_done_callback(self._finished)
        await self._drain()
        return self.stats

    async def _wait_for_slot_or(self, stop: asyncio.Event) -> None:
        self._slot_freed.clear()
        stop_wait = asyncio.create_task(stop.wait())
        slot_wait = asyncio.create_task(self._slot_freed.wait())
        await asyncio.wait({stop_wait, slot_wait}, return_when=asyncio.FIRST_COMPLETED)
        for task in (stop_wait, slot_wait):
            task.cancel()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._slot_freed.set()

    async def _process(self, message: ServiceBusReceivedMessage) -> None:
        self._renewer.register(
            self._receiver,
            message,
            max_lock_renewal_duration=self._options.max_lock_renewal_seconds,
        )
        decision = await self._consumer.handle(to_received_order_message(message))
        if self._after_decision is not None:
            self._after_decision(decision)
        try:
            await settle(decision, ReceiverSettler(self._receiver, message))
            self.stats.settled += 1
        except ServiceBusError as exc:
            # The lock was lost (or the link dropped): the broker redelivers and the store's
            # 409 makes the redelivery a duplicate, so nothing is lost or doubled.
            self.stats.settlement_failures += 1
            logger.warning(
                "settlement %s of %s failed: %s",
                decision.settlement.value,
                message.message_id,
                exc,
            )

    async def _drain(self) -> None:
        if not self._in_flight:
            return
        logger.info("stopping: %d message(s) in flight", len(self._in_flight))
        _, pending = await asyncio.wait(
            set(self._in_flight), timeout=self._options.shutdown_grace_seconds
        )
        for task in pending:
            task.cancel()
        if pending:
            # Cancelled mid-processing: their locks lapse and the broker redelivers them.
            logger.warning("abandoned %d message(s) that outlived the grace period", len(pending))
            await asyncio.wait(pending)


async def run_worker(
    settings: Settings,
    options: WorkerOptions,
    stop: asyncio.Event,
    *,
    after_decision: Callable[[Decision], None] | None = None,
    handler: Callable[[ConsumerRuntime], MessageHandler] = lambda runtime: runtime.consumer,
) -> WorkerStats:
    settings.require_servicebus()
    runtime = await build_consumer_runtime(settings)
    client = create_servicebus_client(settings)
    try:
        async with client, AutoLockRenewer() as renewer:
            receiver = client.get_queue_receiver(
                settings.orders_queue,
                receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                prefetch_count=options.prefetch,
            )
            async with receiver:
                worker = Worker(handler(runtime), receiver, renewer, options, after_decision)
                logger.info(
                    "worker receiving from %s (concurrency %d, prefetch %d)",
                    settings.orders_queue,
                    options.concurrency,
                    options.prefetch,
                )
                stats = await worker.run(stop)
    finally:
        await runtime.close()
    logger.info(
        "worker stopped: received=%d settled=%d settlement_failures=%d",
        stats.received,
        stats.settled,
        stats.settlement_failures,
    )
    return stats
