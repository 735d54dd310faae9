"""A competing consumer outside Functions: the SDK's receiver in PeekLock, lock renewal, a
graceful stop, and one decision and settlement per message.

`run_worker` competes for a queue or a subscription; `run_session_worker` for the sessions of
a session-enabled queue. Both run until an `asyncio.Event` is set. Any handler that turns a
received message into a decision with a settlement (`Settleable`) will do: an
`ExactlyOnceConsumer`'s `decide_message`, or an adapter of your own around your own decision
type. Several processes (or several workers in one) compete on one entity: the broker locks
each message for one receiver at a time.

Shape of the loop: `concurrency` slots, each refilled one message at a time as soon as it
frees, so a slow message (say, store throttling retries) holds its own slot and no other. The
loop keeps up to `concurrency` more messages received and waiting (at most twice `concurrency`
locked, all under lock renewal; with `prefetch` > 0 the SDK also holds prefetched messages,
unrenewed) and has a receive call open whenever there is room, so the SDK, which *releases* any
message reaching the client while no `receive_messages` call is active, never bounces messages.

Why the receive calls and the settlements take turns on the "wire" (one asyncio.Lock per
receiver): with the async SDK every reader of the connection (a receive call's pump, each
settlement waiting for the broker's confirmation) reads under one socket lock with a 0.1 s read
timeout; a reader whose frame another reader already consumed then waits out that timeout (the
likely cause of what follows). Traced, a settlement made beside an open receive call took far
longer than a round trip, and a slot-refilling loop without the turns drained far slower than
a batch loop (receive a batch, settle it while the next receive is open, a barrier per batch).
Taking turns, a settlement finds the connection to itself and confirms in a round trip, and
while messages are in flight a receive call holds the wire at most `BUSY_RECEIVE_WAIT_SECONDS`.

Why 4 in flight by default: settlements on one receiver take turns (above), so more slots
mostly overlap store calls. Scale out with more processes (competing consumers) rather than
more in flight per receiver.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, cast

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
)
from azure.servicebus.aio import (
    AutoLockRenewer,
    ServiceBusClient,
    ServiceBusReceiver,
    ServiceBusSession,
)
from azure.servicebus.exceptions import OperationTimeoutError, ServiceBusError

from exactly_once._backoff import Backoff, Retrier
from exactly_once._budgets import DEFAULT_ATTEMPT_SECONDS, LockRenewal
from exactly_once._logs import log_value
from exactly_once.decisions import Settleable, naming, settle
from exactly_once.delayed_retries import (
    CopyScheduler,
    DelayedRetries,
    Redelivery,
    later,
    not_ours,
    original_message_id,
    received_redelivery,
)
from exactly_once.servicebus import ReceiverSettler, delivered
from exactly_once.telemetry import Destination, failed

__all__ = [
    "Handle",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "run_session_worker",
    "run_worker",
]

logger = logging.getLogger("exactly_once.worker")
RECEIVE_BACKOFF_SECONDS = 5.0
SESSION_RENEW_MARGIN_SECONDS = 10.0
BUSY_RECEIVE_WAIT_SECONDS = 0.1

Decided = TypeVar("Decided", bound=Settleable)
"""The handler's decision type: the core's `Decision`, or any type of yours with its fields
(with an `outcome` too, a transient one is decided again after a backoff)."""
Handle = Callable[[ServiceBusReceivedMessage], Awaitable[Decided]]
"""Your handler: one received message -> its decision, which the worker settles. Raising is a
bug around the decision: the worker logs it and abandons the message at once."""


@dataclass(frozen=True)
class WorkerOptions:
    """How a worker competes; the defaults suit one process of several on one entity."""

    concurrency: int = 4
    """Messages decided at once (for a session worker: sessions held at once)."""
    prefetch: int = 0
    """The SDK's `prefetch_count`; 0 asks the broker for exactly what each receive call wants."""
    max_lock_renewal_seconds: float = 600.0
    """How long `AutoLockRenewer` keeps renewing one message's lock from its receipt (and how
    long a session's lock is kept after its last message was received): at least twice what
    one delivery may hold its message (the backoff's budget plus `attempt_seconds`)."""
    receive_wait_seconds: float = 1.0
    """How long an idle receive call (nothing in flight) waits for messages."""
    session_idle_seconds: float = 0.25
    """How long a session worker waits on an empty session before releasing it."""
    shutdown_grace_seconds: float = 20.0
    """After `stop`, how long messages in flight may finish before they are abandoned."""
    backoff: Backoff = field(default_factory=Backoff)
    """How long a transient decision is decided again, the message held under lock renewal,
    before it is abandoned (`exactly_once._backoff`)."""
    attempt_seconds: float = DEFAULT_ATTEMPT_SECONDS
    """The longest one attempt of `handle` may take (your bound; `exactly_once._budgets`)."""
    delayed_retries: DelayedRetries = field(default_factory=DelayedRetries)
    """How often, and how much later, a failure the backoff did not fix comes back as a
    scheduled copy before it is dead-lettered (`exactly_once.delayed_retries`); `run_worker`
    schedules the copies, `run_session_worker` abandons instead (a copy would lose its place
    in the session's order)."""

    def __post_init__(self) -> None:
        # A message may wait for a slot as long as another holds it (its backoff and its last
        # attempt), then be held as long itself: both under the one renewal it was registered
        # for on receipt. Refused here, at start-up, with both numbers (`BudgetError`).
        LockRenewal(self.max_lock_renewal_seconds, self.attempt_seconds).check(
            self.backoff, what="WorkerOptions", holds=2
        )


