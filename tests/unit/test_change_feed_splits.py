"""The change-feed processor when feed ranges split and merge, over fakes: leases never overlap
(the bootstrapper fills gaps, by effective partition key), a split's children start from the
parent's continuation and the parent's lease goes, a crash in the middle of it neither loses
nor replays a change, a merge keeps the leases as they are, a continuation of another range is
never written as a checkpoint, and an instance whose renewals fail stops handling its range
before its lease ends. Against Cosmos DB's own token format: `narrowed` and
`continuation_range`, with hostile tokens."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from fakes import FakeLeaseStore

from exactly_once.change_feed import (
    ChangeFeedProcessor,
    ChangePage,
    EpkRange,
    ForeignContinuationError,
    Lease,
)
from exactly_once.cosmos_change_feed import continuation_range, narrowed
from exactly_once.exceptions import TransientStoreError

ALL = EpkRange("", "FF")
LOW, HIGH = EpkRange("", "80"), EpkRange("80", "FF")


@dataclass(frozen=True)
class Write:
    lsn: int
    key: str  # the change's effective partition key
    id: str


class SplittingFeed:
    """A container's change feed by effective partition key, whose physical ranges the test
    splits and merges. The LSN is the container's (as Cosmos's children keep their parent's),
    and a continuation is `{"range": ..., "lsn": ...}`: a parent's continuation reads a child's
    part of it from the same LSN, as the port says."""

    def __init__(self, *physical: EpkRange) -> None:
        self.physical = list(physical)
        self.writes: list[Write] = []
        self.foreign: EpkRange | None = None  # answer continuations of this range instead

    def write(self, key: str, change_id: str) -> None:
        self.writes.append(Write(len(self.writes) + 1, key, change_id))

    async def feed_ranges(self) -> list[str]:
        return [piece.text for piece in self.physical]

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        keys = EpkRange.parse(feed_range)
        after = 0
        if continuation is not None:
            position = json.loads(continuation)
            assert EpkRange.parse(position["range"]).contains(keys), "read under another range"
            after = position["lsn"]
        page = [w for w in self.writes if w.lsn > after and keys.min <= w.key < keys.max]
        page = page[:max_items]
        last = page[-1].lsn if page else max([after, *(w.lsn for w in self.writes)])
        answered = (self.foreign or keys).text
        return ChangePage(
            [{"id": w.id} for w in page],
            json.dumps({"range": answered, "lsn": last}),
            answered,
        )


class Handled:
    """What each instance handled, in order."""

    def __init__(self) -> None:
        self.by_owner: dict[str, list[str]] = {}

    def handler(self, owner: str) -> Any:
        async def handle(changes: list[dict[str, Any]]) -> None:
            self.by_owner.setdefault(owner, []).extend(change["id"] for change in changes)

        return handle

    def all(self) -> list[str]:
        return [change for changes in self.by_owner.values() for change in changes]


def instance(
    feed: SplittingFeed, leases: FakeLeaseStore, owner: str, handled: Handled, **options: Any
) -> ChangeFeedProcessor:
    return ChangeFeedProcessor(
        feed, leases, handled.handler(owner), owner=owner, page_size=100, **options
    )


def ranges_of(leases: FakeLeaseStore) -> list[EpkRange]:
    return sorted((lease.keys for lease in leases.leases.values()), key=lambda keys: keys.min)


async def test_the_bootstrapper_fills_gaps_and_never_covers_a_range_twice() -> None:
    """A lease over [00, 80) stored under its own JSON (keys in another order): the physical
    ranges [00, 40), [40, 80), [80, FF) get one new lease, for the gap alone."""
    feed = SplittingFeed(EpkRange("", "40"), EpkRange("40", "80"), HIGH)
    leases = FakeLeaseStore()
    other_spelling = json.dumps({"Range": {"min": "", "max": "80", "isMinInclusive": True}})
    await leases.create(other_spelling, 60.0, '{"range": "x", "lsn": 7}')

    await instance(feed, leases, "a", Handled()).bootstrap()
    await instance(feed, leases, "b", Handled()).bootstrap()  # a second bootstrap: no change

    assert ranges_of(leases) == [LOW, HIGH]
    assert leases.leases[other_spelling].continuation == '{"range": "x", "lsn": 7}'
    assert leases.leases[HIGH.text].continuation is None  # a gap is read from the beginning


async def test_a_split_hands_the_parents_position_to_its_children_and_removes_the_parent() -> None:
    feed, leases, handled = SplittingFeed(ALL), FakeLeaseStore(), Handled()
    for n, key in enumerate(["10", "90", "20", "A0"]):
        feed.write(key, f"before-{n}")
    first = instance(feed, leases, "a", handled)
    await first.run_once()  # all four handled and checkpointed under [00, FF)
    parent = leases.leases[ALL.text]

    feed.physical = [LOW, HIGH]  # the partition splits
    feed.write("30", "after-low")
    feed.write("B0", "after-high")
    await first.run_once()  # the holder hands the range over: no page read under the parent

    assert ranges_of(leases) == [LOW, HIGH]
    assert {leases.leases[r.text].continuation for r in (LOW, HIGH)} == {parent.continuation}
    assert first.held_ranges() == [] and first.stats.leases_split == 1
    second = instance(feed, leases, "b", handled)
    for _ in range(3):
        await first.run_once()
        await second.run_once()

    assert sorted(handled.all()) == sorted(
        [f"before-{n}" for n in range(4)] + ["after-low", "after-high"]
    )
    assert len(handled.all()) == 6  # none handled twice, nothing from before the split again


class CrashingLeaseStore(FakeLeaseStore):
    """A lease store whose process dies (an exception out of the processor) at a chosen
    write: the writes before it are stored, nothing after it is done."""

    def __init__(self) -> None:
        super().__init__()
        self.crash_at: str | None = None  # "delete", or "create:<n>" (the n-th create from now)
        self.creates = 0

    async def create(
        self, feed_range: str, lease_seconds: float, continuation: str | None = None
    ) -> None:
        self.creates += 1
        if self.crash_at == f"create:{self.creates}":
            raise SystemExit("killed before this lease was created")
        await super().create(feed_range, lease_seconds, continuation)

    async def delete(self, lease: Lease) -> None:
        if self.crash_at == "delete":
            raise SystemExit("killed before the parent was deleted")
        await super().delete(lease)


async def split_with_a_crash(crash_at: str) -> tuple[SplittingFeed, CrashingLeaseStore, Handled]:
    """[00, FF) handled up to `before-*`, split, and the holder killed at `crash_at`."""
    feed, leases, handled = SplittingFeed(ALL), CrashingLeaseStore(), Handled()
    feed.write("10", "before-low")
    feed.write("90", "before-high")
    doomed = instance(feed, leases, "a", handled, lease_seconds=10, renew_seconds=3)
    await doomed.run_once()
    feed.physical = [LOW, HIGH]
    feed.write("20", "after-low")
    feed.write("A0", "after-high")
    leases.crash_at, leases.creates = crash_at, 0
    with pytest.raises(SystemExit):
        await doomed.run_once()
    leases.crash_at = None
    return feed, leases, handled


async def test_a_crash_between_the_children_and_the_parents_deletion_replays_nothing() -> None:
    feed, leases, handled = await split_with_a_crash("delete")
    assert ranges_of(leases) == [ALL, LOW, HIGH]  # the children exist beside their parent

    restarted = instance(feed, leases, "b", handled)  # the parent is still live: a's
    for _ in range(3):
        await restarted.run_once()

    assert ranges_of(leases) == [LOW, HIGH]  # the tiled parent deleted, not read
    assert sorted(handled.all()) == ["after-high", "after-low", "before-high", "before-low"]


async def test_a_crash_halfway_through_the_children_is_finished_by_the_next_holder() -> None:
    feed, leases, handled = await split_with_a_crash("create:2")
    assert ranges_of(leases) == [ALL, LOW]  # the second child was never created

    leases.database_now_ms += 12_000  # a's lease on the parent ends
    restarted = instance(feed, leases, "b", handled)
    for _ in range(3):
        await restarted.run_once()

    assert ranges_of(leases) == [LOW, HIGH]
    assert restarted.stats.leases_split == 1
    assert sorted(handled.all()) == ["after-high", "after-low", "before-high", "before-low"]


async def test_a_merge_keeps_each_lease_its_range_and_its_continuation() -> None:
    feed, leases, handled = SplittingFeed(LOW, HIGH), FakeLeaseStore(), Handled()
    feed.write("10", "one")
    feed.write("90", "two")
    processor = instance(feed, leases, "a", handled)
    await processor.run_once()
    before = {r: leases.leases[r.text].continuation for r in (LOW, HIGH)}

    feed.physical = [ALL]  # the two partitions merge
    feed.write("20", "three")
    feed.write("A0", "four")
    await processor.run_once()

    assert ranges_of(leases) == [LOW, HIGH]  # no lease for the merged range, none deleted
    assert processor.stats.leases_split == 0
    assert handled.all().count("one") == 1 and sorted(handled.all()) == [
        "four",
        "one",
        "three",
        "two",
    ]
    assert all(leases.leases[r.text].continuation != before[r] for r in (LOW, HIGH))


async def test_a_continuation_of_another_range_is_never_written_as_the_checkpoint() -> None:
    feed, leases, handled = SplittingFeed(LOW, HIGH), FakeLeaseStore(), Handled()
    feed.write("10", "one")
    feed.foreign = HIGH  # the feed answers [80, FF)'s position for every read
    processor = instance(feed, leases, "a", handled)
    await processor.balance()

    with pytest.raises(ForeignContinuationError, match="not written as its checkpoint"):
        await processor.process_page(LOW.text)

    assert handled.all() == []  # not handled under the wrong lease either
    assert leases.leases[LOW.text].continuation is None


class ThrottledRenewals(FakeLeaseStore):
    """Every renewal refused as a throttled store refuses it (a 429 past the SDK's retries),
    once `throttled`; and when the last write that succeeded was made (our monotonic clock)."""

    throttled = False
    last_written = 0.0

    async def renew(self, lease: Lease) -> Lease:
        if self.throttled:
            raise TransientStoreError("429: request rate is large")
        return await super().renew(lease)

    def _write(self, lease: Lease) -> Lease:
        self.last_written = time.monotonic()
        return super()._write(lease)


async def test_an_instance_whose_renewals_fail_stops_before_its_lease_could_end() -> None:
    """Its handler is cancelled and the range given up `lease_seconds - stop_margin_seconds`
    after its last successful write was sent: before the lease could end, by a clock that
    runs as ours does, whoever would take it next."""
    feed, leases = SplittingFeed(ALL), ThrottledRenewals()
    feed.write("10", "slow")
    started, cancelled = asyncio.Event(), asyncio.Event()
    given_up = 0.0

    async def never_done(changes: list[dict[str, Any]]) -> None:
        nonlocal given_up
        started.set()
        try:
            await asyncio.Event().wait()  # a handler stuck on a downstream call
        except asyncio.CancelledError:
            given_up = time.monotonic()
            cancelled.set()
            raise

    processor = ChangeFeedProcessor(
        feed,
        leases,
        never_done,
        owner="a",
        lease_seconds=1.5,
        renew_seconds=0.3,
        acquire_seconds=0.05,
        poll_seconds=0.05,
        stop_margin_seconds=0.4,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(processor.run(stop))
    await asyncio.wait_for(started.wait(), 5)
    leases.throttled = True
    await asyncio.wait_for(cancelled.wait(), 5)
    stop.set()
    await running

    assert processor.held_ranges() == [] and processor.stats.leases_stopped == 1
    assert given_up < leases.last_written + 1.5  # the lease could not have ended yet
    assert leases.leases[ALL.text].owner == "a"  # never released by us: it ends by itself


def sdk_token(positions: list[tuple[str, EpkRange]], resumes: EpkRange) -> str:
    """A continuation token as azure-cosmos 4.x writes it (see its ChangeFeedStateV2)."""

    def bounds(keys: EpkRange) -> dict[str, Any]:
        return {"min": keys.min, "max": keys.max, "isMinInclusive": True, "isMaxInclusive": False}

    token = {
        "v": "v2",
        "containerRid": "AQAAAAAAAAI=",
        "mode": "LatestVersion",
        "startFrom": {"Type": "Beginning"},
        "continuation": {
            "v": "v2",
            "rid": "AQAAAAAAAAI=",
            "continuation": [{"token": etag, "range": bounds(keys)} for etag, keys in positions],
            "Range": bounds(resumes),
        },
    }
    return base64.b64encode(json.dumps(token).encode()).decode()


def positions_of(continuation: str) -> list[tuple[str, EpkRange]]:
    token = json.loads(base64.b64decode(continuation))
    return [
        (part["token"], EpkRange(part["range"]["min"], part["range"]["max"]))
        for part in token["continuation"]["continuation"]
    ]


def test_a_parents_token_narrowed_to_a_child_keeps_the_childs_positions_only() -> None:
    # The SDK already split the parent's token in two ([00, 80) at "5", [80, FF) at "9").
    parent = sdk_token([('"5"', LOW), ('"9"', HIGH)], ALL)
    quarter = EpkRange("40", "80")

    child = narrowed(parent, quarter)

    assert continuation_range(child) == quarter
    assert positions_of(child) == [('"5"', quarter)]
    assert narrowed(child, quarter) == child  # a range's own token is left as it is
    assert positions_of(narrowed(sdk_token([('"7"', ALL)], ALL), HIGH)) == [('"7"', HIGH)]


@pytest.mark.parametrize(
    "continuation",
    [
        '"42"',  # an ETag alone: the SDK's v1 token names no range
        "not base64 at all!",
        base64.b64encode(b"[1, 2]").decode(),
        base64.b64encode(b'{"continuation": {"continuation": "x"}}').decode(),
        base64.b64encode(b'{"continuation": {"continuation": [], "Range": {"min": 1}}}').decode(),
        base64.b64encode(
            b'{"continuation": {"continuation": [], "Range": {"min": "FF", "max": ""}}}'
        ).decode(),
        base64.b64encode(b"\xff\xfe").decode(),
    ],
)
def test_a_token_that_names_no_feed_range_is_refused(continuation: str) -> None:
    with pytest.raises(ForeignContinuationError):
        continuation_range(continuation)
    with pytest.raises(ForeignContinuationError):
        narrowed(continuation, ALL)


def test_a_parents_token_with_a_malformed_position_is_refused() -> None:
    token = json.loads(base64.b64decode(sdk_token([('"5"', ALL)], ALL)))
    token["continuation"]["continuation"] = [{"token": '"5"', "range": "everything"}]
    malformed = base64.b64encode(json.dumps(token).encode()).decode()

    with pytest.raises(ForeignContinuationError, match="position"):
        narrowed(malformed, LOW)


def test_a_token_is_never_narrowed_to_a_range_it_does_not_contain() -> None:
    with pytest.raises(ForeignContinuationError, match="cannot read"):
        narrowed(sdk_token([('"5"', LOW)], LOW), HIGH)
