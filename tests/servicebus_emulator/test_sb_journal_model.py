"""Model-based test of the journal (hypothesis stateful): random sends, receives, settlements,
deferrals, schedules, expiries and session states on queues, a topic's subscriptions and
forwarding chains (ForwardTo, ForwardDeadLetteredMessagesTo), with restarts at random points.

The in-process broker is driven directly on a fake clock (the journal is what is under test;
test_sb_persistence_forwarding.py covers the same moves through the SDK and real processes).
After every step, and above all after every restart, the broker's state (each entity's messages
with their delivery count, state, dead-letter reason, TTL, expiry, schedule and body; session
states) must equal the model's. Restarts are clean (close), a crash (descriptors dropped, no
flush), a crash with an unacknowledged send pending, and a crash tearing that send's write.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import tempfile
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sb_support import queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import frames
from servicebus_emulator.broker import Broker
from servicebus_emulator.codec import Symbol, Timestamp, UInt, encode_value
from servicebus_emulator.config import load_namespace
from servicebus_emulator.filters import MessageView
from servicebus_emulator.journal import (
    JOURNAL_NAME,
    JournalError,
    read_journal,
)
from servicebus_emulator.message import (
    AVAILABLE,
    DEFERRED,
    LOCKED,
    SCHEDULED,
    StoredMessage,
    parse_message,
)
from servicebus_emulator.ports import MAX_SESSION_STATE_BYTES
from servicebus_emulator.queue import MessageSession, Queue
from servicebus_emulator.timers import Timer, TimerHeap

MAX_DELIVERIES = 2
HOUR_MS = 3_600_000
NEVER = 2**62
DLQ = "/$deadletterqueue"
START_MS = 1_800_000_000_000

# q: dead-letters on expiry; fwd -> q (ForwardTo); src: dead letters -> errors; topic t: s1
# keeps its dead letters, s2 forwards them to errors; sq requires sessions. Locks (5 min)
# outlast every example: only a restart loses them.
_CONFIG = topic_config(
    topic_entry(
        "t",
        subscription_entry(
            "s1",
            MaxDeliveryCount=MAX_DELIVERIES,
            LockDuration="PT5M",
            DeadLetteringOnMessageExpiration=True,
        ),
        subscription_entry(
            "s2",
            MaxDeliveryCount=MAX_DELIVERIES,
            LockDuration="PT5M",
            DeadLetteringOnMessageExpiration=True,
            ForwardDeadLetteredMessagesTo="errors",
        ),
        RequiresDuplicateDetection=False,
    ),
    queues=tuple(
        queue_entry(
            name,
            MaxDeliveryCount=MAX_DELIVERIES,
            LockDuration="PT5M",
            RequiresDuplicateDetection=False,
            **properties,
        )
        for name, properties in list[tuple[str, dict[str, Any]]](
            [
                ("q", {"DeadLetteringOnMessageExpiration": True}),
                ("fwd", {"ForwardTo": "q"}),
                (
                    "src",
                    {
                        "DeadLetteringOnMessageExpiration": True,
                        "ForwardDeadLetteredMessagesTo": "errors",
                    },
                ),
                ("errors", {}),
                ("sq", {"RequiresSession": True}),
            ]
        )
    ),
)
NAMESPACE = load_namespace(config=_CONFIG)
EXPIRY_DEAD_LETTERS = {"q", "src", "t/subscriptions/s1", "t/subscriptions/s2"}
DEAD_LETTERS_FORWARDED = {"src", "t/subscriptions/s2"}
# Entities a receiver can attach to (a forwarding dead-letter queue cannot be received from).
RECEIVABLE = [
    "q",
    "q" + DLQ,
    "src",
    "errors",
    "errors" + DLQ,
    "t/subscriptions/s1",
    "t/subscriptions/s1" + DLQ,
    "t/subscriptions/s2",
]
ALL_ENTITIES = [
    *RECEIVABLE,
    "fwd",
    "fwd" + DLQ,
    "src" + DLQ,
    "t/subscriptions/s2" + DLQ,
    "sq",
    "sq" + DLQ,
]
SESSIONS = ["a", "b"]
STATE_NAMES = {
    AVAILABLE: "available",
    LOCKED: "locked",
    DEFERRED: "deferred",
    SCHEDULED: "scheduled",
}


class ClockedBroker(Broker):
    """The broker on a clock that moves only when the test says so (timers run in order)."""

    def __init__(self, clock: list[int], loop: asyncio.AbstractEventLoop) -> None:
        self.clock = clock  # shared across restarts: journal records hold absolute times
        self._due = TimerHeap()
        super().__init__(NAMESPACE.queues, loop, NAMESPACE.topics)

    def now_ms(self) -> int:  # type: ignore[override]  # an instance's clock, not the wall's
        return self.clock[0]

    def call_at_ms(self, when_ms: int, callback: Callable[..., None], *args: Any) -> Timer:
        return self._due.push(when_ms, callback, args)

    def advance(self, ms: int) -> None:
        target = self.clock[0] + ms
        while (when := self._due.next_due_ms()) is not None and when <= target:
            self.clock[0] = max(self.clock[0], when)
            due = self._due.pop_due(when)
            assert due is not None
            callback, args = due
            callback(*args)
        self.clock[0] = target


class Receiver:
    """A receiver link as the queue sees it: takes one message and locks it."""

    def __init__(self) -> None:
        self.waiting = False
        self.message_session: MessageSession | None = None
        self.credit = 1
        self.taken: list[tuple[StoredMessage, uuid.UUID]] = []

    def can_take(self) -> bool:
        return self.credit > 0

    def take(self, queue: Queue, message: StoredMessage) -> None:
        self.credit -= 1
        self.taken.append((message, queue.lock(message, self)))


def encoded_message(
    message_id: str, ttl_ms: int | None, scheduled_ms: int | None, session_id: str | None
) -> bytes:
    out = bytearray()
    if ttl_ms is not None:
        out += frames.described_list(0x70, [None, None, UInt(ttl_ms)])
    if scheduled_ms is not None:
        out += b"\x00\x53\x72"
        encode_value(out, {Symbol("x-opt-scheduled-enqueue-time"): Timestamp(scheduled_ms)})
    properties: list[Any] = [message_id, *[None] * 9, session_id]
    out += frames.described_list(0x73, properties)
    out += b"\x00\x53\x75"
    encode_value(out, f"body of {message_id}".encode())
    return bytes(out)


def body_section(message_id: str) -> bytes:
    out = bytearray(b"\x00\x53\x75")
    encode_value(out, f"body of {message_id}".encode())
    return bytes(out)


@dataclass(frozen=True)
class Expected:
    """A message as the model expects to find it in one entity."""

    ttl: int  # header TTL or the entity's default
    header_ttl: int | None
    expires: int
    scheduled: int | None = None
    state: str = "available"
    delivery_count: int = 0
    reason: str | None = None
    locked_from_deferred: bool = False

    @property
    def due(self) -> int:
        """When the broker's timers next act on it: activation, else expiry."""
        if self.state == "scheduled" and self.scheduled is not None:
            return self.scheduled
        return self.expires


