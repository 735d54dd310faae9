"""Topics: duplicate detection at the topic, then one copy per matching subscription rule.

A subscription is a `Queue` fed by its topic, so locks, delivery counts, TTL, MaxDeliveryCount,
deferral, peeking and the dead-letter sub-queue are the queue's own. Rules follow Service Bus:
all matching rules without an action together give one copy; each matching rule with an action
gives its own copy, carrying the user property `RuleName` and the action's changes.
"""

from __future__ import annotations

from collections import deque

from .config import SubscriptionSettings, TopicSettings
from .filters import MessageView
from .message import ParsedMessage
from .queue import Queue, Timers


class Subscription:
    def __init__(self, settings: SubscriptionSettings, timers: Timers) -> None:
        self.settings = settings
        self.queue = Queue(settings.queue, timers)
        self.rules = settings.rules
        self.filters_everything = all(r.action is None for r in self.rules) and any(
            r.description == "1=1" and r.action is None for r in self.rules
        )

    def deliver(self, parsed: ParsedMessage, view: MessageView | None) -> int:
        """Enqueue this subscription's copies of a message; how many there were."""
        if self.filters_everything:
            self.queue.send(parsed)
            return 1
        assert view is not None
        plain = False
        copies = 0
        for rule in self.rules:
            if not rule.matches(view):
                continue
            if rule.action is None:
                plain = True
                continue
            updates, removed = rule.action(view)
            updates["RuleName"] = rule.name
            if self.queue.send(parsed, (updates, removed)) is not None:
                copies += 1
        if plain and self.queue.send(parsed) is not None:
            copies += 1
        return copies


class Topic:
    """A topic: senders attach to it; receivers attach to its subscriptions."""

    def __init__(self, settings: TopicSettings, timers: Timers) -> None:
        self.settings = settings
        self.name = settings.name
        self.timers = timers
        self.subscriptions: dict[str, Subscription] = {
            s.name.lower(): Subscription(s, timers) for s in settings.subscriptions
        }
        self._needs_view = not all(s.filters_everything for s in self.subscriptions.values())
        self._dedup: dict[str, int] = {}
        self._dedup_order: deque[tuple[int, str]] = deque()

    def send(self, parsed: ParsedMessage) -> int | None:
        """Fan a message out; None when it is a duplicate within the detection window."""
        settings = self.settings
        if settings.requires_duplicate_detection and parsed.message_id is not None:
            now = self.timers.now_ms()
            horizon = now - settings.duplicate_window_ms
            order = self._dedup_order
            while order and order[0][0] <= horizon:
                accepted, message_id = order.popleft()
                if self._dedup.get(message_id) == accepted:
                    del self._dedup[message_id]
            if parsed.message_id in self._dedup:
                return None
            self._dedup[parsed.message_id] = now
            order.append((now, parsed.message_id))
        view = (
            MessageView(parsed.properties, parsed.app_raw, parsed.app_count)
            if self._needs_view
            else None
        )
        return sum(s.deliver(parsed, view) for s in self.subscriptions.values())
