"""The change-feed processor's decisions over fakes: which leases an instance takes (its fair
share, free or ended leases first, one from an owner holding too many), a checkpoint only after
the handler returned, and a lost lease given up."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import FakeLeaseStore

from exactly_once._records import Stamp
from exactly_once.change_feed import (
    ChangeFeedProcessor,
    ChangePage,
    EpkRange,
    Lease,
    LeaseTable,
    leases_to_take,
)

NOW_MS = 1_800_000_000_000
NOW_S = NOW_MS // 1000


def lease(feed_range: str, owner: str | None, *, written_s_ago: int = 0) -> Lease:
    return Lease(feed_range, owner, 60.0, stamp=Stamp('"e"', NOW_S - written_s_ago))


def ranges(taken: list[Lease]) -> list[str]:
    return [taken_lease.feed_range for taken_lease in taken]


def test_a_lone_instance_takes_every_free_lease() -> None:
    table = LeaseTable([lease("r1", None), lease("r2", None), lease("r3", None)], NOW_MS)

    assert ranges(leases_to_take(table, "a")) == ["r1", "r2", "r3"]


def test_an_instance_takes_only_its_fair_share_of_free_leases() -> None:
    # b holds one live lease: two owners, four ranges, a share of two each.
    table = LeaseTable(
        [lease("r1", "b"), lease("r2", None), lease("r3", None), lease("r4", None)], NOW_MS
    )

    assert ranges(leases_to_take(table, "a")) == ["r2", "r3"]


def test_a_live_lease_is_left_alone_when_its_owner_holds_no_more_than_its_share() -> None:
    table = LeaseTable([lease("r1", "b"), lease("r2", "c")], NOW_MS)

    assert leases_to_take(table, "a") == []  # a share of one each: b and c hold theirs


def test_an_ended_lease_is_taken_by_the_database_clock_alone() -> None:
    """Live while the database's time is within leaseSeconds of the end of its `_ts` second."""
    within = LeaseTable([lease("r1", "b", written_s_ago=60)], NOW_MS)
    ended = LeaseTable([lease("r1", "b", written_s_ago=61)], NOW_MS)

    assert leases_to_take(within, "a") == []
    assert ranges(leases_to_take(ended, "a")) == ["r1"]


def test_one_lease_is_taken_from_an_owner_holding_more_than_its_share() -> None:
    table = LeaseTable([lease(f"r{n}", "b") for n in range(4)], NOW_MS)

    taken = leases_to_take(table, "a")

    assert len(taken) == 1 and taken[0].owner == "b"  # one at a time, never all at once


def test_an_instance_at_its_share_takes_nothing() -> None:
    table = LeaseTable([lease("r1", "a"), lease("r2", None), lease("r3", "b")], NOW_MS)

    # Two owners, three ranges: a share of two. a holds one: it takes the free one...
    assert ranges(leases_to_take(table, "a")) == ["r2"]
    table = LeaseTable([lease("r1", "a"), lease("r2", "a"), lease("r3", "b")], NOW_MS)
    # ... and once it holds two, nothing more (b keeps its one).
    assert leases_to_take(table, "a") == []
    assert leases_to_take(table, "b") == []


# Four feed ranges, a quarter of the key space each (the processor names ranges by their keys).
R1, R2, R3, R4 = (
    EpkRange(low, high).text
    for low, high in zip(["", "40", "80", "C0"], ["40", "80", "C0", "FF"], strict=True)
)

ALL = EpkRange("", "FF").text


class PagesFeed:
    """One feed range over a list; the continuation is an index into it."""

    def __init__(self, *feed_ranges: str) -> None:
        self.ranges = list(feed_ranges)
        self.changes: list[dict[str, Any]] = []

    async def feed_ranges(self) -> list[str]:
        return self.ranges

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        start = int(continuation or 0)
        page = self.changes[start : start + max_items]
        return ChangePage(page, str(start + len(page)))


