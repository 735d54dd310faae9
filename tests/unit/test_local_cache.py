"""The in-process cache of completed keys (`exactly_once._cache.LocalCache`), on a clock the test
moves: bounded in size (the least recently used go first) and in time, scoped, and answering
only an exact repeat (another hash is for the store to judge). tests/core/test_request_counts.py
counts what it saves on the wire."""

from __future__ import annotations

import pytest

from exactly_once import LocalCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_completed_key_answers_its_exact_repeat_only() -> None:
    cache = LocalCache(clock=Clock())
    cache.remember("invoicing", "i-1", "hash-a")

    assert cache.completed("invoicing", "i-1", "hash-a")
    assert not cache.completed("invoicing", "i-1", "hash-b")  # a possible mismatch
    assert not cache.completed("auditing", "i-1", "hash-a")  # another consumer's key
    assert not cache.completed("invoicing", "i-2", "hash-a")


def test_a_key_is_forgotten_when_its_ttl_ends() -> None:
    clock = Clock()
    cache = LocalCache(ttl_seconds=60, clock=clock)
    cache.remember("c", "k", "h")

    clock.now += 59.9
    assert cache.completed("c", "k", "h")
    clock.now += 0.1
    assert not cache.completed("c", "k", "h")
    assert len(cache) == 0


def test_the_least_recently_used_key_goes_first_when_full() -> None:
    cache = LocalCache(max_items=2, clock=Clock())
    cache.remember("c", "old", "h")
    cache.remember("c", "used", "h")
    assert cache.completed("c", "old", "h")  # now the most recently used

    cache.remember("c", "new", "h")

    assert len(cache) == 2
    assert cache.completed("c", "old", "h") and cache.completed("c", "new", "h")
    assert not cache.completed("c", "used", "h")


@pytest.mark.parametrize(
    ("options", "message"),
    [({"max_items": 0}, "max_items"), ({"ttl_seconds": 0}, "ttl_seconds")],
)
def test_a_cache_without_room_or_time_is_refused(options: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalCache(**options)  # type: ignore[arg-type]
