"""Topics: duplicate detection at the topic, then one copy per matching subscription rule.

A subscription is a `Queue` fed by its topic, so locks, delivery counts, TTL, MaxDeliveryCount,
deferral, peeking and the dead-letter sub-queue are the queue's own. Rules follow Service Bus:
all matching rules without an action together give one copy; each matching rule with an action
gives its own copy, carrying the user property `RuleName` and the action's changes. The topic
assigns sequence numbers: the copies of one message share its number in every subscription,
and a copy made by a rule action takes a number of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from .config import SubscriptionSettings, TopicSettings
from .dedup import DuplicateHistory
from .filters import MessageView
from .message import SCHEDULED, ParsedMessage
from .ports import EntityJournal
from .queue import (
    MessageNotFoundError,
    Queue,
    Timers,
)


class Subscription:
    def __init__(self, settings: SubscriptionSettings, timers: Timers) -> None:
        self.settings = settings
        self.queue = Queue(settings.queue, timers)
        self.rules = settings.rules
        self.takes_everything = all(r.action is None for r in self.rules) and any(
            r.description == "1=1" for r in self.rules
        )

    def deliver(
        self,
        parsed: ParsedMessage,
        view: MessageView | None,
        seq: int,
        next_seq: Callable[[], int],
        made: list[tuple[Queue, int]],
    ) -> None:
        """Enqueue this subscription's copies of a message, recording (queue, seq) in `made`."""
        if self.takes_everything:
            if self.queue.send(parsed, seq=seq) is not None:
                made.append((self.queue, seq))
            return
        assert view is not None
        plain = False
        actions: list[tuple[dict[str, Any], list[str]]] = []
        for rule in self.rules:
            if not rule.matches(view):
                continue
            if rule.action is None:
                plain = True
                continue
            updates, removed = rule.action(view)
            updates["RuleName"] = rule.name
            actions.append((updates, removed))
        # The plain copy first: a queue's sequence numbers grow in the order it stores them.
        if plain and self.queue.send(parsed, seq=seq) is not None:
            made.append((self.queue, seq))
        for edit in actions:
            number = next_seq()
            if self.queue.send(parsed, edit, seq=number) is not None:
                made.append((self.queue, number))


class Topic:
    """A topic: senders attach to it; receivers attach to its subscriptions."""

    def __init__(self, settings: TopicSettings, timers: Timers) -> None:
        self.settings = settings
        self.name = settings.name
        self.timers = timers
        self.subscriptions: dict[str, Subscription] = {
            s.name.lower(): Subscription(s, timers) for s in settings.subscriptions
        }
        self._needs_view = not all(s.takes_everything for s in self.subscriptions.values())
        self.dedup = DuplicateHistory(settings.duplicate_window_ms)
        self._next_seq = 1
        # sequence number -> the subscription copies of a scheduled message (for cancelling)
        self._scheduled: dict[int, list[tuple[Queue, int]]] = {}
        self.journal: EntityJournal | None = None  # set by the broker with `--data`

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def check_session(self, parsed: ParsedMessage) -> None:
        """Refuse a message without a SessionId when a subscription (or an entity one forwards
        to) requires sessions."""
        if not parsed.session_id:
            for subscription in self.subscriptions.values():
                subscription.queue.check_session(parsed)

    def send(self, parsed: ParsedMessage) -> int | None:
        """Fan a message out and return its sequence number; None for a duplicate within the
        detection window (acknowledged and dropped, as in Service Bus)."""
        self.check_session(parsed)
        settings = self.settings
        now = self.timers.now_ms()
        remembered: str | None = None
        if settings.requires_duplicate_detection and parsed.message_id is not None:
            if not self.dedup.accept(parsed.message_id, now):
                return None
            remembered = parsed.message_id
        view = (
            MessageView(parsed.properties, parsed.app_raw, parsed.app_count)
            if self._needs_view
            else None
        )
        seq = self._take_seq()
        made: list[tuple[Queue, int]] = []
        for subscription in self.subscriptions.values():
            subscription.deliver(parsed, view, seq, self._take_seq, made)
        if self.journal is not None and (remembered is not None or not made):
            # The subscriptions' records carry the sequence numbers of the copies they made.
            self.journal.record_topic_send(self, self._next_seq - 1, remembered, now)
        if parsed.scheduled_ms is not None and parsed.scheduled_ms > now:
            self._scheduled[seq] = made
            self.timers.call_at_ms(parsed.scheduled_ms, self._forget_scheduled, seq)
        return seq

    def _forget_scheduled(self, seq: int) -> None:
        self._scheduled.pop(seq, None)

    def cancel_scheduled(self, seq: int) -> None:
        """Cancel a scheduled message in every subscription that holds a copy of it."""
        copies = self._scheduled.pop(seq, None)
        if copies is None:
            raise MessageNotFoundError(f"no scheduled message with sequence number {seq}")
        for queue, number in copies:
            with contextlib.suppress(MessageNotFoundError):  # activated there already
                queue.cancel_scheduled(number)

    # ------------------------------------------------------------------ persistence

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def dedup_entries(self, now: int) -> list[tuple[str, int]]:
        return self.dedup.entries(now)

    def restore_next_seq(self, next_seq: int) -> None:
        self._next_seq = max(self._next_seq, next_seq)

    def restore_dedup(self, entries: dict[str, int], now: int) -> None:
        self.dedup.restore(entries, now)

    def restore_scheduled(self, queue: Queue) -> None:
        """Make a subscription's restored scheduled copies cancellable through the topic (by
        the topic's number; a rule action's copy, numbered on its own, is not)."""
        for seq, msg in queue.messages.items():
            if msg.state == SCHEDULED and msg.scheduled_ms is not None:
                if seq not in self._scheduled:
                    self.timers.call_at_ms(msg.scheduled_ms, self._forget_scheduled, seq)
                self._scheduled.setdefault(seq, []).append((queue, seq))
