"""The change-feed processor against our Cosmos DB emulator, through the real SDK.

Three instances as separate processes share the feed ranges; the one holding a lease is killed
with SIGKILL and another instance is started: every change is handled (duplicates allowed, at
least once), none skipped. The split drill: three instances under a steady write load through
a live split of a range, a SIGKILL, a merge and a restart: every change handled, only the
killed instance's last pages twice, nothing from before the split again. In-process cases: a
handler failure leaves the checkpoint where it was, a clean stop releases the leases, and an
owner whose renewals the lease container throttles (a fault rule) stops handling its range
while its lease is still live.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient, DatabaseProxy
from change_feed_instance import PAGE_SIZE
from servers import CosmosServer, stop_process

from exactly_once.change_feed import ChangeFeedProcessor, Lease
from exactly_once.cosmos_change_feed import CosmosChangeFeed, CosmosLeaseStore

INSTANCE = Path(__file__).with_name("change_feed_instance.py")
DATABASE = "change-feed"


@pytest.fixture
async def database(python_cosmos: CosmosServer) -> AsyncIterator[DatabaseProxy]:
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        yield await client.create_database_if_not_exists(DATABASE)


async def new_container(database: DatabaseProxy, prefix: str, path: str) -> ContainerProxy:
    return await database.create_container(
        id=f"{prefix}-{uuid.uuid4().hex[:8]}", partition_key=PartitionKey(path=path)
    )


async def write_changes(container: ContainerProxy, ids: list[str]) -> None:
    for change_id in ids:
        await container.create_item({"id": change_id, "pk": change_id[-1]})


def instance_logs(folder: Path) -> str:
    return "".join(log.read_text() for log in folder.glob("*.log"))


def handled_ids(folder: Path) -> list[str]:
    return [line for out in folder.glob("*.out") for line in out.read_text().splitlines()]


def recorder(handled: dict[str, list[str]], owner: str) -> Any:
    """A handler that appends each change's id to `handled[owner]`."""

    async def handle(page: list[dict[str, Any]]) -> None:
        handled[owner] += [change["id"] for change in page]

    return handle


