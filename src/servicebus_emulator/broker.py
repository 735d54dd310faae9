"""The broker: the queues of the namespace and one timer wheel for locks, TTLs and schedules."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .config import QueueSettings, TopicSettings
from .journal import Journal
from .queue import Queue
from .timers import Timer, TimerHeap
from .topic import Topic

_LOG = logging.getLogger("servicebus_emulator")

DEAD_LETTER_SUFFIX = "/$deadletterqueue"
MANAGEMENT_SUFFIX = "/$management"


def node_path(address: str) -> str:
    """Entity-relative path of a link address: `amqps://host:port/orders` -> `orders`."""
    if "://" in address:
        address = urlparse(address).path
    return address.strip("/")


class Broker:
    def __init__(
        self,
        queues: list[QueueSettings],
        loop: asyncio.AbstractEventLoop,
        topics: list[TopicSettings] | None = None,
    ) -> None:
        self.loop = loop
        self.queues: dict[str, Queue] = {q.name.lower(): Queue(q, self) for q in queues}
        self.topics: dict[str, Topic] = {t.name.lower(): Topic(t, self) for t in topics or []}
        # A subscription is received from like a queue: `topic/Subscriptions/name`.
        self._subscriptions: dict[str, Queue] = {
            f"{topic_key}/subscriptions/{key}": sub.queue
            for topic_key, topic in self.topics.items()
            for key, sub in topic.subscriptions.items()
        }
        for queue in [*self.queues.values(), *self._subscriptions.values()]:
            self._connect_forwarding(queue)
        self.journal: Journal | None = None  # with `--data` (see journal.py)
        self.timers = TimerHeap()
        self._handle: asyncio.TimerHandle | None = None
        self._handle_when = 0

    def _connect_forwarding(self, queue: Queue) -> None:
        """Point a queue (or subscription) and its dead-letter queue at their auto-forwarding
        targets; the configuration check made sure each names a queue or a topic."""
        settings = queue.settings
        if settings.forward_to is not None:
            queue.forward_to = self._destination(settings.forward_to)
        if settings.forward_dead_lettered_to is not None and queue.dead_letter is not None:
            queue.dead_letter.forward_to = self._destination(settings.forward_dead_lettered_to)

    def _destination(self, name: str) -> Queue | Topic:
        destination = self.queues.get(name.lower()) or self.topics.get(name.lower())
        assert destination is not None, f"no queue or topic {name!r}"
        return destination

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def call_at_ms(self, when_ms: int, callback: Callable[..., None], *args: Any) -> Timer:
        timer = self.timers.push(when_ms, callback, args)
        if self._handle is None or when_ms < self._handle_when:
            self._arm(when_ms)
        return timer

    def _arm(self, when_ms: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle_when = when_ms
        delay = max(when_ms - self.now_ms(), 0) / 1000.0
        self._handle = self.loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        now = self.now_ms()
        while (due := self.timers.pop_due(now)) is not None:
            callback, args = due
            try:
                callback(*args)
            except Exception:  # a bug in one timer must not stop the others
                _LOG.exception("timer callback failed")
        next_due = self.timers.next_due_ms()
        if next_due is not None:
            self._arm(next_due)

    def resolve(self, path: str) -> Queue | None:
        """The queue or dead-letter sub-queue a path names (case-insensitive like Service Bus)."""
        lowered = path.lower()
        if lowered.endswith(DEAD_LETTER_SUFFIX):
            queue = self._queue(lowered[: -len(DEAD_LETTER_SUFFIX)])
            return queue.dead_letter if queue else None
        return self._queue(lowered)

    def _queue(self, lowered: str) -> Queue | None:
        return self.queues.get(lowered) or self._subscriptions.get(lowered)

    def is_subscription(self, queue: Queue) -> bool:
        return self._subscriptions.get(queue.name.lower()) is queue

    def resolve_topic(self, path: str) -> Topic | None:
        """The topic a path names (senders and the topic's `$management` node)."""
        return self.topics.get(path.lower())

    def subscription_queues(self) -> list[Queue]:
        return list(self._subscriptions.values())

    def topic_of(self, queue: Queue) -> Topic | None:
        """The topic a subscription (not its dead-letter queue) belongs to."""
        lowered = queue.name.lower()
        if self._subscriptions.get(lowered) is not queue:
            return None
        return self.topics.get(lowered.split("/", 1)[0])

    def open_journal(self, data_dir: Path, *, fsync: bool) -> None:
        """Replay the journal in `data_dir` into the entities and journal from now on."""
        journal = Journal(data_dir, fsync=fsync)
        journal.open(self)
        self.journal = journal

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.journal is not None:
            self.journal.close()
            self.journal = None
