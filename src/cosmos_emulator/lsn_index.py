"""Live item versions by LSN, so a change feed page costs O(page) and not O(container).

Every write gives its item the next LSN of the account, so new keys always arrive above every
key already present, while removals (a replaced, deleted or expired version) hit anywhere. That
shape needs no general sorted map: keys go into buckets of `BUCKET_SPAN` consecutive LSNs, a
bucket is a plain dict, and only the (small) list of non-empty bucket numbers is kept sorted.
Adding and removing cost O(1) (plus O(buckets) list surgery when a bucket appears out of order
or empties); listing the keys above an LSN costs O(log buckets + BUCKET_SPAN + what is listed),
because every bucket visited after the first holds at least one key that is listed. The package
needs only the standard library, which is why this is not `sortedcontainers.SortedDict`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Generic, TypeVar

BUCKET_BITS = 8
BUCKET_SPAN = 1 << BUCKET_BITS

V = TypeVar("V")


class LsnIndex(Generic[V]):
    def __init__(self) -> None:
        self._buckets: dict[int, dict[int, V]] = {}
        self._bucket_ids: list[int] = []  # sorted numbers of the non-empty buckets
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, lsn: int, value: V) -> None:
        number = lsn >> BUCKET_BITS
        bucket = self._buckets.get(number)
        if bucket is None:
            bucket = self._buckets[number] = {}
            if not self._bucket_ids or number > self._bucket_ids[-1]:
                self._bucket_ids.append(number)
            else:  # a replay from a compacted journal adds keys out of order
                bisect.insort(self._bucket_ids, number)
        if lsn not in bucket:
            self._size += 1
        bucket[lsn] = value

    def discard(self, lsn: int, value: V) -> None:
        """Remove `lsn` if it still maps to `value` (a stale removal must not drop a newer one)."""
        number = lsn >> BUCKET_BITS
        bucket = self._buckets.get(number)
        if bucket is None or bucket.get(lsn) is not value:
            return
        del bucket[lsn]
        self._size -= 1
        if not bucket:
            del self._buckets[number]
            del self._bucket_ids[bisect.bisect_left(self._bucket_ids, number)]

    def after(self, lsn: int) -> Iterator[tuple[int, V]]:
        """(lsn, value) pairs with an LSN above `lsn`, in LSN order. Do not mutate meanwhile."""
        position = bisect.bisect_left(self._bucket_ids, (lsn + 1) >> BUCKET_BITS)
        while position < len(self._bucket_ids):
            bucket = self._buckets[self._bucket_ids[position]]
            for key in sorted(bucket):
                if key > lsn:
                    yield key, bucket[key]
            position += 1
