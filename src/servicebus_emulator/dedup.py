"""Duplicate detection: the MessageIds an entity accepted inside its time window.

A queue and a topic each keep one history. It is pruned on every send, so what it holds is
bounded by the messages accepted inside one window (the last one before the entity went
quiet), however long the emulator runs.
"""

from __future__ import annotations

from collections import deque


class DuplicateHistory:
    """MessageId -> when it was accepted (ms), oldest first, for one entity's window."""

    __slots__ = ("_accepted", "_order", "window_ms")

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._accepted: dict[str, int] = {}
        self._order: deque[tuple[int, str]] = deque()

    def __len__(self) -> int:
        return len(self._accepted)

    def prune(self, now: int) -> None:
        """Forget the ids accepted before the window that ends now."""
        horizon = now - self.window_ms
        order = self._order
        while order and order[0][0] <= horizon:
            accepted, message_id = order.popleft()
            if self._accepted.get(message_id) == accepted:
                del self._accepted[message_id]

    def accept(self, message_id: str, now: int) -> bool:
        """Remember `message_id` as accepted now; False when it is a duplicate in the window."""
        self.prune(now)
        if message_id in self._accepted:
            return False
        self._accepted[message_id] = now
        self._order.append((now, message_id))
        return True

    def entries(self, now: int) -> list[tuple[str, int]]:
        """The (MessageId, accepted at) pairs still inside the window."""
        horizon = now - self.window_ms
        return [(message_id, at) for message_id, at in self._accepted.items() if at > horizon]

    def restore(self, entries: dict[str, int], now: int) -> None:
        """Refill the history (oldest first) with the journaled entries inside the window."""
        horizon = now - self.window_ms
        for message_id, at in sorted(entries.items(), key=lambda item: item[1]):
            if at > horizon:
                self._accepted[message_id] = at
                self._order.append((at, message_id))