async def poll(condition: Any, what: str, within: float = 60.0) -> None:
    """Until `condition()` (an async callable) is true; AssertionError at the deadline."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await condition():
            return
        await asyncio.sleep(0.1)  # polling other processes' progress, bounded by the deadline
    raise AssertionError(f"not within {within} s: {what}")


class Instances:
    """Processor instances as processes, each writing the ids it handled to `<owner>.out`."""

    def __init__(self, server: CosmosServer, changes: str, leases: str, folder: Path) -> None:
        self._args = [server.endpoint, server.key, DATABASE, changes, leases]
        self.folder = folder
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, owner: str) -> None:
        out, log = self.folder / f"{owner}.out", self.folder / f"{owner}.log"
        with log.open("ab") as stderr:
            self.running[owner] = subprocess.Popen(
                [sys.executable, str(INSTANCE), *self._args, owner, str(out)],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def kill(self, owner: str) -> None:
        process = self.running.pop(owner)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def stop_all(self) -> dict[str, int | None]:
        for process in self.running.values():
            stop_process(process)
        return {owner: process.returncode for owner, process in self.running.items()}


@pytest.mark.slow
async def test_three_instances_a_sigkill_and_a_restart_handle_every_change(
    python_cosmos: CosmosServer, database: DatabaseProxy, tmp_path: Path
) -> None:
    changes = await new_container(database, "changes", "/pk")
    lease_container = await new_container(database, "leases", "/id")
    leases = CosmosLeaseStore(lease_container)
    instances = Instances(python_cosmos, changes.id, lease_container.id, tmp_path)
    first = [f"change-{n:03d}" for n in range(40)]
    await write_changes(changes, first)
    try:
        for owner in ("a", "b", "c"):
            instances.start(owner)

        async def some_handled() -> bool:
            return len(set(handled_ids(tmp_path))) >= 5

        await poll(some_handled, "an instance handles changes")
        # Kill whoever holds a lease (one range today: one of the three), mid-stream.
        holders = {lease.owner for lease in (await leases.read_all()).leases} - {None}
        assert holders, "a lease is held"
        victim = sorted(str(holder) for holder in holders)[0]
        instances.kill(victim)
        second = [f"after-kill-{n:03d}" for n in range(40)]
        await write_changes(changes, second)
        instances.start("d")  # the restart

        async def all_handled() -> bool:
            return set(first + second) <= set(handled_ids(tmp_path))

        await poll(all_handled, "every change handled after the kill")

        # When the kill landed there is one range (or more): each is held by a live instance
        # now, and the victim's was taken over by the database's clock.
        table = await leases.read_all()
        assert all(lease.owner in instances.running for lease in table.leases), table
        after_kill = {
            line
            for owner in instances.running
            for line in (tmp_path / f"{owner}.out").read_text().splitlines()
        }
        assert set(second) <= after_kill
    finally:
        codes = instances.stop_all()
    assert set(codes.values()) == {0}, codes
    # A clean stop released every lease it held.
    assert {lease.owner for lease in (await leases.read_all()).leases} == {None}
    handled = handled_ids(tmp_path)
    assert set(handled) == set(first + second)  # none skipped, nothing invented


async def test_a_failing_handler_leaves_the_checkpoint_where_it_was(
    database: DatabaseProxy,
) -> None:
    changes = await new_container(database, "changes", "/pk")
    leases = CosmosLeaseStore(await new_container(database, "leases", "/id"))
    await write_changes(changes, ["one", "two"])
    seen: list[list[str]] = []
    fail = True

    async def handler(page: list[dict[str, Any]]) -> None:
        seen.append([change["id"] for change in page])
        if fail:
            raise RuntimeError("the broker is down")

    processor = ChangeFeedProcessor(CosmosChangeFeed(changes), leases, handler, owner="p1")
    with pytest.raises(RuntimeError):
        await processor.run_once()
    [lease] = (await leases.read_all()).leases
    assert (lease.owner, lease.continuation) == ("p1", None)  # held, not moved on

    fail = False
    await processor.run_once()
    await processor.run_once()  # nothing new: the handler is not called again

    assert seen == [["one", "two"], ["one", "two"]]
    [lease] = (await leases.read_all()).leases
    assert lease.continuation is not None


async def test_a_clean_stop_releases_the_leases_and_the_next_instance_resumes(
    database: DatabaseProxy,
) -> None:
    changes = await new_container(database, "changes", "/pk")
    leases = CosmosLeaseStore(await new_container(database, "leases", "/id"))
    await write_changes(changes, ["one"])
    handled: dict[str, list[str]] = {"p1": [], "p2": []}

    stop = asyncio.Event()
    first = ChangeFeedProcessor(
        CosmosChangeFeed(changes), leases, recorder(handled, "p1"), owner="p1", poll_seconds=0.05
    )
    running = asyncio.create_task(first.run(stop))

    async def first_handled() -> bool:
        return handled["p1"] == ["one"]

    await poll(first_handled, "p1 handles the first change", within=10)
    stop.set()
    await running

    [released] = (await leases.read_all()).leases
    assert released.owner is None and released.continuation is not None
    await write_changes(changes, ["two"])
    second = ChangeFeedProcessor(
        CosmosChangeFeed(changes), leases, recorder(handled, "p2"), owner="p2"
    )
    await second.run_once()  # no waiting the lease out: it is free
    assert handled == {"p1": ["one"], "p2": ["two"]}


async def test_a_live_lease_is_left_to_its_owner_and_taken_once_it_ends(
    database: DatabaseProxy,
) -> None:
    """By the database's clock: `_ts` of the holder's last write and GetCurrentTimestamp()."""
    changes = await new_container(database, "changes", "/pk")
    leases = CosmosLeaseStore(await new_container(database, "leases", "/id"))
    await write_changes(changes, ["one"])

    async def ignore(page: list[dict[str, Any]]) -> None:
        return None

    holder = ChangeFeedProcessor(
        CosmosChangeFeed(changes), leases, ignore, owner="p1", lease_seconds=2, renew_seconds=1
    )
    await holder.run_once()
    rival = ChangeFeedProcessor(CosmosChangeFeed(changes), leases, ignore, owner="p2")
    assert await rival.balance() == []  # p1's lease is live

    async def ended() -> bool:
        table = await leases.read_all()
        return not any(lease.is_live(table.database_now_ms) for lease in table.leases)

    await poll(ended, "p1's lease ends by the database's clock", within=10)
    assert len(await rival.balance()) == 1
    [lease] = (await leases.read_all()).leases
    assert isinstance(lease, Lease) and lease.owner == "p2"


async def test_a_lease_found_taken_when_balancing_is_logged_as_lost(
    database: DatabaseProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The old holder says when it stops handling a range another instance took: the e2e
    drills wait for that line before they count publishes (tests/e2e/test_fanout.py)."""
    changes = await new_container(database, "changes", "/pk")
    leases = CosmosLeaseStore(await new_container(database, "leases", "/id"))
    await write_changes(changes, ["one"])

    async def ignore(page: list[dict[str, Any]]) -> None:
        return None

    holder = ChangeFeedProcessor(
        CosmosChangeFeed(changes), leases, ignore, owner="p1", lease_seconds=2, renew_seconds=1
    )
    await holder.run_once()
    rival = ChangeFeedProcessor(CosmosChangeFeed(changes), leases, ignore, owner="p2")

    async def taken() -> bool:
        return len(await rival.balance()) == 1

    await poll(taken, "p2 takes p1's ended lease", within=10)
    with caplog.at_level("WARNING", logger="exactly_once.change_feed"):
        assert await holder.balance() == []

    assert holder.held_ranges() == []
    [lost] = [r.getMessage() for r in caplog.records if " lost " in r.getMessage()]
    assert lost.startswith("p1 lost feed range ") and lost.endswith(" to p2")