@dataclass
class WorkerStats:
    """What a worker counted while it ran."""

    received: int = 0
    """Messages received (and locked) by this worker."""
    settled: int = 0
    """Messages settled (completed, abandoned or dead-lettered) after a decision."""
    settlement_failures: int = 0
    """Settlements the broker refused (a lost lock): the message is delivered again."""


class Worker(Generic[Decided]):
    """The receive loop over one PeekLock receiver that you opened; `run_worker` opens one."""

    def __init__(
        self,
        handle: Handle[Decided],
        receiver: ServiceBusReceiver,
        renewer: AutoLockRenewer,
        options: WorkerOptions | None = None,
        stats: WorkerStats | None = None,
        *,
        retrier: Retrier | None = None,
        stop: asyncio.Event | None = None,
        scheduler: CopyScheduler | None = None,
    ) -> None:
        self._handle = handle
        self._receiver = receiver
        self._renewer = renewer
        self._options = options or WorkerOptions()
        self.stats = stats or WorkerStats()
        """What this worker counted (shared when `stats` was given)."""
        self._wire = asyncio.Lock()
        self._retrier = retrier or Retrier(self._options.backoff)
        # Set by `run` (or given, for the session loop): a backoff ends early when it is set.
        self._stop = stop
        # Where delayed retries' copies go; None abandons instead.
        self._scheduler = scheduler

    async def run(self, stop: asyncio.Event) -> WorkerStats:
        """Receive, decide and settle until `stop` is set; then abandon what was received but
        never started, give messages in flight the grace period, and return the stats."""
        self._stop = stop
        stopping = asyncio.create_task(stop.wait())
        in_flight: dict[asyncio.Task[None], ServiceBusReceivedMessage] = {}
        waiting: collections.deque[ServiceBusReceivedMessage] = collections.deque()
        receiving: asyncio.Task[list[ServiceBusReceivedMessage]] | None = None
        try:
            while not stop.is_set():
                while waiting and len(in_flight) < self._options.concurrency:
                    message = waiting.popleft()
                    in_flight[asyncio.create_task(self.process(message))] = message
                room = 2 * self._options.concurrency - len(in_flight) - len(waiting)
                if receiving is None and room > 0:
                    count = min(room, self._options.concurrency)
                    receiving = asyncio.create_task(self._receive(stop, count, bool(in_flight)))
                wake: set[asyncio.Future[Any]] = {stopping, *in_flight}
                if receiving is not None:
                    wake.add(receiving)
                await asyncio.wait(wake, return_when=asyncio.FIRST_COMPLETED)
                for task in [task for task in in_flight if task.done()]:
                    del in_flight[task]
                if receiving is not None and receiving.done():
                    waiting.extend(receiving.result())
                    receiving = None
            # Stopping: what was received but never started (and what the open receive call
            # still brings) goes straight back to the broker; in flight gets the grace period.
            if receiving is not None:
                waiting.extend(await receiving)
            await self._abandon(list(waiting))
        finally:
            stopping.cancel()
            if receiving is not None:
                receiving.cancel()
            await self._finish(in_flight)
        return self.stats

    async def _receive(
        self, stop: asyncio.Event, count: int, busy: bool
    ) -> list[ServiceBusReceivedMessage]:
        # While messages are in flight a receive call holds the wire only briefly, so their
        # settlements do not queue behind a long wait for new messages.
        wait = BUSY_RECEIVE_WAIT_SECONDS if busy else self._options.receive_wait_seconds
        try:
            async with self._wire:
                batch = await self._receiver.receive_messages(
                    max_message_count=count, max_wait_time=wait
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
        """Decide on one received message and settle it (the session loop's step, in order),
        in one `process` span that a decision of `handle` made with the same telemetry joins."""
        entity = self._receiver.entity_path
        telemetry = self._retrier.telemetry
        with telemetry.message_span(None, None, delivered=delivered(message, entity)) as span:
            await self._process(message, lambda decision: telemetry.record(span, None, decision))

    async def _process(
        self, message: ServiceBusReceivedMessage, record: Callable[[Settleable], None]
    ) -> None:
        settler = ReceiverSettler(self._receiver, message, self._wire, self._scheduler)
        decision: Settleable | None
        try:
            decision = await self._decide(message)
        except Exception as exc:
            # The handler decides every outcome itself; reaching here is a bug around it. Hand
            # the message back at once rather than let its lock be renewed for minutes.
            logger.exception(
                "handling failed; abandoning it: %s",
                naming(self._receiver.entity_path, original_message_id(message)),
            )
            failed(exc)
            decision = None
        try:
            if decision is None:
                await settler.abandon()
            else:
                record(decision)
                await settle(decision, settler)
            self.stats.settled += 1
        except ServiceBusError as exc:
            failed(exc)
            # The lock was lost (or the link dropped): the broker redelivers, and an effect that
            # already happened makes the redelivery a duplicate: nothing is lost or doubled.
            self.stats.settlement_failures += 1
            logger.warning("settling %s failed: %s", log_value(message.message_id), exc)

    async def _decide(self, message: ServiceBusReceivedMessage) -> Settleable:
        redelivery = received_redelivery(message)
        if not isinstance(redelivery, Redelivery):
            # Malformed delayed-retry properties (a sender's own): dead-lettered, the handler
            # never sees them.
            logger.warning(
                "message %s: %s", log_value(message.message_id), redelivery.dead_letter_description
            )
            return redelivery
        if not redelivery.is_for(Destination.of_entity(self._receiver.entity_path).subscription):
            # A copy another subscription's consumer scheduled on the topic: not this one's.
            logger.info(
                "message %s is a delayed retry for subscription %s: completed, not %s's",
                log_value(message.message_id),
                log_value(redelivery.subscription or ""),
                self._receiver.entity_path,
            )
            return not_ours()
        attempts = 0

        async def attempt() -> Decided:
            nonlocal attempts
            attempts += 1
            return await self._handle(message)

        # A transient decision is decided again after a backoff while the renewer keeps the
        # lock; a stop ends the wait and the message is given back (not retried later).
        def settled(decision: Decided) -> Decided:
            if self._scheduler is None or (self._stop is not None and self._stop.is_set()):
                return decision
            return cast(
                Decided,
                later(decision, redelivery, self._options.delayed_retries, attempts=attempts),
            )

        return await self._retrier.decide(
            attempt,
            message_id=redelivery.message_id,
            source=self._receiver.entity_path,
            stop=self._stop,
            then=settled,
        )

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
                await ReceiverSettler(self._receiver, message, self._wire).abandon()
            except ServiceBusError as exc:
                logger.warning("could not abandon %s: %s", log_value(message.message_id), exc)


def entity_name(
    queue_name: str | None, topic_name: str | None, subscription_name: str | None
) -> str:
    """The entity a worker competes for, as Service Bus names it; a queue, or a topic with one
    of its subscriptions (ValueError for anything else)."""
    if queue_name is not None and topic_name is None and subscription_name is None:
        return queue_name
    if queue_name is None and topic_name is not None and subscription_name is not None:
        return f"{topic_name}/Subscriptions/{subscription_name}"
    raise ValueError("a worker competes for a queue, or for a topic with one of its subscriptions")


def peek_lock_receiver(
    client: ServiceBusClient,
    *,
    queue_name: str | None = None,
    topic_name: str | None = None,
    subscription_name: str | None = None,
    prefetch: int = 0,
) -> ServiceBusReceiver:
    """A PeekLock receiver on a queue, or on a topic's subscription."""
    entity_name(queue_name, topic_name, subscription_name)  # one of the two, or ValueError
    mode = ServiceBusReceiveMode.PEEK_LOCK
    if queue_name is not None:
        return client.get_queue_receiver(queue_name, receive_mode=mode, prefetch_count=prefetch)
    assert topic_name is not None and subscription_name is not None
    return client.get_subscription_receiver(
        topic_name, subscription_name, receive_mode=mode, prefetch_count=prefetch
    )


async def run_worker(
    client: ServiceBusClient,
    *,
    handle: Handle[Decided],
    stop: asyncio.Event,
    queue_name: str | None = None,
    topic_name: str | None = None,
    subscription_name: str | None = None,
    options: WorkerOptions | None = None,
    retrier: Retrier | None = None,
) -> WorkerStats:
    """Compete for a queue (`queue_name`) or a subscription (`topic_name` and
    `subscription_name`) in PeekLock until `stop` is set; every message goes through `handle`
    and is settled as its decision says, a transient one after backing off (`retrier`, by
    default `options.backoff` counted on the global meter). Returns what the worker counted."""
    options = options or WorkerOptions()
    source = entity_name(queue_name, topic_name, subscription_name)
    receiver = peek_lock_receiver(
        client,
        queue_name=queue_name,
        topic_name=topic_name,
        subscription_name=subscription_name,
        prefetch=options.prefetch,
    )
    scheduler = CopyScheduler(client, source)
    async with AutoLockRenewer() as renewer, receiver:
        logger.info(
            "worker receiving from %s (concurrency %d, prefetch %d)",
            source,
            options.concurrency,
            options.prefetch,
        )
        try:
            stats = await Worker(
                handle, receiver, renewer, options, retrier=retrier, scheduler=scheduler
            ).run(stop)
        finally:
            await scheduler.close()
    _log_stopped("worker", stats)
    return stats


def _log_stopped(what: str, stats: WorkerStats) -> None:
    logger.info(
        "%s stopped: received=%d settled=%d settlement_failures=%d",
        what,
        stats.received,
        stats.settled,
        stats.settlement_failures,
    )


async def run_session_worker(
    client: ServiceBusClient,
    *,
    handle: Handle[Decided],
    stop: asyncio.Event,
    queue_name: str,
    options: WorkerOptions | None = None,
    retrier: Retrier | None = None,
) -> WorkerStats:
    """Compete for the sessions of a session-enabled queue until `stop` is set.

    Up to `concurrency` sessions at once, each locked by this process alone; inside a session,
    one message at a time in order (that is what sessions are for). A session with nothing to
    receive for `session_idle_seconds` is released for any process to take later; while it
    keeps receiving, its lock is renewed (`SessionLock`), however long it stays busy.
    """
    options = options or WorkerOptions()
    stats = WorkerStats()
    async with AutoLockRenewer() as renewer:
        logger.info(
            "session worker receiving from %s (%d sessions at once)",
            queue_name,
            options.concurrency,
        )
        await asyncio.gather(
            *(
                _session_loop(client, queue_name, handle, renewer, options, stop, stats, retrier)
                for _ in range(options.concurrency)
            )
        )
    _log_stopped("session worker", stats)
    return stats


async def _session_loop(
    client: ServiceBusClient,
    queue_name: str,
    handle: Handle[Decided],
    renewer: AutoLockRenewer,
    options: WorkerOptions,
    stop: asyncio.Event,
    stats: WorkerStats,
    retrier: Retrier | None,
) -> None:
    while not stop.is_set():
        try:
            receiver = client.get_queue_receiver(
                queue_name,
                session_id=NEXT_AVAILABLE_SESSION,
                receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                max_wait_time=options.receive_wait_seconds,
            )
            # Waiting for a session (the SDK retries its timeout with backoff) must not delay
            # a stop: race the open against it.
            if not await _open_unless_stopped(receiver, stop):
                return
            async with receiver:
                lock = SessionLock(receiver.session, options.max_lock_renewal_seconds)
                keeping = asyncio.create_task(lock.keep())
                worker = Worker(
                    handle, receiver, renewer, options, stats, retrier=retrier, stop=stop
                )
                try:
                    while not stop.is_set():
                        batch = await receiver.receive_messages(
                            max_message_count=1, max_wait_time=options.session_idle_seconds
                        )
                        if not batch:
                            break  # the session is idle: release it
                        for message in batch:
                            stats.received += 1
                            lock.received()
                            await worker.process(message)
                finally:
                    keeping.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await keeping
        except OperationTimeoutError:
            continue  # no session has messages right now
        except ServiceBusError as exc:
            logger.warning(
                "session receive failed, retrying in %.0f s: %s", RECEIVE_BACKOFF_SECONDS, exc
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RECEIVE_BACKOFF_SECONDS)


class SessionLock:
    """Keeps a held session's lock for as long as the session is busy: renewed shortly before
    it lapses while its last message was received under `horizon_seconds` ago, so a session
    that keeps receiving keeps its lock, and one whose message hangs loses it as a message
    would (then another process takes the session over). The session loop releases an idle
    session itself.

    Why not the SDK's `AutoLockRenewer`: it counts its `max_lock_renewal_duration` from the
    session's start, so a session busy for longer lost its lock however often it was
    registered again (and each registration is a renewal task of its own)."""

    def __init__(self, session: ServiceBusSession, horizon_seconds: float) -> None:
        self._session = session
        self._horizon_seconds = horizon_seconds
        self._last_received = time.monotonic()
        # Renew with this much of the lock left: the SDK renewer's 10 s, or half a short lock.
        self._margin_seconds = min(SESSION_RENEW_MARGIN_SECONDS, self._seconds_left() / 2)

    def received(self) -> None:
        """A message of the session was received: the horizon counts from now."""
        self._last_received = time.monotonic()

    def _seconds_left(self) -> float:
        locked_until = self._session.locked_until_utc
        if locked_until is None:  # not locked yet: renew at once
            return 0.0
        return (locked_until - datetime.now(UTC)).total_seconds()

    async def keep(self) -> None:
        """Renew until cancelled (the session is released), the session's last message is
        older than the horizon, or a renewal fails (the next receive then reports the lost
        lock and the loop takes another session)."""
        while True:
            await asyncio.sleep(max(0.0, self._seconds_left() - self._margin_seconds))
            if time.monotonic() - self._last_received >= self._horizon_seconds:
                logger.warning(
                    "session %s: its message has been in hand for %.0f s; letting its lock lapse",
                    log_value(self._session.session_id),
                    self._horizon_seconds,
                )
                return
            try:
                await self._session.renew_lock()
            except ServiceBusError as exc:
                session_id = log_value(self._session.session_id)
                logger.warning("renewing session %s's lock failed: %s", session_id, exc)
                return


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
