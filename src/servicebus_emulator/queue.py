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
from .dedup import DuplicateHistory
from .message import (
    AVAILABLE,
    DEFERRED,
    GONE,
    LOCKED,
    SCHEDULED,
    ParsedMessage,
    StoredMessage,
    forwarded_copy,
    header_ttl_ms,
)
from .ports import MAX_SESSION_STATE_BYTES, EntityJournal
from .timers import Timer

MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
TTL_REASON = "TTLExpiredException"
_NEVER = 2**62
SESSION_ID_MISSING = (
    "The SessionId was not set on a message, and it cannot be sent to the entity. "
    "Entities that have session support enabled can only receive messages that have the "
    "SessionId set to a valid value."
)
_random_bits = random.Random().getrandbits


class LockLostError(Exception):
    """The lock token is unknown or its lock expired (Service Bus: message-lock-lost)."""


class MessageNotFoundError(Exception):
    """No message with that sequence number (Service Bus: message-not-found)."""


class SessionLockLostError(Exception):
    """The session is not locked by the caller, or its lock expired (session-lock-lost)."""


class SessionCannotBeLockedError(Exception):
    """Another receiver holds the session's lock (session-cannot-be-locked)."""


class NoSessionAvailableError(Exception):
    """No unlocked session has messages (a next-available session receiver times out)."""


class SessionIdMissingError(Exception):
    """A message without a SessionId sent to an entity that requires sessions."""


class Consumer(Protocol):
    """A receiver link as the queue sees it."""

    waiting: bool
    message_session: MessageSession | None

    def can_take(self) -> bool: ...

    def take(self, queue: Queue, message: StoredMessage) -> None: ...


class Destination(Protocol):
    """Where auto-forwarding sends a message: a queue or a topic."""

    def check_session(self, parsed: ParsedMessage) -> None: ...

    def send(self, parsed: ParsedMessage) -> object: ...


class Timers(Protocol):
    def now_ms(self) -> int: ...

    def call_at_ms(self, when_ms: int, callback: Callable[..., None], *args: Any) -> Timer: ...


