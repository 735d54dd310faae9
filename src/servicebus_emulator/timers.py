"""Cancellable timers on one heap: locks, time-to-live, schedules and session waits.

A timer that is no longer needed (its message completed, its lock released) is cancelled:
it lets go of what it holds at once, and the heap is rebuilt without the cancelled timers
once they are more than half of it. So the heap is bounded by the timers still armed (the
messages queued, locked or scheduled), not by every message that ever passed through, as a
heap that only pops due timers would be with an hour's time-to-live.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

# Rebuilding costs a pass over the heap: only once enough timers were cancelled to pay for it.
_COMPACT_MIN_CANCELLED = 256


class Timer:
    """One armed callback; `cancel` drops it (and its references) without running it."""

    __slots__ = ("_heap", "args", "callback", "order", "when_ms")

    def __init__(
        self,
        heap: TimerHeap | None,
        when_ms: int,
        order: int,
        callback: Callable[..., None] | None,
        args: tuple[Any, ...],
    ) -> None:
        self._heap = heap
        self.when_ms = when_ms
        self.order = order
        self.callback = callback
        self.args = args

    def __lt__(self, other: Timer) -> bool:
        return (self.when_ms, self.order) < (other.when_ms, other.order)

    @property
    def active(self) -> bool:
        return self.callback is not None

    def cancel(self) -> None:
        """Never run it; a timer that already ran or was cancelled is left as it is."""
        if self.callback is None:
            return
        self.callback = None
        self.args = ()
        if self._heap is not None:
            self._heap.cancelled()


class TimerHeap:
    """Timers in due order; cancelled ones are skipped and, when many, compacted away."""

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._order = itertools.count()
        self._cancelled = 0

    def __len__(self) -> int:
        """Timers held, cancelled ones not yet compacted away included."""
        return len(self._heap)

    @property
    def armed(self) -> int:
        """Timers that will still run."""
        return len(self._heap) - self._cancelled

    def push(self, when_ms: int, callback: Callable[..., None], args: tuple[Any, ...]) -> Timer:
        timer = Timer(self, when_ms, next(self._order), callback, args)
        heapq.heappush(self._heap, timer)
        return timer

    def next_due_ms(self) -> int | None:
        """When the earliest timer still armed is due (None: nothing armed)."""
        heap = self._heap
        while heap and heap[0].callback is None:
            heapq.heappop(heap)
            self._cancelled -= 1
        return heap[0].when_ms if heap else None

    def pop_due(self, now_ms: int) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
        """The callback of the earliest armed timer due by `now_ms` (taken off the heap)."""
        when = self.next_due_ms()
        if when is None or when > now_ms:
            return None
        timer = heapq.heappop(self._heap)
        callback, args = timer.callback, timer.args
        timer.callback, timer.args, timer._heap = None, (), None  # ran: cancel is a no-op
        assert callback is not None
        return callback, args

    def cancelled(self) -> None:
        self._cancelled += 1
        if self._cancelled >= _COMPACT_MIN_CANCELLED and 2 * self._cancelled > len(self._heap):
            self._heap = [timer for timer in self._heap if timer.callback is not None]
            heapq.heapify(self._heap)
            self._cancelled = 0
