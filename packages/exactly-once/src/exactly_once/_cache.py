"""An optional in-process cache of completed keys: a repeat answered without the store.

Completion is final: once the store has said a key was processed (or was a duplicate) with a
request hash, the same key with the same hash is a duplicate for as long as the store keeps
its record. So the cache remembers (scope, key) -> request hash for completed messages and
answers an exact repeat at once; anything else (a new key, another hash: a possible mismatch)
goes to the store, which judges it as it always does. Its one risk is a record the store has
forgotten (its ttl ended) while the cache still holds the key: a key learned just before its
record expired is answered `duplicate` for up to `ttl_seconds` more, where the store would run
the effect again. So keep `ttl_seconds` short; the consumer refuses one that is not below the
records' ttl.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_MAX_ITEMS = 1024
DEFAULT_TTL_SECONDS = 300.0


@dataclass(frozen=True)
class _Completed:
    request_hash: str
    remembered_at: float


class LocalCache:
    """Completed keys of this process, at most `max_items` (the least recently used go first)
    and each for `ttl_seconds` after it was remembered. Not shared between processes: a repeat
    that reaches another process asks the store there."""

    def __init__(
        self,
        *,
        max_items: int = DEFAULT_MAX_ITEMS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        if not ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be positive, not {ttl_seconds}")
        self.max_items = max_items
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._completed: OrderedDict[tuple[str, str], _Completed] = OrderedDict()

    def __len__(self) -> int:
        return len(self._completed)

    def completed(self, scope: str, key: str, request_hash: str) -> bool:
        """Whether `key` in `scope` completed with `request_hash` within the ttl: then a repeat
        is a duplicate. False for an unknown key, an expired one, or another hash (which the
        store must judge: it may be a mismatch)."""
        found = self._completed.get((scope, key))
        if found is None:
            return False
        if self._clock() - found.remembered_at >= self.ttl_seconds:
            del self._completed[(scope, key)]
            return False
        self._completed.move_to_end((scope, key))
        return found.request_hash == request_hash

    def remember(self, scope: str, key: str, request_hash: str) -> None:
        """Record that `key` in `scope` completed with `request_hash` (the store said so)."""
        self._completed[(scope, key)] = _Completed(request_hash, self._clock())
        self._completed.move_to_end((scope, key))
        while len(self._completed) > self.max_items:
            self._completed.popitem(last=False)
