"""The Service Bus glue: one message -> one `Decision` -> one settlement.

`ExactlyOnceConsumer` parses a received message, runs your effect with the `Effects` bound to
it, turns every exception into a `Decision` (one error frame), records a span and a count, and
settles through whichever host delivered the message: the SDK's `ServiceBusReceiver` (a worker
of your own) or the Functions SDK-type binding's `ServiceBusMessageActions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusReceiver
from azure.servicebus.amqp import AmqpMessageBodyType

from exactly_once._attempts import current_delivery, delivery_owner
from exactly_once._backoff import Retrier
from exactly_once._logs import log_outcome, log_value
from exactly_once._message_keys import Delivered, KeyOf, message_id_key
from exactly_once._orchestrator import Effects
from exactly_once._ports import DocumentStore, RecordStore, Store
from exactly_once._records import body_fingerprint, fingerprint
from exactly_once.decisions import (
    DeadLetterReason,
    Decision,
    Outcome,
    Settlement,
    Settler,
    decision_for_error,
    described,
    settle,
)
from exactly_once.delayed_retries import (
    CopyScheduler,
    DelayedRetries,
    Redelivery,
    application_properties,
    later,
    not_ours,
    received_redelivery,
)
from exactly_once.exceptions import Rejected
from exactly_once.options import ConsumerOptions
from exactly_once.telemetry import BrokerDelivery as Delivery
from exactly_once.telemetry import Destination, Telemetry

__all__ = [
    "ExactlyOnceConsumer",
    "FunctionsMessageActions",
    "MessageActionsSettler",
    "ReceiverSettler",
    "body_bytes",
    "delivered",
    "exactly_once",
]

logger = logging.getLogger("exactly_once.delayed_retries")

Message = TypeVar("Message")
# Your effect: the parsed message and the mechanisms bound to it -> what happened.
Effect = Callable[[Message, Effects], Awaitable[Outcome | Decision]]
# Your parser: the body's bytes -> your message model (raise anything to reject it).
Parser = Callable[[bytes], Message]
# Your reader: the whole received message -> your model, for a consumer that needs more than
# the body's bytes (application properties, the enqueued time, the body's section) and decides
# itself what a body it cannot take earns (`exactly_once(read=...)`).
Reader = Callable[[ServiceBusReceivedMessage], Message]


class FunctionsMessageActions(Protocol):
    """What the core uses of `azurefunctions.extensions.bindings.servicebus.
    ServiceBusMessageActions` (synchronous gRPC calls to the Functions host)."""

    def complete(self, message: Any) -> None:
        """Complete `message`."""
        ...

    def abandon(self, message: Any) -> None:
        """Abandon `message`."""
        ...

    def deadletter(
        self, message: Any, *, deadletter_reason: str, deadletter_error_description: str
    ) -> None:
        """Dead-letter `message` (keywords: the binding's next release changes the order)."""
        ...


class MessageActionsSettler:
    """Settles through the Functions host; its calls block, so they run off the event loop.
    A delayed retry's copy is scheduled through `scheduler` (the host offers none): without
    one the message is abandoned instead."""

    def __init__(
        self,
        actions: FunctionsMessageActions,
        message: ServiceBusReceivedMessage,
        scheduler: CopyScheduler | None = None,
    ):
        self._actions = actions
        self._message = message
        self._scheduler = scheduler

    async def complete(self) -> None:
        """Complete through the host."""
        await asyncio.to_thread(self._actions.complete, self._message)

    async def abandon(self) -> None:
        """Abandon through the host."""
        await asyncio.to_thread(self._actions.abandon, self._message)

    async def dead_letter(self, *, reason: str, description: str) -> None:
        """Dead-letter through the host."""
        await asyncio.to_thread(
            lambda: self._actions.deadletter(
                self._message, deadletter_reason=reason, deadletter_error_description=description
            )
        )

    async def retry_later(self, *, retry: int, delay_seconds: float) -> None:
        """Schedule the copy, then complete through the host; abandon when it cannot be."""
        await _retry_later(self, self._scheduler, self._message, retry, delay_seconds)


async def _retry_later(
    settler: Settler,
    scheduler: CopyScheduler | None,
    message: ServiceBusReceivedMessage,
    retry: int,
    delay_seconds: float,
) -> None:
    """A delayed retry through any settler: the copy first, so that a failure before it is
    scheduled leaves the message with the broker (abandoned); a completion that fails after
    it leaves both, and the records make the second a duplicate."""
    if scheduler is None:
        logger.warning(
            "nothing schedules delayed retries here (no scheduler=): abandoning message %s",
            log_value(message.message_id),
        )
        await settler.abandon()
    elif await scheduler.schedule_copy(message, retry=retry, delay_seconds=delay_seconds):
        await settler.complete()
    else:
        await settler.abandon()


class ReceiverSettler:
    """Settles through an SDK receiver in PeekLock mode. `wire`, when given, is held for each
    settlement (a worker that shares the receiver's connection between tasks). A delayed
    retry's copy is scheduled through `scheduler`: without one the message is abandoned."""

    def __init__(
        self,
        receiver: ServiceBusReceiver,
        message: ServiceBusReceivedMessage,
        wire: asyncio.Lock | None = None,
        scheduler: CopyScheduler | None = None,
    ) -> None:
        self._receiver = receiver
        self._message = message
        self._wire = wire or contextlib.nullcontext()
        self._scheduler = scheduler

    async def complete(self) -> None:
        """Complete through the receiver."""
        async with self._wire:
            await self._receiver.complete_message(self._message)

    async def abandon(self) -> None:
        """Abandon through the receiver."""
        async with self._wire:
            await self._receiver.abandon_message(self._message)

    async def dead_letter(self, *, reason: str, description: str) -> None:
        """Dead-letter through the receiver."""
        async with self._wire:
            await self._receiver.dead_letter_message(
                self._message, reason=reason, error_description=description
            )

    async def retry_later(self, *, retry: int, delay_seconds: float) -> None:
        """Schedule the copy (on its own link: the wire is not held), then complete through
        the receiver; abandon when it cannot be scheduled."""
        await _retry_later(self, self._scheduler, self._message, retry, delay_seconds)


def body_bytes(message: ServiceBusReceivedMessage) -> bytes:
    """A data body's bytes (its AMQP data sections joined); b"" for a value or sequence body."""
    body: Any = message.body
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, Iterable) and not isinstance(body, str | dict):
        chunks = list(body)
        if all(isinstance(chunk, bytes | bytearray) for chunk in chunks):
            return b"".join(bytes(chunk) for chunk in chunks)
    return b""


