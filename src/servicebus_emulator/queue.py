"""Queue semantics: sequence numbers, locks, settlement, dead-lettering, duplicate detection.

Everything here runs on the broker's event loop thread, so nothing needs a lock. Time comes
from the broker's clock in milliseconds since the epoch (the unit of AMQP timestamps).
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import random
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from .config import QueueSettings
from .message import (
    AVAILABLE,
    DEFERRED,
    GONE,
    LOCKED,
    SCHEDULED,
    ParsedMessage,
    StoredMessage,
    header_ttl_ms,
)

MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
TTL_REASON = "TTLExpiredException"
_NEVER = 2**62
_random_bits = random.Random().getrandbits


class LockLostError(Exception):
    """The lock token is unknown or its lock expired (Service Bus: message-lock-lost)."""


class MessageNotFoundError(Exception):
    """No message with that sequence number (Service Bus: message-not-found)."""


class Consumer(Protocol):
    """A receiver link as the queue sees it."""

    waiting: bool

    def can_take(self) -> bool: ...

    def take(self, queue: Queue, message: StoredMessage) -> None: ...


class Timers(Protocol):
    def now_ms(self) -> int: ...

    def call_at_ms(self, when_ms: int, callback: Callable[..., None], *args: Any) -> None: ...


class Queue:
    """A queue or the dead-letter sub-queue of one (`parent` set)."""

    def __init__(
        self, settings: QueueSettings, timers: Timers, parent: Queue | None = None
    ) -> None:
        self.settings = settings
        self.timers = timers
        self.parent = parent
        self.name = settings.name + ("/$deadletterqueue" if parent else "")
        self.messages: dict[int, StoredMessage] = {}
        self._available: list[int] = []
        self._consumers: deque[Consumer] = deque()
        self.locks: dict[uuid.UUID, StoredMessage] = {}
        self._dedup: dict[str, int] = {}
        self._dedup_order: deque[tuple[int, str]] = deque()
        self._next_seq = 1
        self._pumping = False
        self.dead_letter: Queue | None = None if parent else Queue(settings, timers, self)

    # ------------------------------------------------------------------ sending

    def send(
        self,
        parsed: ParsedMessage,
        properties: tuple[dict[str, Any], list[str]] | None = None,
        seq: int | None = None,
    ) -> StoredMessage | None:
        """Enqueue a message; None when it is a duplicate within the detection window.

        `properties` (application properties to set, names to remove) edits this copy before
        anyone can receive it (a subscription rule's action); `seq` is the sequence number a
        topic assigned (higher than any this queue holds)."""
        now = self.timers.now_ms()
        settings = self.settings
        if settings.requires_duplicate_detection and parsed.message_id is not None:
            self._prune_dedup(now)
            if parsed.message_id in self._dedup:
                return None
            self._dedup[parsed.message_id] = now
            self._dedup_order.append((now, parsed.message_id))
        ttl = header_ttl_ms(parsed.header)
        ttl = settings.default_ttl_ms if ttl is None else min(ttl, settings.default_ttl_ms)
        if seq is not None:
            self._next_seq = max(self._next_seq, seq)
        msg = StoredMessage(parsed, self._next_seq, now, ttl)
        self._next_seq += 1
        if properties is not None:
            msg.add_application_properties(properties[0], properties[1])
        self.messages[msg.seq] = msg
        if msg.scheduled_ms is not None and msg.scheduled_ms > now:
            msg.state = SCHEDULED
            self.timers.call_at_ms(msg.scheduled_ms, self._on_scheduled, msg.seq)
        else:
            self._make_available(msg)
        # Timers hold the sequence number, not the message, so a consumed message is freed
        # at once rather than when its time-to-live would have run out.
        self.timers.call_at_ms(msg.expires_ms, self._on_ttl, msg.seq)
        return msg

    def _prune_dedup(self, now: int) -> None:
        horizon = now - self.settings.duplicate_window_ms
        order = self._dedup_order
        while order and order[0][0] <= horizon:
            accepted, message_id = order.popleft()
            if self._dedup.get(message_id) == accepted:
                del self._dedup[message_id]

    def cancel_scheduled(self, seq: int) -> None:
        msg = self.messages.get(seq)
        if msg is None or msg.state != SCHEDULED:
            raise MessageNotFoundError(f"no scheduled message with sequence number {seq}")
        self._remove(msg)

    def _on_scheduled(self, seq: int) -> None:
        msg = self.messages.get(seq)
        if msg is not None and msg.state == SCHEDULED:
            msg.enqueued_ms = self.timers.now_ms()  # Service Bus: enqueued when it activates
            self._make_available(msg)

    # ------------------------------------------------------------------ dispatch

    def _make_available(self, msg: StoredMessage) -> None:
        msg.state = AVAILABLE
        msg.lock_token = None
        msg.lock_owner = None
        heapq.heappush(self._available, msg.seq)
        if self._consumers:
            self.pump()

    def add_consumer(self, consumer: Consumer) -> None:
        if not consumer.waiting:
            consumer.waiting = True
            self._consumers.append(consumer)
        self.pump()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer.waiting:
            consumer.waiting = False
            with contextlib.suppress(ValueError):
                self._consumers.remove(consumer)

    def pump(self) -> None:
        """Hand available messages to consumers with credit, round robin, lowest seq first."""
        if self._pumping:
            return
        self._pumping = True
        try:
            consumers = self._consumers
            available = self._available
            messages = self.messages
            now = self.timers.now_ms()
            while available and consumers:
                consumer = consumers[0]
                if not consumer.can_take():
                    consumers.popleft()
                    consumer.waiting = False
                    continue
                seq = heapq.heappop(available)
                msg = messages.get(seq)
                if msg is None or msg.state != AVAILABLE:
                    continue
                if msg.expires_ms <= now:
                    self._expire(msg)
                    continue
                consumer.take(self, msg)
                if len(consumers) > 1:
                    consumers.rotate(-1)
        finally:
            self._pumping = False

    def lock(self, msg: StoredMessage, owner: Any) -> uuid.UUID:
        # A version-4 UUID without uuid4()'s urandom syscall: tokens only need to be unique.
        token = uuid.UUID(int=_random_bits(128), version=4)
        msg.state = LOCKED
        msg.lock_token = token
        msg.lock_owner = owner
        msg.locked_until_ms = self.timers.now_ms() + self.settings.lock_duration_ms
        self.locks[token] = msg
        self.timers.call_at_ms(msg.locked_until_ms, self._on_lock_timer, msg, token)
        return token

    def take_deleting(self, msg: StoredMessage) -> None:
        """ReceiveAndDelete: the message leaves the queue as it is delivered."""
        self._remove(msg)

    # ------------------------------------------------------------------ locks

    def _locked(self, token: uuid.UUID) -> StoredMessage:
        msg = self.locks.get(token)
        if msg is None or msg.lock_token != token:
            raise LockLostError(
                "The lock supplied is invalid. Either the lock expired, "
                "or the message has already been removed from the queue."
            )
        if msg.locked_until_ms <= self.timers.now_ms():
            self._lock_expired(msg)
            raise LockLostError("The lock on the message has expired.")
        return msg

    def _release_lock(self, msg: StoredMessage) -> None:
        if msg.lock_token is not None:
            self.locks.pop(msg.lock_token, None)
        msg.lock_token = None
        msg.lock_owner = None

    def _on_lock_timer(self, msg: StoredMessage, token: uuid.UUID) -> None:
        if msg.lock_token == token and msg.locked_until_ms <= self.timers.now_ms():
            self._lock_expired(msg)

    def _lock_expired(self, msg: StoredMessage) -> None:
        self._unlock(msg, count_delivery=True)

    def _unlock(self, msg: StoredMessage, *, count_delivery: bool) -> None:
        """Return a locked message to the queue (or to the deferred set)."""
        was_deferred = msg.lock_owner == "deferred"
        self._release_lock(msg)
        if count_delivery:
            msg.delivery_count += 1
            if (
                self.parent is None
                and not was_deferred
                and msg.delivery_count >= self.settings.max_delivery_count
            ):
                description = (
                    f"Message could not be consumed after "
                    f"{self.settings.max_delivery_count} delivery attempts."
                )
                self._dead_letter(msg, MAX_DELIVERY_REASON, description)
                return
        if was_deferred:
            msg.state = DEFERRED
        elif msg.expires_ms <= self.timers.now_ms():
            self._expire(msg)
        else:
            self._make_available(msg)

    def renew(self, token: uuid.UUID) -> int:
        msg = self._locked(token)
        msg.locked_until_ms = self.timers.now_ms() + self.settings.lock_duration_ms
        self.timers.call_at_ms(msg.locked_until_ms, self._on_lock_timer, msg, token)
        return msg.locked_until_ms

    # ------------------------------------------------------------------ settlement

    def complete(self, token: uuid.UUID) -> None:
        self._remove(self._locked(token))

    def abandon(self, token: uuid.UUID, properties: dict[str, Any] | None = None) -> None:
        msg = self._locked(token)
        if properties:
            msg.add_application_properties(properties)
        self._unlock(msg, count_delivery=True)

    def release(self, token: uuid.UUID) -> None:
        """The receiver gave the message back unprocessed (AMQP released): no attempt counted."""
        msg = self._locked(token)
        self._unlock(msg, count_delivery=False)

    def defer(self, token: uuid.UUID, properties: dict[str, Any] | None = None) -> None:
        msg = self._locked(token)
        if properties:
            msg.add_application_properties(properties)
        self._release_lock(msg)
        msg.state = DEFERRED

    def dead_letter_locked(
        self,
        token: uuid.UUID,
        reason: str | None,
        description: str | None,
        properties: dict[str, Any] | None = None,
    ) -> None:
        msg = self._locked(token)
        if properties:
            msg.add_application_properties(properties)
        self._release_lock(msg)
        self._dead_letter(msg, reason, description)

    def _dead_letter(self, msg: StoredMessage, reason: str | None, description: str | None) -> None:
        if self.dead_letter is None:  # already in a dead-letter queue: Service Bus keeps it
            self._make_available(msg)
            return
        self._remove(msg)
        values: dict[str, Any] = {}
        if reason is not None:
            values["DeadLetterReason"] = reason
        if description is not None:
            values["DeadLetterErrorDescription"] = description
        if values:
            msg.add_application_properties(values)
        self.dead_letter.accept_dead_lettered(msg)

    def accept_dead_lettered(self, msg: StoredMessage) -> None:
        msg.expires_ms = _NEVER  # time-to-live does not apply in the dead-letter queue
        self.messages[msg.seq] = msg
        self._make_available(msg)

    def _remove(self, msg: StoredMessage) -> None:
        self._release_lock(msg)
        msg.state = GONE
        if self.messages.get(msg.seq) is msg:
            del self.messages[msg.seq]

    # ------------------------------------------------------------------ expiry

    def _on_ttl(self, seq: int) -> None:
        # A locked message expires when its lock ends (see _unlock), as in Service Bus.
        msg = self.messages.get(seq)
        if (
            msg is not None
            and msg.state in (AVAILABLE, DEFERRED)
            and msg.expires_ms <= (self.timers.now_ms())
        ):
            self._expire(msg)

    def _expire(self, msg: StoredMessage) -> None:
        if self.settings.dead_lettering_on_expiration and self.dead_letter is not None:
            self._dead_letter(msg, TTL_REASON, "The message expired and was dead lettered.")
        else:
            self._remove(msg)

    # ------------------------------------------------------------------ management views

    def peek(self, from_seq: int, count: int) -> list[StoredMessage]:
        now = self.timers.now_ms()
        result: list[StoredMessage] = []
        # A queue inserts in sequence order, so its keys are already sorted; messages reach a
        # dead-letter queue in any order.
        keys = list(self.messages) if self.parent is None else sorted(self.messages)
        for seq in keys[bisect.bisect_left(keys, from_seq) :]:
            msg = self.messages[seq]
            if msg.state != SCHEDULED and msg.expires_ms <= now and msg.state != LOCKED:
                continue
            result.append(msg)
            if len(result) >= count:
                break
        return result

    def lock_deferred(self, seq: int) -> StoredMessage:
        msg = self.messages.get(seq)
        if msg is None or msg.state != DEFERRED:
            raise MessageNotFoundError(f"no deferred message with sequence number {seq}")
        self.lock(msg, "deferred")
        return msg

    def delete_deferred(self, seq: int) -> StoredMessage:
        msg = self.messages.get(seq)
        if msg is None or msg.state != DEFERRED:
            raise MessageNotFoundError(f"no deferred message with sequence number {seq}")
        self._remove(msg)
        return msg