class MessageSession:
    """A Service Bus message session of a queue that requires sessions: its messages (in
    sequence order), its state and the receiver holding its lock."""

    __slots__ = ("available", "id", "locked_until_ms", "owner", "state", "state_updated_ms")

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.available: list[int] = []
        self.state: bytes | None = None
        self.state_updated_ms = 0  # when a client last set the state (get-message-sessions)
        self.owner: Consumer | None = None
        self.locked_until_ms = 0


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
        # The armed timers of the messages held here, cancelled as a message leaves or its
        # lock ends: a timer lets its message go then, not when it would have fired.
        self._ttl_timers: dict[int, Timer] = {}
        self._schedule_timers: dict[int, Timer] = {}
        self._lock_timers: dict[uuid.UUID, Timer] = {}
        self.dedup = DuplicateHistory(settings.duplicate_window_ms)
        self._next_seq = 1
        self._pumping = False
        # Set by the broker with `--data`: every change a client is told of is journaled.
        self.journal: EntityJournal | None = None
        self.dead_letter: Queue | None = None if parent else Queue(settings, timers, self)
        # Session id -> session, when the queue requires sessions (its dead-letter queue does not).
        self.sessions: dict[str, MessageSession] | None = (
            {} if settings.requires_session and parent is None else None
        )
        # Next-available session receivers waiting for a session with messages, and the
        # callback that completes each one's attach (None: it timed out).
        self._session_waiters: deque[tuple[Consumer, Callable[[MessageSession | None], None]]] = (
            deque()
        )
        # Auto-forwarding target, set by the broker: for a queue or subscription its ForwardTo,
        # for a dead-letter queue its parent's ForwardDeadLetteredMessagesTo.
        self.forward_to: Destination | None = None

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
        self.check_session(parsed)
        remembered = False
        if settings.requires_duplicate_detection and parsed.message_id is not None:
            if not self.dedup.accept(parsed.message_id, now):
                return None
            remembered = True
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
            self._schedule_timers[msg.seq] = self.timers.call_at_ms(
                msg.scheduled_ms, self._on_scheduled, msg.seq
            )
        if self.journal is not None:
            self.journal.record_added(self, msg, remembered)
        if msg.state != SCHEDULED:
            self._make_available(msg)
        if msg.state != GONE:  # not forwarded at once
            self._ttl_timers[msg.seq] = self.timers.call_at_ms(
                msg.expires_ms, self._on_ttl, msg.seq
            )
        return msg

    def check_session(self, parsed: ParsedMessage) -> None:
        """Refuse a message without a SessionId when the queue, or an entity it forwards to,
        requires sessions (Service Bus would move it to the transfer dead-letter queue)."""
        if self.sessions is not None and not parsed.session_id:
            raise SessionIdMissingError(SESSION_ID_MISSING)
        if self.forward_to is not None and self.parent is None:
            self.forward_to.check_session(parsed)

    def cancel_scheduled(self, seq: int) -> None:
        msg = self.messages.get(seq)
        if msg is None or msg.state != SCHEDULED:
            raise MessageNotFoundError(f"no scheduled message with sequence number {seq}")
        self._remove(msg)

    def _on_scheduled(self, seq: int) -> None:
        self._schedule_timers.pop(seq, None)
        msg = self.messages.get(seq)
        if msg is not None and msg.state == SCHEDULED:
            msg.enqueued_ms = self.timers.now_ms()  # Service Bus: enqueued when it activates
            self._make_available(msg)

    # ------------------------------------------------------------------ dispatch

    def _forward(self, msg: StoredMessage) -> None:
        """Auto-forwarding: the moment a message would become receivable here (sent, activated
        when scheduled, dead-lettered into this dead-letter queue) it moves to the target.
        The configuration check (forwarding.py) guarantees the target takes it."""
        assert self.forward_to is not None
        self._remove(msg)
        source = self.parent.name if self.parent is not None else None
        self.forward_to.send(forwarded_copy(msg, dead_letter_source=source))

    def _make_available(self, msg: StoredMessage) -> None:
        if self.forward_to is not None:
            self._forward(msg)
            return
        msg.state = AVAILABLE
        msg.lock_token = None
        msg.lock_owner = None
        if self.sessions is not None:
            session = self._session(msg.session_id or "")
            heapq.heappush(session.available, msg.seq)
            if session.owner is not None:
                self._pump_session(session)
            elif self._session_waiters:
                self._offer_session(session)
            return
        heapq.heappush(self._available, msg.seq)
        if self._consumers:
            self.pump()

    def add_consumer(self, consumer: Consumer) -> None:
        if consumer.message_session is not None:
            self._pump_session(consumer.message_session)
            return
        if self.sessions is not None:
            return  # a receiver still waiting for a session
        if not consumer.waiting:
            consumer.waiting = True
            self._consumers.append(consumer)
        self.pump()

    def remove_consumer(self, consumer: Consumer) -> None:
        session = consumer.message_session
        if session is not None:
            consumer.message_session = None
            if session.owner is consumer:
                self._end_session_lock(session)
            return
        for index, (waiter, _) in enumerate(self._session_waiters):
            if waiter is consumer:
                del self._session_waiters[index]
                break
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

    # ------------------------------------------------------------------ sessions

    def _session(self, session_id: str) -> MessageSession:
        assert self.sessions is not None
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = MessageSession(session_id)
        return session

    def _session_ready(self, session: MessageSession) -> bool:
        """True when the session has a message to hand out now."""
        available = session.available
        messages = self.messages
        while available:
            msg = messages.get(available[0])
            if msg is not None and msg.state == AVAILABLE:
                return True
            heapq.heappop(available)
        return False

    def accept_session(self, consumer: Consumer, session_id: str | None) -> MessageSession:
        """Lock a session for a receiver: the one named, or (None) the unlocked session whose
        next message is oldest."""
        if self.sessions is None:
            raise ValueError("the entity does not require sessions")
        now = self.timers.now_ms()
        if session_id is None:
            best: MessageSession | None = None
            for candidate in self.sessions.values():
                if (candidate.owner is None or candidate.locked_until_ms <= now) and (
                    self._session_ready(candidate)
                    and (best is None or candidate.available[0] < best.available[0])
                ):
                    best = candidate
            if best is None:
                raise NoSessionAvailableError("No unlocked session with messages is available.")
            session = best
        else:
            session = self._session(session_id)
            if session.owner is not None and session.locked_until_ms > now:
                raise SessionCannotBeLockedError(
                    f"The requested session '{session_id}' cannot be accepted. "
                    "It may be locked by another receiver."
                )
        if session.owner is not None:  # its lock ran out and its timer has not fired yet
            self._end_session_lock(session)
            if session.owner is not None:  # handed to a waiting next-available receiver
                raise SessionCannotBeLockedError(
                    f"The requested session '{session.id}' cannot be accepted. "
                    "It may be locked by another receiver."
                )
            self.sessions[session.id] = session  # kept, even if it was just pruned
        session.owner = consumer
        consumer.message_session = session
        session.locked_until_ms = now + self.settings.lock_duration_ms
        self.timers.call_at_ms(session.locked_until_ms, self._on_session_timer, session, consumer)
        return session

    def wait_for_session(
        self,
        consumer: Consumer,
        deadline_ms: int,
        callback: Callable[[MessageSession | None], None],
    ) -> None:
        """A next-available receiver waits (until `deadline_ms`) for a session with messages."""
        self._session_waiters.append((consumer, callback))
        self.timers.call_at_ms(deadline_ms, self._on_wait_timeout, consumer)

    def _on_wait_timeout(self, consumer: Consumer) -> None:
        for index, (waiter, callback) in enumerate(self._session_waiters):
            if waiter is consumer:
                del self._session_waiters[index]
                callback(None)
                return

    def _offer_session(self, session: MessageSession) -> None:
        """An unlocked session with a message: the first waiting receiver locks it."""
        if session.owner is None and self._session_waiters and self._session_ready(session):
            consumer, callback = self._session_waiters.popleft()
            self.accept_session(consumer, session.id)
            callback(session)

    def locked_session(self, session_id: str, owner_name: str | None) -> MessageSession:
        """The session, when a receiver (the link named, if given) holds its lock."""
        session = self.sessions.get(session_id) if self.sessions is not None else None
        if (
            session is None
            or session.owner is None
            or session.locked_until_ms <= self.timers.now_ms()
            or (owner_name is not None and getattr(session.owner, "name", None) != owner_name)
        ):
            raise SessionLockLostError(
                "The session lock has expired on the MessageSession. Accept a new MessageSession."
            )
        return session

    def renew_session(self, session: MessageSession) -> int:
        session.locked_until_ms = self.timers.now_ms() + self.settings.lock_duration_ms
        owner = session.owner
        for msg in list(self.locks.values()):
            if msg.lock_owner is owner and owner is not None:
                msg.locked_until_ms = session.locked_until_ms
                self._arm_lock_timer(msg)
        self.timers.call_at_ms(session.locked_until_ms, self._on_session_timer, session, owner)
        return session.locked_until_ms

    def _on_session_timer(self, session: MessageSession, owner: Consumer) -> None:
        if session.owner is owner and session.locked_until_ms <= self.timers.now_ms():
            on_lost = getattr(owner, "session_lock_lost", None)
            self._end_session_lock(session)
            if on_lost is not None:
                on_lost()

    def _end_session_lock(self, session: MessageSession) -> None:
        """Release the session: the messages locked under it return to it."""
        owner = session.owner
        session.owner = None
        session.locked_until_ms = 0
        if owner is not None:
            owner.message_session = None
            for msg in [m for m in self.locks.values() if m.lock_owner is owner]:
                self._unlock(msg, count_delivery=True)
        if self._session_waiters:
            self._offer_session(session)
        self._prune_session(session)

    def _prune_session(self, session: MessageSession) -> None:
        """Forget an unlocked session without available messages or state: session ids are
        the clients' choice, so the sessions kept are bounded by the messages and states held
        (a deferred or scheduled message recreates its session when it becomes available)."""
        if (
            session.owner is None
            and session.state is None
            and self.sessions is not None
            and not self._session_ready(session)
        ):
            self.sessions.pop(session.id, None)

    def _pump_session(self, session: MessageSession) -> None:
        """Hand the session's messages, in sequence order, to the receiver holding its lock."""
        consumer = session.owner
        if consumer is None or self._pumping:
            return
        self._pumping = True
        try:
            available = session.available
            messages = self.messages
            now = self.timers.now_ms()
            while (
                available
                and session.owner is consumer
                and session.locked_until_ms > now
                and consumer.can_take()
            ):
                seq = heapq.heappop(available)
                msg = messages.get(seq)
                if msg is None or msg.state != AVAILABLE:
                    continue
                if msg.expires_ms <= now:
                    self._expire(msg)
                    continue
                consumer.take(self, msg)
        finally:
            self._pumping = False

    def lock(self, msg: StoredMessage, owner: Any) -> uuid.UUID:
        # A version-4 UUID without uuid4()'s urandom syscall: tokens only need to be unique.
        token = uuid.UUID(int=_random_bits(128), version=4)
        msg.state = LOCKED
        msg.lock_token = token
        msg.lock_owner = owner
        session = getattr(owner, "message_session", None)
        if session is not None:  # a message in a session is locked as long as its session
            msg.locked_until_ms = session.locked_until_ms
        else:
            msg.locked_until_ms = self.timers.now_ms() + self.settings.lock_duration_ms
        self.locks[token] = msg
        self._arm_lock_timer(msg)
        if self.journal is not None:  # a lock lost to a restart counts as a delivery attempt
            self.journal.record_locked(self, msg)
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
            timer = self._lock_timers.pop(msg.lock_token, None)
            if timer is not None:
                timer.cancel()
        msg.lock_token = None
        msg.lock_owner = None

    def _arm_lock_timer(self, msg: StoredMessage) -> None:
        """(Re)arm the timer that ends a message's lock at its `locked_until_ms`."""
        token = msg.lock_token
        assert token is not None
        timer = self._lock_timers.get(token)
        if timer is not None:
            timer.cancel()
        self._lock_timers[token] = self.timers.call_at_ms(
            msg.locked_until_ms, self._on_lock_timer, msg, token
        )

    def _on_lock_timer(self, msg: StoredMessage, token: uuid.UUID) -> None:
        self._lock_timers.pop(token, None)
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
            if not was_deferred and self._dead_letter_if_exhausted(msg):
                return
        if self.journal is not None:
            msg.state = DEFERRED if was_deferred else AVAILABLE
            self.journal.record_updated(self, msg)
        if was_deferred:
            msg.state = DEFERRED
            # Its time-to-live timer fired while it was locked and let it be: expire it now.
            if msg.expires_ms <= self.timers.now_ms():
                self._expire(msg)
        elif msg.expires_ms <= self.timers.now_ms():
            self._expire(msg)
        else:
            self._make_available(msg)

    def _dead_letter_if_exhausted(self, msg: StoredMessage) -> bool:
        """Dead-letter a message that used its last delivery attempt; True if it did."""
        if self.parent is not None or msg.delivery_count < self.settings.max_delivery_count:
            return False
        description = (
            f"Message could not be consumed after "
            f"{self.settings.max_delivery_count} delivery attempts."
        )
        self._dead_letter(msg, MAX_DELIVERY_REASON, description)
        return True

    def renew(self, token: uuid.UUID) -> int:
        msg = self._locked(token)
        msg.locked_until_ms = self.timers.now_ms() + self.settings.lock_duration_ms
        self._arm_lock_timer(msg)
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
        if self.journal is not None:
            self.journal.record_updated(self, msg)
        if msg.expires_ms <= self.timers.now_ms():  # it expired while locked
            self._expire(msg)

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
            if self.journal is not None:
                msg.state = AVAILABLE
                self.journal.record_updated(self, msg)
            self._make_available(msg)
            return
        self._drop(msg)
        values: dict[str, Any] = {}
        if reason is not None:
            values["DeadLetterReason"] = reason
        if description is not None:
            values["DeadLetterErrorDescription"] = description
        if values:
            msg.add_application_properties(values)
        msg.expires_ms = _NEVER  # time-to-live does not apply in the dead-letter queue
        msg.state = AVAILABLE
        if self.journal is not None:
            # Before the dead-letter queue sees it: auto-forwarding there journals the
            # message's removal from the dead-letter queue, which a replay can only apply
            # once this record has put it there.
            self.journal.record_dead_lettered(self, msg)
        self.dead_letter.accept_dead_lettered(msg)

    def accept_dead_lettered(self, msg: StoredMessage) -> None:
        self.messages[msg.seq] = msg
        self._make_available(msg)

    def _remove(self, msg: StoredMessage) -> None:
        if self.journal is not None and self.messages.get(msg.seq) is msg:
            self.journal.record_removed(self, msg)
        self._drop(msg)

    def _drop(self, msg: StoredMessage) -> None:
        self._release_lock(msg)
        msg.state = GONE
        if self.messages.get(msg.seq) is msg:
            del self.messages[msg.seq]
            for timers in (self._ttl_timers, self._schedule_timers):
                timer = timers.pop(msg.seq, None)
                if timer is not None:
                    timer.cancel()

    # ------------------------------------------------------------------ expiry

    def _on_ttl(self, seq: int) -> None:
        self._ttl_timers.pop(seq, None)
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

    def delete(self, msg: StoredMessage) -> None:
        """Remove a message a client deletes without receiving it (batch-delete-messages)."""
        self._remove(msg)

    def peek(self, from_seq: int, count: int, session_id: str | None = None) -> list[StoredMessage]:
        now = self.timers.now_ms()
        result: list[StoredMessage] = []
        # A queue inserts in sequence order, so its keys are already sorted; messages reach a
        # dead-letter queue in any order.
        keys = list(self.messages) if self.parent is None else sorted(self.messages)
        for seq in keys[bisect.bisect_left(keys, from_seq) :]:
            msg = self.messages[seq]
            if msg.state != SCHEDULED and msg.expires_ms <= now and msg.state != LOCKED:
                continue
            if session_id is not None and msg.session_id != session_id:
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

    # ------------------------------------------------------------------ what is kept

    def held(self) -> dict[str, int]:
        """How many entries each of the queue's structures keeps: each is bounded by the
        messages queued, locked, scheduled or dead-lettered (and, for `dedup`, the ids inside
        the duplicate-detection window), never by every message that passed through."""
        return {
            "messages": len(self.messages),
            "available": len(self._available),
            "locks": len(self.locks),
            "lock_timers": len(self._lock_timers),
            "ttl_timers": len(self._ttl_timers),
            "schedule_timers": len(self._schedule_timers),
            "dedup": len(self.dedup),
            "sessions": len(self.sessions or {}),
        }

    # ------------------------------------------------------------------ persistence

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def dedup_entries(self, now: int) -> list[tuple[str, int]]:
        return self.dedup.entries(now)

    def session_states(self) -> list[tuple[str, bytes]]:
        sessions = self.sessions or {}
        return [(s.id, s.state) for s in sessions.values() if s.state is not None]

    def set_session_state(self, session: MessageSession, state: bytes | None) -> None:
        if state is not None and len(state) > MAX_SESSION_STATE_BYTES:
            raise ValueError(
                f"The session state of {len(state)} bytes exceeds the limit of "
                f"{MAX_SESSION_STATE_BYTES} bytes."
            )
        session.state = state
        if self.journal is not None:
            self.journal.record_session_state(self, session.id, state)

    def restore_next_seq(self, next_seq: int) -> None:
        self._next_seq = max(self._next_seq, next_seq)

    def restore_message(self, msg: StoredMessage) -> None:
        """Put back a journaled message (in sequence order); `activate_restored` follows once
        every entity holds its messages."""
        self.messages[msg.seq] = msg
        if self.parent is None:
            self._next_seq = max(self._next_seq, msg.seq + 1)

    def activate_restored(self, msg: StoredMessage, now: int, lock_lost: bool) -> None:
        """Arm a restored message's timers and make it available, which may forward or
        dead-letter it: the entity it goes to already holds its own restored messages, so
        their sequence order is kept. A message that was locked when the emulator stopped
        counts that delivery, as an expired lock does."""
        if self.messages.get(msg.seq) is not msg:
            return
        if self.parent is None:
            self._ttl_timers[msg.seq] = self.timers.call_at_ms(
                msg.expires_ms, self._on_ttl, msg.seq
            )
        if lock_lost:
            msg.delivery_count += 1
            if msg.state != DEFERRED and self._dead_letter_if_exhausted(msg):
                return
            if self.journal is not None:  # kept when the start-up compaction cannot be written
                self.journal.record_updated(self, msg)
        if msg.state == SCHEDULED:
            assert msg.scheduled_ms is not None
            if msg.scheduled_ms > now:
                self._schedule_timers[msg.seq] = self.timers.call_at_ms(
                    msg.scheduled_ms, self._on_scheduled, msg.seq
                )
                return
            msg.enqueued_ms = msg.scheduled_ms  # it activated while the emulator was down
        if msg.state != DEFERRED:
            self._make_available(msg)

    def restore_dedup(self, entries: dict[str, int], now: int) -> None:
        self.dedup.restore(entries, now)

    def restore_session_state(self, session_id: str, state: bytes) -> None:
        if self.sessions is not None:
            self._session(session_id).state = state
