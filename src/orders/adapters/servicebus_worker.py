"""The standalone worker's receive loop over an SDK receiver (PeekLock, lock renewal).

Every message goes through the same core and settlement mapping as the Functions trigger.

Shape of the loop, chosen for how azure-servicebus behaves: the SDK *releases* any message that
reaches the client while no `receive_messages` call is active, so a "receive one when a slot
frees" loop (or a large prefetch) makes messages bounce between broker and client. Instead the
worker receives up to `concurrency` messages, processes them concurrently and, while it does,
already has the next receive call open (pipelining): messages are always received into an
active call, and at most two batches are locked at once (both under lock renewal; with
`--prefetch` > 0 the SDK also holds prefetched messages, unrenewed). Each batch is a barrier: the
next one starts when every message of this one is settled, so one slow message (say, Cosmos
throttling retries) holds its batch-mates' slots until it is done.

Why the barrier stays (measured, scripts/bench_consumer.py and a traced worker): with the async
SDK a settlement waits for the broker's confirmation, and only an open receive call pumps the
connection promptly; settlements made while no receive was open took about 200 ms each in a
traced worker (the SDK's 0.1 s read timeout, twice, is the likely cause). Loops that refill
each slot as it frees let the look-ahead receive return early and leave settlements unpumped:
31-38 msg/s against 94-190 for this loop in one process. A barrier-free loop needs a pump that
does not take messages (the SDK offers none publicly) or the sync SDK on a thread.

Why 4 in flight by default: the SDK's async AMQP layer serialises socket reads behind one lock
with a 0.1 s read timeout, so concurrent settlements on one receiver wait on each other; on the
local stack 2-4 per process measured best (scripts/bench_consumer.py) and 8 was slower. Scale
out with more processes (competing consumers) rather than more in flight per receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
)
from azure.servicebus.aio import AutoLockRenewer, ServiceBusClient, ServiceBusReceiver
from azure.servicebus.exceptions import OperationTimeoutError, ServiceBusError

from orders.adapters.servicebus import ReceiverSettler, to_received_order_message
from orders.domain.outcomes import Decision
from orders.observability import log_value
from orders.service.consumer import settle
from orders.service.ports import MessageHandler
from orders.service.worker_options import Source, WorkerOptions, WorkerStats

logger = logging.getLogger("orders.worker")
RECEIVE_BACKOFF_SECONDS = 5.0


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
        self.stats = WorkerStats()

    async def run(self, stop: asyncio.Event) -> WorkerStats:
        stopping = asyncio.create_task(stop.wait())
        next_batch = asyncio.create_task(self._receive(stop))
        in_flight: dict[asyncio.Task[None], ServiceBusReceivedMessage] = {}
        try:
            while not stop.is_set():
                batch = await next_batch
                if stop.is_set():
                    next_batch = asyncio.create_task(asyncio.sleep(0, batch))
                    break
                next_batch = asyncio.create_task(self._receive(stop))
                in_flight = self._start(batch)
                if in_flight:
                    all_done = asyncio.ensure_future(asyncio.wait(in_flight))
                    await asyncio.wait({all_done, stopping}, return_when=asyncio.FIRST_COMPLETED)
                    all_done.cancel()
            # Stopping: what the last receive brought was never started, so it goes straight
            # back to the broker; then what is in flight gets the grace period.
            await self._abandon(await next_batch)
        finally:
            stopping.cancel()
            next_batch.cancel()
            await self._finish(in_flight)
        return self.stats

    def _start(
        self, batch: list[ServiceBusReceivedMessage]
    ) -> dict[asyncio.Task[None], ServiceBusReceivedMessage]:
        return {asyncio.create_task(self._process(message)): message for message in batch}

    async def _receive(self, stop: asyncio.Event) -> list[ServiceBusReceivedMessage]:
        try:
            batch = await self._receiver.receive_messages(
                max_message_count=self._options.concurrency,
                max_wait_time=self._options.receive_wait_seconds,
            )
        except ServiceBusError as exc:
            # The SDK has spent its own retries: back off and keep serving (the loop asks again).
            logger.warning("receive failed, retrying in %.0f s: %s", RECEIVE_BACKOFF_SECONDS, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RECEIVE_BACKOFF_SECONDS)
            return []
        for message in batch:
            self.stats.received += 1
            self._renewer.register(
                self._receiver,
                message,
                max_lock_renewal_duration=self._options.max_lock_renewal_seconds,
            )
        return batch

    async def process(self, message: ServiceBusReceivedMessage) -> None:
        """Decide and settle one message (the session loop's step, in arrival order)."""
        await self._process(message)

    async def _process(self, message: ServiceBusReceivedMessage) -> None:
        settler = ReceiverSettler(self._receiver, message)
        try:
            decision = await self._consumer.handle(to_received_order_message(message))
            if self._after_decision is not None:
                self._after_decision(decision)
        except Exception:
            # The core decides every outcome itself; reaching here is a bug around it. Hand the
            # message back at once rather than let its lock be renewed for minutes.
            logger.exception("handling %s failed; abandoning it", log_value(message.message_id))
            decision = None
        try:
            if decision is None:
                await settler.abandon()
            else:
                await settle(decision, settler)
            self.stats.settled += 1
        except ServiceBusError as exc:
            # The lock was lost (or the link dropped): the broker redelivers and the store's
            # 409 makes the redelivery a duplicate, so nothing is lost or doubled.
            self.stats.settlement_failures += 1
            logger.warning("settling %s failed: %s", log_value(message.message_id), exc)

    async def _finish(self, in_flight: dict[asyncio.Task[None], ServiceBusReceivedMessage]) -> None:
        """Give in-flight messages the grace period; abandon those that outlive it."""
        if not in_flight:
            return
        _, pending = await asyncio.wait(in_flight, timeout=self._options.shutdown_grace_seconds)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            # Handing them back now beats waiting for their locks to lapse; a store write that
            # already happened makes the redelivery a duplicate.
            await self._abandon([in_flight[task] for task in pending])
            logger.warning("abandoned %d message(s) that outlived the grace period", len(pending))

    async def _abandon(self, messages: list[ServiceBusReceivedMessage]) -> None:
        for message in messages:
            try:
                await self._receiver.abandon_message(message)
            except ServiceBusError as exc:
                logger.warning("could not abandon %s: %s", log_value(message.message_id), exc)


def peek_lock_receiver(
    client: ServiceBusClient, source: Source, options: WorkerOptions
) -> ServiceBusReceiver:
    mode = ServiceBusReceiveMode.PEEK_LOCK
    if source.queue is not None:
        return client.get_queue_receiver(
            source.queue, receive_mode=mode, prefetch_count=options.prefetch
        )
    assert source.topic is not None and source.subscription is not None
    return client.get_subscription_receiver(
        source.topic, source.subscription, receive_mode=mode, prefetch_count=options.prefetch
    )


async def run_worker_on(
    client: ServiceBusClient,
    source: Source,
    handler: MessageHandler,
    options: WorkerOptions,
    stop: asyncio.Event,
    after_decision: Callable[[Decision], None] | None = None,
) -> WorkerStats:
    """Compete for `source` (a queue or a subscription) in PeekLock until `stop` is set."""
    async with (
        AutoLockRenewer() as renewer,
        peek_lock_receiver(client, source, options) as receiver,
    ):
        logger.info(
            "worker receiving from %s (concurrency %d, prefetch %d)",
            source,
            options.concurrency,
            options.prefetch,
        )
        stats = await Worker(handler, receiver, renewer, options, after_decision).run(stop)
    logger.info(
        "worker stopped: received=%d settled=%d settlement_failures=%d",
        stats.received,
        stats.settled,
        stats.settlement_failures,
    )
    return stats


async def run_session_worker_on(
    client: ServiceBusClient,
    source: Source,
    handler: MessageHandler,
    options: WorkerOptions,
    stop: asyncio.Event,
    after_decision: Callable[[Decision], None] | None = None,
) -> WorkerStats:
    """Compete for the sessions of a session-enabled queue until `stop` is set.

    Up to `concurrency` sessions at once, each locked by this process alone; inside a session,
    one message at a time in order (that is what sessions are for). A session with nothing to
    receive for `session_idle_seconds` is released for any process to take later.
    """
    assert source.queue is not None, "sessions are consumed from a queue here"
    stats = WorkerStats()
    async with AutoLockRenewer() as renewer:
        logger.info(
            "session worker receiving from %s (%d sessions at once)", source, options.concurrency
        )
        await asyncio.gather(
            *(
                _session_loop(
                    client, source.queue, handler, renewer, options, stop, stats, after_decision
                )
                for _ in range(options.concurrency)
            )
        )
    logger.info(
        "session worker stopped: received=%d settled=%d settlement_failures=%d",
        stats.received,
        stats.settled,
        stats.settlement_failures,
    )
    return stats


async def _session_loop(
    client: ServiceBusClient,
    queue: str,
    handler: MessageHandler,
    renewer: AutoLockRenewer,
    options: WorkerOptions,
    stop: asyncio.Event,
    stats: WorkerStats,
    after_decision: Callable[[Decision], None] | None,
) -> None:
    while not stop.is_set():
        try:
            receiver = client.get_queue_receiver(
                queue,
                session_id=NEXT_AVAILABLE_SESSION,
                receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                max_wait_time=options.receive_wait_seconds,
            )
            # Waiting for a session (the SDK retries its timeout with backoff) must not delay
            # a stop: race the open against it.
            if not await _open_unless_stopped(receiver, stop):
                return
            async with receiver:
                session = receiver.session
                renewer.register(
                    receiver, session, max_lock_renewal_duration=options.max_lock_renewal_seconds
                )
                worker = Worker(handler, receiver, renewer, options, after_decision)
                worker.stats = stats
                while not stop.is_set():
                    batch = await receiver.receive_messages(
                        max_message_count=1, max_wait_time=options.session_idle_seconds
                    )
                    if not batch:
                        break  # the session is idle: release it
                    for message in batch:
                        stats.received += 1
                        await worker.process(message)
        except OperationTimeoutError:
            continue  # no session has messages right now
        except ServiceBusError as exc:
            logger.warning(
                "session receive failed, retrying in %.0f s: %s", RECEIVE_BACKOFF_SECONDS, exc
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RECEIVE_BACKOFF_SECONDS)


async def _open_unless_stopped(receiver: ServiceBusReceiver, stop: asyncio.Event) -> bool:
    # `async with` afterwards finds the link open and does not open it again.
    opening = asyncio.ensure_future(receiver.__aenter__())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({opening, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if opening.done():
        opening.result()  # raises OperationTimeoutError when no session came
        return True
    opening.cancel()
    with contextlib.suppress(BaseException):
        await opening
    await receiver.close()
    return False