def throttle_writes_of(server: CosmosServer, lease_id: str) -> None:
    """Every replace of the lease document `lease_id` answers 429 (past the SDK's retries)."""
    rule = {
        "status": 429,
        "count": 100_000,
        "retry_after_ms": 1,
        "operation": "Replace",
        "path_contains": f"/docs/{lease_id}",
    }
    headers = {"Authorization": f"Bearer {server.fault_token}"}
    httpx.post(f"{server.endpoint}_emulator/faults", json=rule, headers=headers).raise_for_status()


def clear_faults(server: CosmosServer) -> None:
    headers = {"Authorization": f"Bearer {server.fault_token}"}
    httpx.delete(f"{server.endpoint}_emulator/faults", headers=headers).raise_for_status()


async def test_an_owner_whose_renewals_are_throttled_stops_before_another_can_take_its_range(
    python_cosmos: CosmosServer, database: DatabaseProxy
) -> None:
    changes = await new_container(database, "changes", "/pk")
    leases = CosmosLeaseStore(await new_container(database, "leases", "/id"))
    await write_changes(changes, ["one"])
    handled: dict[str, list[str]] = {"old": [], "new": []}

    def processor(owner: str) -> ChangeFeedProcessor:
        # Stops 0.3 s (a tenth of the lease) before its lease could end.
        return ChangeFeedProcessor(
            CosmosChangeFeed(changes),
            leases,
            recorder(handled, owner),
            owner=owner,
            lease_seconds=3,
            renew_seconds=1,
            acquire_seconds=0.2,
            poll_seconds=0.1,
        )

    old, stop_old = processor("old"), asyncio.Event()
    running_old = asyncio.create_task(old.run(stop_old))

    async def checkpointed() -> bool:
        return [lease.continuation is not None for lease in (await leases.read_all()).leases] == [
            True
        ]

    await poll(checkpointed, "the old owner handles and checkpoints the first change", within=10)
    [lease] = (await leases.read_all()).leases
    throttle_writes_of(python_cosmos, leases.lease_id(lease.feed_range))
    try:

        async def old_stopped() -> bool:
            return old.stats.leases_stopped == 1

        await poll(old_stopped, "the old owner gives its range up", within=10)
        # At once: the lease is still the old owner's and live by the database's clock, so no
        # instance could have taken it yet.
        table = await leases.read_all()
        [lease] = table.leases
        assert lease.owner == "old" and lease.is_live(table.database_now_ms)
        assert old.held_ranges() == []
        await write_changes(changes, ["two"])
    finally:
        clear_faults(python_cosmos)
    stop_old.set()
    await running_old

    new, stop_new = processor("new"), asyncio.Event()
    running_new = asyncio.create_task(new.run(stop_new))

    async def taken_over() -> bool:
        return handled["new"] == ["two"]

    await poll(taken_over, "the new owner resumes from the old one's checkpoint", within=10)
    stop_new.set()
    await running_new
    assert handled["old"] == ["one"]  # nothing after it stopped


def change_ranges(server: CosmosServer, container: str, **change: Any) -> dict[str, Any]:
    """Split or merge the container's partition key ranges live (our emulator's switch)."""
    response = httpx.post(
        f"{server.endpoint}_emulator/ranges",
        json={"database": DATABASE, "container": container, **change},
        headers={"Authorization": f"Bearer {server.fault_token}"},
    )
    response.raise_for_status()
    return dict(response.json())


