"""Partition key ranges: how a container's effective-partition-key (EPK) space is split.

A Cosmos container lives on one or more physical partitions, each serving one range of the
EPK space (`/pkranges`: ids "0", "1", ..., `minInclusive` / `maxExclusive` hex bounds). The
SDKs read those ranges and route by them: a query fans out with
`x-ms-documentdb-partitionkeyrangeid`, the change feed and `read_feed_ranges()` go per range,
and session tokens are kept per range. The emulator gives a new container `count` ranges that
split the hash-V2 space into equal parts: Cosmos does not document where it puts a new
container's bounds, and the SDKs route by whatever contiguous bounds `/pkranges` lists.

Ranges split and merge as Cosmos's do: a split replaces a range by two children (new ids,
never reused, each listing its ancestors in `parents`), a merge replaces two adjacent ranges by
one; the ids they replace are gone for good, and a request naming one is answered 410 Gone
(gone_substatus). Every change is one more `generation`: the ETag of the `/pkranges` feed,
which lists the ranges made since a generation the client names.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Any

from .epk import effective_partition_key

# Hash-V2 EPKs are 128-bit hashes with the top two bits cleared (epk.py), so the space holds
# [00..., 3F...F]; the last range runs to the exclusive maximum "FF" as Cosmos names it.
_EPK_SPACE = 1 << 126
MIN_EPK = ""
MAX_EPK = "FF"
PARTITION_RANGES_ENV = "COSMOS_EMULATOR_PARTITION_RANGES"
MAX_PARTITION_RANGES = 100  # plenty for a test; each range adds an index to every write
RU_PER_PHYSICAL_PARTITION = 10_000  # Cosmos's documented maximum RU/s per physical partition
# Substatus codes of a 410 Gone naming a range that no longer exists (Cosmos's, as the SDKs
# name them: `SubStatusCodes.PartitionKeyRangeGone`, `CompletingSplit`).
PARTITION_KEY_RANGE_GONE = 1002
COMPLETING_SPLIT_OR_MERGE = 1007


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


def _bound_value(bound: str) -> int:
    """A range bound as a number: "" is 0, "FF" the end of the space, else its first 128 bits."""
    if bound == MIN_EPK:
        return 0
    if bound == MAX_EPK:
        return _EPK_SPACE
    return int(bound[:32].ljust(32, "0"), 16)


def range_width(key_range: KeyRange) -> int:
    return _bound_value(key_range.max) - _bound_value(key_range.min)


@dataclass(frozen=True)
class KeyRange:
    """One partition key range: its id, EPK bounds and the ids of every range it came from."""

    id: str
    min: str
    max: str
    parents: tuple[str, ...] = ()
    generation: int = 0  # the range map's generation that made it

    def to_record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "min": self.min,
            "max": self.max,
            "parents": list(self.parents),
            "g": self.generation,
        }


class RangeError(ValueError):
    """A split or merge that cannot be made (an unknown or gone range, ranges not adjacent)."""


class RangeMap:
    """Which range holds which partition key value, for one container; splits and merges."""

    def __init__(self, count: int, kind: str, hashed: bool) -> None:
        bounds = range_bounds(count)
        self.live: list[KeyRange] = [
            KeyRange(str(i), bounds[i], bounds[i + 1]) for i in range(count)
        ]
        self.gone: dict[str, int] = {}  # range id -> the substatus a request naming it gets
        self.next_id = count
        self.generation = 0
        self._kind = kind
        # Hash V1 containers have no EPKs here (epk.py computes V2): they keep one range.
        self.hashed = hashed
        self._reindex()

    def _reindex(self) -> None:
        self.bounds = [r.min for r in self.live] + [MAX_EPK]
        self._position = {r.id: i for i, r in enumerate(self.live)}

    @property
    def count(self) -> int:
        return len(self.live)

    def ids(self) -> list[str]:
        return [r.id for r in self.live]

    def index_of_epk(self, epk: str) -> int:
        # bisect on the inner bounds: an EPK equal to a bound opens the next range
        return bisect.bisect_right(self.bounds, epk, 1, self.count) - 1

    def index_of_key(self, values: list[object]) -> int:
        """The range of a full partition key value (its EPK decides)."""
        if not self.hashed or self.count == 1:
            return 0
        try:
            return self.index_of_epk(effective_partition_key(values, self._kind))
        except ValueError:  # no key a request could name: kept with the first range
            return 0

    def index_of_id(self, range_id: str) -> int | None:
        """The index of a live range id as the SDK sends it; None when no such range lives."""
        return self._position.get(range_id)

    def gone_substatus(self, range_id: str) -> int | None:
        """The 410 substatus for a range that was split or merged away; None if never gone."""
        return self.gone.get(range_id)

    def overlapping(self, start: str, end: str) -> list[int]:
        """The ranges that share some EPK with [start, end) (end "" or "FF": the maximum)."""
        end = MAX_EPK if end in ("", MAX_EPK) else end
        lows, highs = self.bounds[:-1], self.bounds[1:]
        return [
            i
            for i, (low, high) in enumerate(zip(lows, highs, strict=True))
            if low < end and (high == MAX_EPK or start < high)
        ]

    def made_after(self, generation: int) -> list[KeyRange]:
        """The live ranges made after `generation`: what the `/pkranges` feed lists for it."""
        return [r for r in self.live if r.generation > generation]

    # -- splits and merges ------------------------------------------------------------------
    def _new_id(self) -> str:
        range_id = str(self.next_id)
        self.next_id += 1
        return range_id

    def split(self, range_id: str) -> tuple[str, str]:
        """Replace live range `range_id` by two children at its EPK midpoint; their ids."""
        index = self.live_index(range_id)
        if not self.hashed:
            raise RangeError("only hash-V2 containers have EPK ranges to split")
        if self.count >= MAX_PARTITION_RANGES:
            raise RangeError(f"a container has at most {MAX_PARTITION_RANGES} ranges here")
        parent = self.live[index]
        low, high = _bound_value(parent.min), _bound_value(parent.max)
        if high - low < 2:
            raise RangeError(f"range {range_id!r} is too narrow to split")
        middle = f"{(low + high) // 2:032X}"
        self.generation += 1
        lineage = (*parent.parents, parent.id)
        children = [
            KeyRange(self._new_id(), parent.min, middle, lineage, self.generation),
            KeyRange(self._new_id(), middle, parent.max, lineage, self.generation),
        ]
        self.live[index : index + 1] = children
        self.gone[parent.id] = PARTITION_KEY_RANGE_GONE
        self._reindex()
        return children[0].id, children[1].id

    def merge(self, first_id: str, second_id: str) -> str:
        """Replace two adjacent live ranges by one; its id."""
        first, second = self.live_index(first_id), self.live_index(second_id)
        if abs(first - second) != 1:
            raise RangeError(f"ranges {first_id!r} and {second_id!r} are not adjacent")
        low, high = sorted((first, second))
        a, b = self.live[low], self.live[high]
        self.generation += 1
        lineage = tuple(dict.fromkeys((*a.parents, a.id, *b.parents, b.id)))
        merged = KeyRange(self._new_id(), a.min, b.max, lineage, self.generation)
        self.live[low : high + 1] = [merged]
        self.gone[a.id] = self.gone[b.id] = COMPLETING_SPLIT_OR_MERGE
        self._reindex()
        return merged.id

    def live_index(self, range_id: str) -> int:
        """The index of live range `range_id`; RangeError saying why there is none."""
        index = self.index_of_id(range_id)
        if index is None:
            state = "is gone (split or merged)" if range_id in self.gone else "does not exist"
            raise RangeError(f"partition key range {range_id[:40]!r} {state}")
        return index

    # -- the journal ------------------------------------------------------------------------
    def to_record(self) -> dict[str, Any]:
        return {
            "live": [r.to_record() for r in self.live],
            "gone": dict(self.gone),
            "next": self.next_id,
            "g": self.generation,
        }

    def restore(self, record: Any) -> None:
        """Take the state `to_record` wrote; ValueError when it is not a whole, valid map."""
        if not isinstance(record, dict):
            raise ValueError("a range map must be an object")
        live = [_key_range(r) for r in record["live"]]
        gone, next_id, generation = record["gone"], record["next"], record["g"]
        if not isinstance(gone, dict) or not all(
            isinstance(k, str) and v in (PARTITION_KEY_RANGE_GONE, COMPLETING_SPLIT_OR_MERGE)
            for k, v in gone.items()
        ):
            raise ValueError("gone ranges map ids to 1002 or 1007")
        for name, value in (("next", next_id), ("g", generation)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"a range map's {name} must be a non-negative integer")
        if not 1 <= len(live) <= MAX_PARTITION_RANGES:
            raise ValueError(f"a container has 1 to {MAX_PARTITION_RANGES} ranges")
        if (
            live[0].min != MIN_EPK
            or live[-1].max != MAX_EPK
            or any(a.max != b.min for a, b in itertools.pairwise(live))
        ):
            raise ValueError("the ranges do not cover the EPK space in order")
        ids = [r.id for r in live]
        if len(set(ids)) != len(ids) or set(ids) & set(gone):
            raise ValueError("a range id is live twice or both live and gone")
        if any(not r.id.isdigit() or int(r.id) >= next_id for r in live):
            raise ValueError("a live range id is not below the next id")
        self.live, self.gone = live, dict(gone)
        self.next_id, self.generation = next_id, generation
        self._reindex()


def _key_range(raw: Any) -> KeyRange:
    if not isinstance(raw, dict):
        raise ValueError("a range must be an object")
    range_id, low, high, parents, generation = (
        raw["id"],
        raw["min"],
        raw["max"],
        raw["parents"],
        raw["g"],
    )
    if not all(isinstance(v, str) for v in (range_id, low, high)):
        raise ValueError("a range's id and bounds are strings")
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ValueError("a range's parents are a list of ids")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise ValueError("a range's generation is a non-negative integer")
    return KeyRange(range_id, low, high, tuple(parents), generation)
