"""Partition key ranges: how a container's effective-partition-key (EPK) space is split.

A Cosmos container lives on one or more physical partitions, each serving one range of the
EPK space (`/pkranges`: ids "0", "1", ..., `minInclusive` / `maxExclusive` hex bounds). The
SDKs read those ranges and route by them: a query fans out with
`x-ms-documentdb-partitionkeyrangeid`, the change feed and `read_feed_ranges()` go per range,
and session tokens are kept per range. The emulator gives a new container `count` ranges that
split the hash-V2 space into equal parts: Cosmos does not document where it puts a new
container's bounds, and the SDKs route by whatever contiguous bounds `/pkranges` lists.
"""

from __future__ import annotations

import bisect
import math

from .epk import effective_partition_key

# Hash-V2 EPKs are 128-bit hashes with the top two bits cleared (epk.py), so the space holds
# [00..., 3F...F]; the last range runs to the exclusive maximum "FF" as Cosmos names it.
_EPK_SPACE = 1 << 126
MIN_EPK = ""
MAX_EPK = "FF"
PARTITION_RANGES_ENV = "COSMOS_EMULATOR_PARTITION_RANGES"
MAX_PARTITION_RANGES = 100  # plenty for a test; each range adds an index to every write
RU_PER_PHYSICAL_PARTITION = 10_000  # Cosmos's documented maximum RU/s per physical partition


def checked_range_count(value: object) -> int:
    """A range count from an option or the environment; ValueError naming the bounds."""
    try:
        count = int(str(value).strip())
    except ValueError:
        raise ValueError(f"partition ranges must be an integer, got {value!r:.40}") from None
    if not 1 <= count <= MAX_PARTITION_RANGES:
        raise ValueError(f"partition ranges must be from 1 to {MAX_PARTITION_RANGES}, got {count}")
    return count


def ranges_for_throughput(throughput: int | None) -> int:
    """The physical partitions dedicated `throughput` needs: one per 10,000 RU/s (at least 1)."""
    if not throughput or throughput <= RU_PER_PHYSICAL_PARTITION:
        return 1
    return min(math.ceil(throughput / RU_PER_PHYSICAL_PARTITION), MAX_PARTITION_RANGES)


def range_bounds(count: int) -> list[str]:
    """The `count + 1` boundaries of `count` equal ranges: "", inner bounds in hex, "FF"."""
    inner = [f"{_EPK_SPACE * i // count:032X}" for i in range(1, count)]
    return [MIN_EPK, *inner, MAX_EPK]


class RangeMap:
    """Which range holds which partition key value, for one container."""

    def __init__(self, count: int, kind: str, hashed: bool) -> None:
        self.count = count
        self.bounds = range_bounds(count)
        self._kind = kind
        # Hash V1 containers have no EPKs here (epk.py computes V2): they keep one range.
        self._hashed = hashed and count > 1

    def ids(self) -> list[str]:
        return [str(i) for i in range(self.count)]

    def index_of_epk(self, epk: str) -> int:
        # bisect on the inner bounds: an EPK equal to a bound opens the next range
        return bisect.bisect_right(self.bounds, epk, 1, self.count) - 1

    def index_of_key(self, values: list[object]) -> int:
        """The range of a full partition key value (its EPK decides)."""
        if not self._hashed:
            return 0
        try:
            return self.index_of_epk(effective_partition_key(values, self._kind))
        except ValueError:  # no key a request could name: kept with the first range
            return 0

    def index_of_id(self, range_id: str) -> int | None:
        """The index of a range id as the SDK sends it; None when no such range exists."""
        if range_id.isascii() and range_id.isdigit() and int(range_id) < self.count:
            return int(range_id)
        return None

    def overlapping(self, start: str, end: str) -> list[int]:
        """The ranges that share some EPK with [start, end) (end "" or "FF": the maximum)."""
        end = MAX_EPK if end in ("", MAX_EPK) else end
        lows, highs = self.bounds[:-1], self.bounds[1:]
        return [
            i
            for i, (low, high) in enumerate(zip(lows, highs, strict=True))
            if low < end and (high == MAX_EPK or start < high)
        ]