def observed(queue: Queue) -> dict[str, tuple[Any, ...]]:
    """The broker's view of an entity, in the model's terms (message id -> fields)."""
    view: dict[str, tuple[Any, ...]] = {}
    for msg in queue.messages.values():
        assert msg.message_id is not None
        assert msg.body_raw == body_section(msg.message_id), msg.message_id
        user = MessageView([], msg.app_raw, msg.app_count).user
        view[msg.message_id] = (
            STATE_NAMES[msg.state],
            msg.delivery_count,
            user.get("DeadLetterReason"),
            msg.ttl_ms,
            msg.expires_ms,
            msg.scheduled_ms,
        )
    return view


def expected_view(model: dict[str, Expected]) -> dict[str, tuple[Any, ...]]:
    return {
        message_id: (m.state, m.delivery_count, m.reason, m.ttl, m.expires, m.scheduled)
        for message_id, m in model.items()
    }


class JournalModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="sb-journal-model-"))
        self.loop = asyncio.new_event_loop()  # never run: the test syncs the journal itself
        self.clock = [START_MS]
        self.ids = itertools.count()
        self.model: dict[str, dict[str, Expected]] = {name: {} for name in ALL_ENTITIES}
        self.session_states: dict[str, bytes] = {}
        # (entity, message id) -> lock token (this broker's); a topic's copies share their id
        self.held: dict[tuple[str, str], uuid.UUID] = {}
        self.sessions_of: dict[str, str] = {}  # message id -> session id (queue sq)
        self.broker = self._start()

    def teardown(self) -> None:
        self.broker.close()
        self.loop.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------------ the broker side

    def _start(self) -> ClockedBroker:
        # Written by this emulator, the journal never needs the replay's repair of the
        # out-of-order records older emulators wrote.
        assert read_journal(self.directory / JOURNAL_NAME).repaired == 0
        broker = ClockedBroker(self.clock, self.loop)
        broker.open_journal(self.directory, fsync=False)
        return broker

    def _acknowledge(self) -> None:
        """What a connection does before it answers: the step's records reach the file."""
        assert self.broker.journal is not None
        self.broker.journal.sync()

    def _crash(self) -> None:
        """kill -9: the descriptors close, nothing buffered is written, nothing else runs."""
        journal = self.broker.journal
        assert journal is not None
        os.close(journal._fd)
        os.close(journal._lock_fd)
        journal._fd = journal._lock_fd = -1  # a dead process touches nothing after this

    def _queue(self, entity: str) -> Queue:
        queue = self.broker.resolve(entity)
        assert queue is not None
        return queue

    def _seq_of(self, entity: str, message_id: str) -> int:
        (seq,) = [s for s, m in self._queue(entity).messages.items() if m.message_id == message_id]
        return seq

    def _send(
        self, entity: str, ttl: int | None, scheduled_in: int | None, session: str | None
    ) -> str:
        message_id = f"m{next(self.ids)}"
        scheduled = None if scheduled_in is None else self.clock[0] + scheduled_in
        parsed = parse_message(encoded_message(message_id, ttl, scheduled, session))
        topic = self.broker.resolve_topic(entity)
        if topic is not None:
            topic.send(parsed)
        else:
            self._queue(entity).send(parsed)
        return message_id

    # ------------------------------------------------------------------ the model side

    def _arrive(
        self, entity: str, message_id: str, header_ttl: int | None, scheduled: int | None
    ) -> None:
        now = self.clock[0]
        if entity == "t":
            for sub in ("t/subscriptions/s1", "t/subscriptions/s2"):
                self._arrive(sub, message_id, header_ttl, scheduled)
            return
        if entity == "fwd" and (scheduled is None or scheduled <= now):
            self._arrive("q", message_id, header_ttl, None)
            return
        ttl = HOUR_MS if header_ttl is None else min(header_ttl, HOUR_MS)
        pending = scheduled is not None and scheduled > now
        self.model[entity][message_id] = Expected(
            ttl=ttl,
            header_ttl=header_ttl,
            expires=(scheduled if pending and scheduled else now) + ttl,
            scheduled=scheduled,
            state="scheduled" if pending else "available",
        )

    def _dead_letter(self, entity: str, message_id: str, reason: str | None) -> None:
        m = self.model[entity].pop(message_id)
        if entity.endswith(DLQ):  # Service Bus keeps a dead letter dead-lettered again
            self.model[entity][message_id] = replace(
                m, state="available", locked_from_deferred=False
            )
            return
        m = replace(m, state="available", expires=NEVER, locked_from_deferred=False)
        if reason is not None:
            m = replace(m, reason=reason)
        if entity in DEAD_LETTERS_FORWARDED:
            self._arrive("errors", message_id, m.header_ttl, None)
            copy = self.model["errors"][message_id]
            self.model["errors"][message_id] = replace(copy, reason=m.reason)
        else:
            self.model[entity + DLQ][message_id] = m

    def _expire(self, entity: str, message_id: str) -> None:
        if entity in EXPIRY_DEAD_LETTERS:
            self._dead_letter(entity, message_id, "TTLExpiredException")
        else:
            del self.model[entity][message_id]

    def _unlock(self, entity: str, message_id: str) -> None:
        """A lock given back with an attempt counted (abandon, or lost to a restart)."""
        m = self.model[entity][message_id]
        from_deferred = m.locked_from_deferred
        m = replace(
            m,
            delivery_count=m.delivery_count + 1,
            locked_from_deferred=False,
            state="deferred" if from_deferred else "available",
        )
        self.model[entity][message_id] = m
        if not from_deferred and not entity.endswith(DLQ) and m.delivery_count >= MAX_DELIVERIES:
            self._dead_letter(entity, message_id, "MaxDeliveryCountExceeded")
        elif m.expires <= self.clock[0]:
            self._expire(entity, message_id)

    def _model_advance(self, ms: int) -> None:
        """Expiries and activations in time order, up to now + ms."""
        target = self.clock[0] + ms
        while True:
            events = [
                (m.due, entity, message_id)
                for entity, messages in self.model.items()
                for message_id, m in messages.items()
                if m.state in ("available", "deferred", "scheduled")
            ]
            due = [e for e in events if e[0] <= target]
            if not due:
                break
            when, entity, message_id = min(due, key=lambda e: (e[0], int(e[2][1:])))
            self.clock[0] = max(self.clock[0], when)
            m = self.model[entity][message_id]
            if m.state == "scheduled":
                del self.model[entity][message_id]
                if entity == "fwd":
                    self._arrive("q", message_id, m.header_ttl, None)
                else:
                    self.model[entity][message_id] = replace(m, state="available")
            else:
                self._expire(entity, message_id)
        self.clock[0] = target

    # ------------------------------------------------------------------ rules

    @rule(
        entity=st.sampled_from(["q", "fwd", "src", "t", "errors"]),
        ttl=st.sampled_from([None, 1000, 2500]),
        scheduled_in=st.sampled_from([None, None, 500, 3000]),
    )
    def send(self, entity: str, ttl: int | None, scheduled_in: int | None) -> None:
        if scheduled_in is not None:
            ttl = None  # a scheduled message's expiry counts from its activation
        message_id = self._send(entity, ttl, scheduled_in, None)
        self._acknowledge()
        scheduled = None if scheduled_in is None else self.clock[0] + scheduled_in
        self._arrive(entity, message_id, ttl, scheduled)

    @rule(entity=st.sampled_from(RECEIVABLE))
    def receive(self, entity: str) -> None:
        queue = self._queue(entity)
        receiver = Receiver()
        queue.add_consumer(receiver)
        queue.remove_consumer(receiver)
        self._acknowledge()
        available = {i for i, m in self.model[entity].items() if m.state == "available"}
        if not receiver.taken:
            assert not available
            return
        ((msg, token),) = receiver.taken
        assert msg.message_id in available
        self.held[entity, msg.message_id] = token
        m = self.model[entity][msg.message_id]
        self.model[entity][msg.message_id] = replace(m, state="locked")

    @precondition(lambda self: self.held)
    @rule(data=st.data(), outcome=st.sampled_from(["complete", "abandon", "dead-letter", "defer"]))
    def settle(self, data: st.DataObject, outcome: str) -> None:
        entity, message_id = data.draw(st.sampled_from(sorted(self.held)))
        self.settle_one(entity, message_id, outcome)

    def settle_one(self, entity: str, message_id: str, outcome: str) -> None:
        token = self.held.pop((entity, message_id))
        queue = self._queue(entity)
        if outcome == "complete":
            queue.complete(token)
            del self.model[entity][message_id]
        elif outcome == "abandon":
            queue.abandon(token)
            self._unlock(entity, message_id)
        elif outcome == "dead-letter":
            queue.dead_letter_locked(token, "Invalid", "bad order")
            self._dead_letter(entity, message_id, "Invalid")
        else:
            queue.defer(token)
            m = self.model[entity][message_id]
            self.model[entity][message_id] = replace(
                m, state="deferred", locked_from_deferred=False
            )
            if m.expires <= self.clock[0]:
                self._expire(entity, message_id)
        self._acknowledge()

    @precondition(
        lambda self: any(m.state == "deferred" for e in RECEIVABLE for m in self.model[e].values())
    )
    @rule(data=st.data())
    def receive_deferred(self, data: st.DataObject) -> None:
        deferred = sorted(
            (e, i) for e in RECEIVABLE for i, m in self.model[e].items() if m.state == "deferred"
        )
        self.receive_deferred_one(*data.draw(st.sampled_from(deferred)))

    def receive_deferred_one(self, entity: str, message_id: str) -> None:
        msg = self._queue(entity).lock_deferred(self._seq_of(entity, message_id))
        self._acknowledge()
        assert msg.lock_token is not None
        self.held[entity, message_id] = msg.lock_token
        m = self.model[entity][message_id]
        self.model[entity][message_id] = replace(m, state="locked", locked_from_deferred=True)

    @rule(ms=st.sampled_from([0, 400, 1000, 2600]))
    def advance(self, ms: int) -> None:
        start = self.clock[0]
        self.broker.advance(ms)
        self._acknowledge()
        # One clock serves both sides: back to the start, so the model's events see the same
        # instants the broker's timers did.
        self.clock[0] = start
        self._model_advance(ms)

    @rule(session=st.sampled_from(SESSIONS))
    def send_in_session(self, session: str) -> None:
        message_id = self._send("sq", None, None, session)
        self._acknowledge()
        self._arrive("sq", message_id, None, None)
        self.sessions_of[message_id] = session

    @rule(
        session=st.sampled_from(SESSIONS), value=st.sampled_from([None, b"", b"step-1", b"x" * 300])
    )
    def set_session_state(self, session: str, value: bytes | None) -> None:
        queue = self._queue("sq")
        receiver = Receiver()
        receiver.credit = 0
        locked = queue.accept_session(receiver, session)
        queue.set_session_state(locked, value)
        assert locked.state == value
        queue.remove_consumer(receiver)
        self._acknowledge()
        if value is None:
            self.session_states.pop(session, None)
        else:
            self.session_states[session] = value

    @rule(session=st.sampled_from(SESSIONS))
    def receive_in_session_and_complete(self, session: str) -> None:
        queue = self._queue("sq")
        receiver = Receiver()
        queue.accept_session(receiver, session)
        queue.add_consumer(receiver)
        for _, token in receiver.taken:
            queue.complete(token)
        queue.remove_consumer(receiver)
        self._acknowledge()
        ours = [i for i in self.model["sq"] if self.sessions_of[i] == session]
        expected = sorted(ours, key=lambda i: int(i[1:]))[:1]  # a session is first in, first out
        assert [msg.message_id for msg, _ in receiver.taken] == expected
        for message_id in expected:
            del self.model["sq"][message_id]

    @rule(how=st.sampled_from(["clean", "kill", "kill-unacknowledged", "kill-torn"]))
    def restart(self, how: str) -> None:
        if how == "clean":
            self.broker.close()
        else:
            if how != "kill":  # a send whose answer never left: it may not survive
                self._send("q", None, None, None)
                journal = self.broker.journal
                assert journal is not None and journal._pending
                if how == "kill-torn":  # part of its record reached the file
                    os.write(journal._fd, journal._pending[0][: len(journal._pending[0]) // 2])
            self._crash()
        self.held.clear()
        self.broker = self._start()
        self.broker.advance(0)  # what came due while it was down
        self._acknowledge()
        for entity in ALL_ENTITIES:
            for message_id in [i for i, m in self.model[entity].items() if m.state == "locked"]:
                self._unlock(entity, message_id)
        self._model_advance(0)

    # ------------------------------------------------------------------ the check

    @invariant()
    def broker_matches_the_model(self) -> None:
        for entity in ALL_ENTITIES:
            assert observed(self._queue(entity)) == expected_view(self.model[entity]), entity
        states = dict(self._queue("sq").session_states())
        assert states == self.session_states


JournalModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_journal_replays_to_the_model = JournalModel.TestCase
# Slow (about 15 s): handed out first, with the other slow tests (tests/conftest.py).
test_journal_replays_to_the_model.pytestmark = [pytest.mark.slow]  # type: ignore[attr-defined]


# Paths the random search reaches only now and then, replayed on every run.
SCENARIOS: dict[str, list[tuple[str, tuple[Any, ...]]]] = {
    "dead letters forwarded by hand, by MaxDeliveryCount and by expiry": [
        ("send", ("src", None, None)),
        ("receive", ("src",)),
        ("settle", ("dead-letter",)),
        ("send", ("t", None, None)),
        ("receive", ("t/subscriptions/s2",)),
        ("settle", ("abandon",)),
        ("receive", ("t/subscriptions/s2",)),
        ("settle", ("abandon",)),
        ("send", ("src", 1000, None)),
        ("advance", (1000,)),
    ],
    "a message deferred after its time-to-live ran out while locked": [
        ("send", ("q", 1000, None)),
        ("receive", ("q",)),
        ("advance", (1000,)),
        ("settle", ("defer",)),
    ],
    "a deferred message abandoned after its time-to-live ran out while locked": [
        ("send", ("q", 2500, None)),
        ("receive", ("q",)),
        ("settle", ("defer",)),
        ("receive_deferred", ()),
        ("advance", (2600,)),
        ("settle", ("abandon",)),
    ],
    "a lock lost to a crash uses the last attempt; the dead letter is forwarded": [
        ("send", ("src", None, None)),
        ("receive", ("src",)),
        ("settle", ("abandon",)),
        ("receive", ("src",)),
        ("restart", ("kill",)),
    ],
    "a scheduled message activates in a forwarding queue while the emulator is down": [
        ("send", ("fwd", None, 500)),
        ("restart", ("clean",)),
        ("advance", (1000,)),
    ],
}


@pytest.mark.parametrize("steps", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_scenario_replays_to_the_model(steps: list[tuple[str, tuple[Any, ...]]]) -> None:
    machine = JournalModel()
    try:
        held: tuple[str, str] | None = None
        for step, args in steps:
            if step == "send":
                machine.send(*args)
            elif step == "receive":
                before = set(machine.held)
                machine.receive(*args)
                (held,) = set(machine.held) - before
            elif step == "settle":
                assert held is not None
                machine.settle_one(*held, *args)
            elif step == "receive_deferred":
                assert held is not None
                machine.receive_deferred_one(*held)
            elif step == "advance":
                machine.advance(*args)
            else:
                machine.restart(*args)
            machine.broker_matches_the_model()
            if not machine.held:  # between settlements: a restart must change nothing
                for how in ("clean", "kill"):
                    machine.restart(how)
                    machine.broker_matches_the_model()
    finally:
        machine.teardown()


def test_a_session_state_over_the_limit_is_refused_by_the_queue_and_by_the_replay() -> None:
    machine = JournalModel()
    try:
        queue = machine._queue("sq")
        receiver = Receiver()
        receiver.credit = 0
        session = queue.accept_session(receiver, "a")
        queue.set_session_state(session, b"k" * MAX_SESSION_STATE_BYTES)
        with pytest.raises(ValueError, match="exceeds the limit"):
            queue.set_session_state(session, b"k" * (MAX_SESSION_STATE_BYTES + 1))
        assert session.state == b"k" * MAX_SESSION_STATE_BYTES
        queue.remove_consumer(receiver)
        machine._acknowledge()
        machine.broker.close()
        path = machine.directory / JOURNAL_NAME
        too_big = base64.b64encode(b"k" * (MAX_SESSION_STATE_BYTES + 1)).decode()
        oversized = {"o": "ss", "e": "sq", "sid": "a", "v": too_big}
        text = json.dumps(oversized).encode()
        with path.open("ab") as journal_file:
            journal_file.write(b"%08x " % zlib.crc32(text) + text + b"\n")
        with pytest.raises(JournalError, match="over the limit"):
            read_journal(path)
    finally:
        machine.loop.close()
        shutil.rmtree(machine.directory, ignore_errors=True)