class SteadyWrites:
    """Writes `w-00000`, `w-00001`, ... one every `every` seconds until stopped, spread over
    the partition keys; `written` is what was acknowledged, in order."""

    def __init__(self, container: ContainerProxy, every: float = 0.02) -> None:
        self._container = container
        self._every = every
        self._stop = asyncio.Event()
        self.written: list[str] = []
        self._task = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while not self._stop.is_set():
            change_id = f"w-{len(self.written):05d}"
            await self._container.create_item({"id": change_id, "pk": f"k{len(self.written)}"})
            self.written.append(change_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._every)

    async def stop(self) -> list[str]:
        self._stop.set()
        await self._task
        return self.written


@pytest.mark.slow
async def test_three_instances_through_a_split_a_sigkill_a_merge_and_a_restart(
    python_cosmos: CosmosServer, database: DatabaseProxy, tmp_path: Path
) -> None:
    # Two physical partitions (20,000 RU/s): after the split, a range for each instance.
    changes = await database.create_container(
        id=f"changes-{uuid.uuid4().hex[:8]}",
        partition_key=PartitionKey("/pk"),
        offer_throughput=20_000,
    )
    lease_container = await new_container(database, "leases", "/id")
    leases = CosmosLeaseStore(lease_container)
    instances = Instances(python_cosmos, changes.id, lease_container.id, tmp_path)

    async def settled(count: int) -> bool:
        """`count` leases tile the key space, each held by a running instance, none asked for."""
        table = await leases.read_all()
        return tiles(table.leases, count) and all(
            lease.owner in instances.running
            and lease.is_live(table.database_now_ms)
            and lease.requested_by is None
            for lease in table.leases
        )

    try:
        for owner in ("a", "b", "c"):
            instances.start(owner)
        await poll(lambda: settled(2), "the two ranges' leases held", within=30)
        writes = SteadyWrites(changes)

        async def handled_at_least(count: int) -> bool:
            return len(set(handled_ids(tmp_path))) >= count

        await poll(lambda: handled_at_least(30), "changes handled before the split")
        ranges = change_ranges(python_cosmos, changes.id, split="0")["ranges"]
        before_split = list(writes.written)
        await poll(lambda: settled(3), "the children's leases held", within=30)

        async def all_handled(ids: list[str]) -> bool:
            return set(ids) <= set(handled_ids(tmp_path))

        await poll(lambda: all_handled(before_split), "every change from before the split")

        table = await leases.read_all()
        victim = sorted(str(lease.owner) for lease in table.leases)[0]
        victim_leases = sum(lease.owner == victim for lease in table.leases)
        instances.kill(victim)
        first, second = ranges[-2], ranges[-1]  # in key order: adjacent
        change_ranges(python_cosmos, changes.id, merge=[first, second])
        instances.start("d")  # the restart
        after_restart = len(writes.written)
        await poll(lambda: handled_at_least(after_restart + 30), "changes handled after it")
        await poll(lambda: settled(3), "the leases held again", within=30)
        written = await writes.stop()
        await poll(lambda: all_handled(written), "every change handled")
    finally:
        codes = instances.stop_all()
    assert set(codes.values()) == {0}, codes

    handled = Counter(handled_ids(tmp_path))
    assert set(handled) == set(written)  # none skipped, nothing invented
    twice = {change for change, count in handled.items() if count > 1}
    # Handled twice: only what the killed instance handled and had not checkpointed, a page
    # (PAGE_SIZE changes) per lease it held at most; handled at most twice.
    killed = set((tmp_path / f"{victim}.out").read_text().splitlines())
    assert twice <= killed and max(handled.values()) <= 2, twice - killed
    assert len(twice) <= victim_leases * PAGE_SIZE, sorted(twice)
    assert not twice & set(before_split)  # nothing from before the split handled again
    # The merge kept the three leases (each reads its part of the merged range): no overlap.
    assert tiles((await leases.read_all()).leases, 3)
    assert instance_logs(tmp_path).count(" split feed range ") == 1


def tiles(stored: Sequence[Lease], count: int) -> bool:
    """Whether `count` leases cover the whole key space, end to end, without overlap."""
    bounds = sorted((lease.keys.min, lease.keys.max) for lease in stored)
    return (
        len(bounds) == count
        and bounds[0][0] == ""
        and bounds[-1][1] == "FF"
        and all(low[1] == high[0] for low, high in itertools.pairwise(bounds))
    )