def delivered(message: ServiceBusReceivedMessage, entity_path: str | None = None) -> Delivery:
    """What the telemetry records of a received message, from `entity_path` (where it came
    from, as the SDK names it) and the broker's annotations."""
    carried = {
        _text(key): _text(value)
        for key, value in (message.application_properties or {}).items()
        if _text(key) in ("traceparent", "tracestate", "Diagnostic-Id")
    }
    return Delivery(
        message_id=str(message.message_id) if message.message_id is not None else None,
        destination=Destination.of_entity(entity_path) if entity_path else None,
        # The SDK reports the AMQP header's count of earlier attempts (0 on the first); the
        # conventions count this delivery too, as the .NET SDK's DeliveryCount does.
        delivery_count=message.delivery_count + 1 if message.delivery_count is not None else None,
        enqueued_time=message.enqueued_time_utc,
        trace_context=carried,
    )


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class ExactlyOnceConsumer(Generic[Message]):
    """Your effect, made exactly-once for one consumer; build it with `exactly_once(...)`."""

    def __init__(
        self,
        effect: Effect[Message],
        *,
        consumer: str,
        parse: Parser[Message] | None = None,
        records: RecordStore | None = None,
        documents: DocumentStore | None = None,
        options: ConsumerOptions[Message] | None = None,
        read: Reader[Message] | None = None,
    ) -> None:
        options = options or ConsumerOptions()
        self.options = options
        if (parse is None) == (read is None):
            raise ValueError("give the consumer one of parse= (the body's bytes) or read=")
        if read is not None and options.cache is not None:
            # A reader's effect names its own decisions, which the cache could not replay.
            raise ValueError("cache= answers for a parser's consumer only, not a reader's")
        self.consumer = consumer
        # The scope of the consumer's keys in every record id: a fixed prefix keeps them when
        # the consumer is renamed (Powertools' `key_prefix`).
        self.key_scope = options.key_prefix or consumer
        self.max_body_bytes = options.max_body_bytes
        self.retention = options.retention
        self._key_partition = options.key_partition
        self._key: KeyOf[Message] = options.key or message_id_key
        self._payload = options.payload
        self._cache = options.cache
        self._effect = effect
        self._parse = parse
        self._read = read
        # Without a store the effect keeps its own records: `effects`' mechanisms refuse.
        self._records = records or cast(RecordStore, _NoStore(consumer))
        self._documents = documents or cast(DocumentStore, _NoStore(consumer))
        self._owner = options.owner or f"{consumer}-{uuid.uuid4().hex[:12]}"
        self._lease_seconds = options.lease_seconds
        self._max_wait_seconds = options.max_wait_seconds
        self._telemetry = options.telemetry or Telemetry()
        self._retrier = Retrier(options.backoff, telemetry=self._telemetry)
        options.lock_renewal.check(self._retrier.backoff, what=f"consumer {consumer!r}")
        self._transient = options.transient
        self._delayed_retries = options.delayed_retries or DelayedRetries()

    async def decide(
        self,
        body: bytes,
        message_id: str | None,
        *,
        properties: Mapping[str, object] | None = None,
        content_type: str | None = None,
    ) -> Decision:
        """Parse, run the effect, and decide; no settlement (any host can settle it).
        `properties` (application properties) and `content_type` are what a key function may
        read besides the body (`cloud_event_key` in binary mode). A consumer made with `read=`
        decides on received messages only (`decide_message`)."""
        if self._read is not None:
            raise TypeError(
                f"consumer {self.consumer!r} reads whole received messages (read=): "
                "call decide_message, with_message_actions or with_receiver"
            )
        sent = _Sent(body, message_id, properties or {}, content_type)
        return await self._observed(message_id, self._decide(sent))

    async def decide_message(self, message: ServiceBusReceivedMessage) -> Decision:
        """Decide on a received message; no settlement (`run_worker`'s `handle`). A delayed
        retry's copy is decided under its original's MessageId."""
        redelivery = received_redelivery(message)
        if isinstance(redelivery, Decision):  # its delayed-retry properties are malformed
            message_id = str(message.message_id) if message.message_id is not None else None
            return await self._observed(message_id, _decided(redelivery), delivered(message))
        message_id = redelivery.message_id
        if self._read is None and message.body_type is not AmqpMessageBodyType.DATA:
            # A value or sequence section is not the bytes a parser expects (the SDK would hand
            # a value's bytes over as if they were data); no delivery will make it so.
            kind = getattr(message.body_type, "value", message.body_type)
            return await self._observed(
                message_id,
                _decided(
                    Decision.dead_letter(
                        Outcome.REJECTED,
                        DeadLetterReason.UNSUPPORTED_BODY_TYPE,
                        f"the body is an AMQP {kind} section; send the message's bytes as data",
                    )
                ),
                delivered(message),
            )
        sent = _Sent(
            body_bytes(message),
            message_id,
            application_properties(message),
            message.content_type,
            delivery_id=_lock_token(message),
            received=message,
        )
        return await self._observed(message_id, self._decide(sent), delivered(message))

    async def _observed(
        self,
        message_id: str | None,
        deciding: Awaitable[Decision],
        delivery: Delivery | None = None,
    ) -> Decision:
        """One span for each delivery (the one open, if any), one count and one log line for
        each delivery's final decision, however it was reached: inside a `Retrier` the line
        waits for the retrier to know the decision is final (a wait is not an abandon)."""
        started = time.monotonic()
        attempts = current_delivery()
        if attempts is not None:
            attempts.consumer = self.consumer
        with self._telemetry.message_span(self.consumer, message_id, delivered=delivery) as span:
            decision = await deciding
            self._telemetry.record(span, self.consumer, decision)
        line = functools.partial(
            self._log_outcome, message_id, decision, time.monotonic() - started
        )
        if attempts is None:
            line(1, None)
        else:
            attempts.outcome_line = line
        return decision

    def _log_outcome(
        self,
        message_id: str | None,
        decision: Decision,
        seconds: float,
        attempts: int,
        settled: object = None,
    ) -> None:
        """The delivery's outcome line: of `settled` when the delivery settles another decision
        than its last attempt's (a delayed retry), else of `decision`."""
        final = settled if isinstance(settled, Decision) else decision
        log_outcome(self.consumer, message_id, final, seconds, attempts=attempts)

    async def process(
        self,
        message: ServiceBusReceivedMessage,
        settler: Settler,
        *,
        back_off: bool = True,
        destination: str | None = None,
        subscription: str | None = None,
        retry_later: bool = True,
    ) -> Decision:
        """Decide on `message` and settle it through `settler`, in one `process` span (on
        `destination`, the entity path, when given). With `back_off`, a transient decision is
        decided again after a backoff before it is abandoned: only where something renews the
        lock meanwhile (the Functions host does; `run_worker` does its own). A failure still
        there once that is spent becomes a delayed retry (`exactly_once.delayed_retries`),
        which `settler` schedules (`retry_later=False`: abandons, as for a settler that cannot
        schedule). `subscription`, the one
        the message came from (else the destination's), completes a delayed retry addressed
        to another subscription as `not_ours`."""
        if subscription is None and destination is not None:
            subscription = Destination.of_entity(destination).subscription
        with self._telemetry.message_span(
            self.consumer, None, delivered=delivered(message, destination)
        ) as span:
            decision = await self._process(
                message,
                settler,
                back_off=back_off,
                subscription=subscription,
                delayed_retries=self._delayed_retries if retry_later else None,
            )
            # What was settled, which a delayed retry makes other than its last attempt's.
            self._telemetry.record(span, self.consumer, decision)
            return decision

    async def _process(
        self,
        message: ServiceBusReceivedMessage,
        settler: Settler,
        *,
        back_off: bool,
        subscription: str | None,
        delayed_retries: DelayedRetries | None,
    ) -> Decision:
        redelivery = received_redelivery(message)
        if isinstance(redelivery, Redelivery) and not redelivery.is_for(subscription):
            # A copy another subscription's consumer scheduled on the topic: not this one's.
            decision = await self._observed(
                redelivery.message_id, _decided(not_ours()), delivered(message)
            )
            await settle(decision, settler)
            return decision
        attempts = 0

        async def attempt() -> Decision:
            nonlocal attempts
            attempts += 1
            return await self.decide_message(message)

        def settled(decision: Decision) -> Decision:
            if not isinstance(redelivery, Redelivery):
                return decision
            delayed = later(decision, redelivery, delayed_retries, attempts=attempts)
            assert isinstance(delayed, Decision)
            return delayed

        if back_off:
            message_id = redelivery.message_id if isinstance(redelivery, Redelivery) else None
            decision = await self._retrier.decide(
                attempt, message_id=message_id, source=self.consumer, then=settled
            )
        else:
            decision = settled(await attempt())
        await settle(decision, settler)
        return decision

    async def with_message_actions(
        self,
        message: ServiceBusReceivedMessage,
        actions: FunctionsMessageActions,
        *,
        destination: str | None = None,
        scheduler: CopyScheduler | None = None,
    ) -> Decision:
        """The one call a `service_bus_queue_trigger` (auto_complete_messages=False) makes; a
        transient decision backs off while the host renews the lock (`maxAutoLockRenewalDuration`
        in host.json must stay above the backoff's budget). The binding does not say which
        entity delivered the message: name it (`queue`, `topic/Subscriptions/subscription`) as
        `destination` for the span's name and the metrics' destination. A failure the backoff
        did not fix is retried later through `scheduler` (a `CopyScheduler` on the same
        entity); without one it is abandoned."""
        return await self.process(
            message,
            MessageActionsSettler(actions, message, scheduler),
            destination=destination,
            subscription=scheduler.subscription if scheduler is not None else None,
            retry_later=scheduler is not None,
        )

    async def with_receiver(
        self,
        message: ServiceBusReceivedMessage,
        receiver: ServiceBusReceiver,
        *,
        scheduler: CopyScheduler | None = None,
    ) -> Decision:
        """The one call a loop of your own on an SDK receiver (PeekLock) makes per message. It
        renews no lock, so a transient decision is not backed off in place: with `scheduler`
        (a `CopyScheduler` on the receiver's entity) it is retried later, without one it is
        abandoned at once. `run_worker` backs off with the lock renewed."""
        return await self.process(
            message,
            ReceiverSettler(receiver, message, scheduler=scheduler),
            back_off=False,
            destination=receiver.entity_path,
            retry_later=scheduler is not None,
        )

    async def _decide(self, sent: _Sent) -> Decision:
        body, message_id = sent.body, sent.message_id
        if sent.received is not None and self._read is not None:
            return await self._decide_read(self._read, sent.received, sent)
        if not message_id:
            return Decision.dead_letter(
                Outcome.REJECTED,
                DeadLetterReason.MISSING_MESSAGE_ID,
                "the message has no MessageId, which names its records",
            )
        if len(body) > self.max_body_bytes:
            # Bounded before any parsing: no body costs more than its size allows.
            return Decision.dead_letter(
                Outcome.REJECTED,
                DeadLetterReason.BODY_TOO_LARGE,
                f"the body has {len(body)} bytes; this consumer takes at most "
                f"{self.max_body_bytes}",
            )
        assert self._parse is not None  # one of the two, checked at construction
        parsed = _parsed(self._parse, body)
        if isinstance(parsed, _Refused):
            return parsed.decision
        identified = self._identify(parsed, sent, message_id)
        if isinstance(identified, Decision):
            return identified
        key, request_hash = identified
        if (opened := current_delivery()) is not None:
            opened.key = key  # for the lines the delivery's claims log
        if self._cache is not None and self._cache.completed(self.key_scope, key, request_hash):
            return Decision.duplicate().about(key, request_hash)
        decision = await self._run(parsed, key, request_hash, message_id, sent.delivery_id)
        if (
            self._cache is not None
            and decision.settlement is Settlement.COMPLETE
            and decision.outcome in (Outcome.PROCESSED, Outcome.DUPLICATE)
        ):
            self._cache.remember(self.key_scope, key, request_hash)
        return decision

    async def _decide_read(
        self, read: Reader[Message], received: ServiceBusReceivedMessage, sent: _Sent
    ) -> Decision:
        """A reader's consumer: the whole message read (its MessageId, body section, size and
        content are the reader's and the effect's to judge), the effect run, and a `Decision`
        it returns settled as it is: its key and request hash are the effect's to name. A
        message without a key reaches the effect too, with `effects` that have no mechanism
        (they name records by the key)."""
        message_id = sent.message_id or ""
        parsed = _parsed(read, received)
        if isinstance(parsed, _Refused):
            return parsed.decision
        identified = self._identify(parsed, sent, message_id)
        if isinstance(identified, Decision):
            if identified.dead_letter_reason != DeadLetterReason.MISSING_IDEMPOTENCY_KEY:
                return identified
            return await self._run(parsed, "", "", message_id, sent.delivery_id, keyed=False)
        key, request_hash = identified
        if (opened := current_delivery()) is not None:
            opened.key = key
        return await self._run(parsed, key, request_hash, message_id, sent.delivery_id)

    def _identify(
        self, parsed: Message, sent: _Sent, message_id: str
    ) -> tuple[str, str] | Decision:
        """The message's key and request hash, or the decision for a message without a key."""
        try:
            key = self._key(
                Delivered(parsed, message_id, sent.body, sent.properties, sent.content_type)
            )
            request_hash = (
                body_fingerprint(sent.body)
                if self._payload is None
                else fingerprint(self._payload(parsed))
            )
        except Rejected as rejected:
            return Decision.dead_letter(
                Outcome.REJECTED, str(rejected.reason), str(rejected.description)
            )
        except Exception as exc:
            # A bug in the key function or the projection, not in the message: the message
            # waits for the fix (abandoned, logged), it is not dead-lettered for it.
            return self._failure(message_id, None, exc)
        if not key:
            return Decision.dead_letter(
                Outcome.REJECTED,
                DeadLetterReason.MISSING_IDEMPOTENCY_KEY,
                f"the consumer's key function found no key in message {message_id!r}",
            )
        return key, request_hash

    async def _run(
        self,
        parsed: Message,
        key: str,
        request_hash: str,
        message_id: str,
        delivery_id: str | None,
        *,
        keyed: bool = True,
    ) -> Decision:
        """Run the effect with the mechanisms bound to the message's key and hash (none for
        a reader's message without a key); the decision names them, but for a reader's
        consumer a `Decision` of the effect's is its own."""
        records, documents = self._records, self._documents
        if not keyed:
            unkeyed = _NoStore(self.consumer, "this message has no key")
            records, documents = cast(RecordStore, unkeyed), cast(DocumentStore, unkeyed)
        effects = Effects(
            consumer=self.key_scope,
            message_id=message_id,
            key=key,
            request_hash=request_hash,
            records=records,
            documents=documents,
            # A claim belongs to one delivery (its lock token, or one id for all its attempts),
            # not to this process: a second copy of the message (here or elsewhere) waits for
            # this one, while a retry of this delivery takes its own claim back at once.
            owner=delivery_owner(self._owner, delivery_id),
            lease_seconds=self._lease_seconds,
            max_wait_seconds=self._max_wait_seconds,
            retention=self.retention,
            key_partition=self._key_partition(key) if self._key_partition and keyed else None,
        )
        try:
            done = await self._effect(parsed, effects)
        except Exception as exc:
            return self._failure(message_id, key, exc).about(key, request_hash)
        if isinstance(done, Decision):
            return done if self._read is not None else done.about(key, request_hash)
        return _outcome_decision(done).about(key, request_hash)

    def _failure(self, message_id: str, key: str | None, exc: Exception) -> Decision:
        return decision_for_error(
            exc, consumer=self.consumer, message_id=message_id, key=key, transient=self._transient
        )