def processor(
    feed: PagesFeed, leases: FakeLeaseStore, owner: str, handled: list[str], **options: Any
) -> ChangeFeedProcessor:
    async def handle(changes: list[dict[str, Any]]) -> None:
        if any(change.get("poison") for change in changes):
            raise RuntimeError("handler failed")
        handled.extend(change["id"] for change in changes)

    return ChangeFeedProcessor(feed, leases, handle, owner=owner, **options)


async def test_two_instances_split_the_ranges_evenly_by_asking_not_taking() -> None:
    feed, leases = PagesFeed(R1, R2, R3, R4), FakeLeaseStore()
    first = processor(feed, leases, "a", [])
    second = processor(feed, leases, "b", [])

    await first.balance()  # alone: it takes all four
    for _ in range(2):  # one lease at a time
        assert await second.balance() == []  # a's leases are live: b asks for one
        await first.run_once()  # a hands it over between two pages
        assert len(await second.balance()) == 1  # and b takes it, free
    await first.balance()  # a takes nothing back

    owners = [str(stored.owner) for stored in leases.leases.values()]
    assert sorted(owners) == ["a", "a", "b", "b"]
    assert sorted(first.held_ranges() + second.held_ranges()) == sorted([R1, R2, R3, R4])
    assert (first.stats.leases_handed_over, first.stats.leases_lost) == (2, 0)


async def test_a_lease_asked_for_mid_page_is_checkpointed_then_handed_over() -> None:
    """The asker's write moves the lease's ETag under a page in its handler: the owner's
    checkpoint finds the lease still its own and writes again, then releases it; the asker
    resumes after that page, which nobody handles twice."""
    feed, leases = PagesFeed(R1, R2), FakeLeaseStore()
    feed.changes = [{"id": "1"}, {"id": "2"}]
    handled: dict[str, list[str]] = {"a": [], "b": []}
    asker = processor(feed, leases, "b", handled["b"])

    async def ask_while_handling(changes: list[dict[str, Any]]) -> None:
        handled["a"].extend(change["id"] for change in changes)
        assert await asker.balance() == []  # b asks for R1 while a is in its handler

    owner = ChangeFeedProcessor(feed, leases, ask_while_handling, owner="a", page_size=1)
    await owner.balance()  # a holds R1 and R2: more than its share once b is there
    await owner.process_page(R1)  # "1", and its checkpoint written on the asked-for lease
    assert (leases.leases[R1].requested_by, leases.leases[R1].continuation) == ("b", "1")
    await owner.process_page(R1)  # no page: the lease handed over
    assert await asker.balance() == [R1]
    await asker.process_page(R1)

    assert handled == {"a": ["1"], "b": ["2"]}
    assert (owner.stats.leases_lost, owner.held_ranges()) == (0, [R2])
    assert (leases.leases[R1].owner, leases.leases[R1].requested_by) == ("b", None)


async def test_the_checkpoint_moves_only_after_the_handler_returns() -> None:
    feed, leases, handled = PagesFeed(ALL), FakeLeaseStore(), list[str]()
    feed.changes = [{"id": "1"}, {"id": "2", "poison": True}]
    instance = processor(feed, leases, "a", handled, page_size=1)

    await instance.run_once()  # "1" handled and checkpointed
    with pytest.raises(RuntimeError):
        await instance.run_once()  # "2" fails: the checkpoint stays after "1"
    assert leases.leases[ALL].continuation == "1"
    feed.changes[1] = {"id": "2"}
    await instance.run_once()

    assert handled == ["1", "2"]
    assert leases.leases[ALL].continuation == "2"