@dataclass(frozen=True)
class _Refused:
    """A body the parser (or the reader) refused: the dead letter it earned."""

    decision: Decision


Read = TypeVar("Read")


def _parsed(parse: Callable[[Read], Message], delivered: Read) -> Message | _Refused:
    """The parser's (or the reader's) model of a delivered message, or its refusal."""
    try:
        return parse(delivered)
    except Rejected as rejected:
        return _Refused(
            Decision.dead_letter(Outcome.REJECTED, str(rejected.reason), str(rejected.description))
        )
    except Exception as exc:
        # A parser is a pure function of the message: what fails now fails on every delivery.
        return _Refused(
            Decision.dead_letter(Outcome.REJECTED, DeadLetterReason.INVALID_MESSAGE, described(exc))
        )


def _outcome_decision(done: Outcome) -> Decision:
    """What an effect's returned outcome settles."""
    if done is Outcome.DUPLICATE:
        return Decision.duplicate()
    if done in (Outcome.PROCESSED, Outcome.STALE):
        return Decision.complete(done)
    # Any other outcome names a failure: completing the message on it would lose it.
    return Decision.abandon(
        Outcome.UNEXPECTED_FAILURE,
        f"the effect returned {done.value!r}; return a Decision (or raise) for a failure",
    )


def _lock_token(message: ServiceBusReceivedMessage) -> str | None:
    """The delivery's lock token (a natural id of one delivery), when the message has one."""
    try:
        token = message.lock_token
    except Exception:  # a message the SDK cannot read a token from names no delivery
        return None
    return str(token) if token else None