async def test_a_lease_taken_over_is_given_up_by_its_old_holder() -> None:
    feed, leases = PagesFeed(ALL), FakeLeaseStore()
    feed.changes = [{"id": "1"}]
    old_handled: list[str] = []
    old = processor(feed, leases, "a", old_handled, lease_seconds=10, renew_seconds=3)
    await old.run_once()
    leases.database_now_ms += 12_000  # a stopped renewing (paused, cut off): its lease ends
    new_handled: list[str] = []
    feed.changes.append({"id": "2"})
    await processor(feed, leases, "b", new_handled).run_once()

    await old.renew(ALL)  # a wakes up: its renewal finds the ETag moved

    assert old.held_ranges() == [] and old.stats.leases_lost == 1
    assert (old_handled, new_handled) == (["1"], ["2"])  # b resumed from a's checkpoint
    assert leases.leases[ALL].owner == "b"


async def test_a_lease_asked_for_is_left_to_its_asker_by_a_second_one() -> None:
    """Two newcomers want the same lease of the richest owner (its first): the second leaves
    it to the first asker rather than ask in its stead, which would move its ETag under the
    owner's checkpoint each round; it asks once the lease has changed hands."""
    feed, leases = PagesFeed(R1, R2), FakeLeaseStore()
    owner = processor(feed, leases, "a", [])
    await owner.balance()  # a holds R1 and R2
    first, second = processor(feed, leases, "b", []), processor(feed, leases, "c", [])

    assert await first.balance() == []  # b asks a for R1
    asked = leases.leases[R1]
    assert await second.balance() == []  # c leaves R1 to b: not written
    assert leases.leases[R1] == asked and asked.requested_by == "b"
    await owner.run_once()  # a hands R1 over to b
    assert await first.balance() == [R1]


class AskedBetweenReadAndWrite(FakeLeaseStore):
    """Two instances asking for the same lease in turn, as two newcomers do (the load balancer
    names each the richest owner's first lease): while armed, each read of the table is
    followed by the other asker's request, before the reader's next write."""

    def __init__(self) -> None:
        super().__init__()
        self.askers: list[str] = []  # in turn, one per read
        self.asked = 0

    async def read_all(self) -> LeaseTable:
        table = await super().read_all()
        if self.askers:
            asker = self.askers.pop(0)
            stored = self.leases[R1]
            await self.request(stored, asker)
            self.asked += 1
        return table


async def test_a_checkpoint_outlasts_two_instances_asking_for_the_lease_in_turn() -> None:
    """Asking for a lease moves its ETag without taking it: however often askers move it
    between the owner's re-read and its write, the owner's checkpoint lands (the lease is
    still its own), nothing is given up as lost and no page is handled twice."""
    feed, leases = PagesFeed(R1, R2), AskedBetweenReadAndWrite()
    feed.changes = [{"id": "1"}, {"id": "2"}, {"id": "3"}]
    handled: list[str] = []

    async def asked_in_turn(changes: list[dict[str, Any]]) -> None:
        handled.extend(change["id"] for change in changes)
        await leases.request(leases.leases[R1], "b")  # b asks while a is in its handler
        leases.askers = ["c", "b", "c"]  # and c and b in turn, each after a's re-read

    owner = ChangeFeedProcessor(feed, leases, asked_in_turn, owner="a", page_size=1)
    await owner.balance()  # a holds R1 and R2
    await owner.process_page(R1)  # "1", its checkpoint through three moves of the ETag
    assert leases.asked == 3
    assert (owner.stats.leases_lost, owner.held_ranges()) == (0, [R1, R2])
    assert (leases.leases[R1].owner, leases.leases[R1].continuation) == ("a", "1")
    await owner.balance()  # nothing to take up again: it never let R1 go
    await owner.process_page(R1)  # asked for: handed over to the last asker, "2" unread
    assert (leases.leases[R1].owner, leases.leases[R1].continuation) == ("c", "1")

    assert handled == ["1"]


def test_a_renewal_slower_than_the_lease_is_refused() -> None:
    with pytest.raises(ValueError, match="renew_seconds"):
        processor(PagesFeed(ALL), FakeLeaseStore(), "a", [], lease_seconds=10, renew_seconds=10)