async def _decided(decision: Decision) -> Decision:
    return decision


@dataclass(frozen=True)
class _Sent:
    """A message as delivered, before it is parsed."""

    body: bytes
    message_id: str | None
    properties: Mapping[str, object]
    content_type: str | None
    delivery_id: str | None = None  # the lock token: one delivery, across its attempts
    received: ServiceBusReceivedMessage | None = None  # the whole message, for a reader


class _NoStore:
    """The store of `effects` without mechanisms (a consumer made without `store=`, whose
    effect keeps its own records; a reader's message without a key): a mechanism used anyway
    says why rather than guess."""

    def __init__(self, consumer: str, why: str = "it was made without store=") -> None:
        self._consumer = consumer
        self._why = why

    def __getattr__(self, name: str) -> Any:
        raise TypeError(
            f"consumer {self._consumer!r}: {self._why}, so its effect cannot use effects' "
            f"mechanisms (the store's {name!r})"
        )


def exactly_once(
    *,
    consumer: str,
    parse: Parser[Message] | None = None,
    store: Store | None = None,
    options: ConsumerOptions[Message] | None = None,
    read: Reader[Message] | None = None,
) -> Callable[[Effect[Message]], ExactlyOnceConsumer[Message]]:
    """Decorate your effect (`async def effect(message, effects) -> Outcome`) into the
    `ExactlyOnceConsumer` a trigger calls; `store` holds its records and documents, `options`
    (`ConsumerOptions`) every other setting: retention, keys, backoff, lock renewal, delayed
    retries (checked here, at start-up: `RetentionError`, `BudgetError`). Delayed retries run
    where the host can schedule them (`with_message_actions(..., scheduler=...)`).

    `read`, instead of `parse`, hands the reader the whole received message (its application
    properties, enqueued time and body section): such a consumer decides on received messages
    only (`decide_message`, `with_message_actions`, `with_receiver`, `run_worker`), judges the
    body itself (no `max_body_bytes` or body-section check of the core's: a reader sees both),
    and a `Decision` its effect returns is settled as it is, key included (so no `cache`).
    Without `store` the effect keeps its own records (`effects`' mechanisms refuse with a
    `TypeError`)."""

    def wrap(effect: Effect[Message]) -> ExactlyOnceConsumer[Message]:
        return ExactlyOnceConsumer(
            effect,
            consumer=consumer,
            parse=parse,
            records=store,
            documents=store,
            options=options,
            read=read,
        )

    return wrap
