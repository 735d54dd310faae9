"""What a transactional outbox and a change-feed lease container need from the store.

Conditional replace / patch on `_etag` (412 when stale), outbox queries ordered by `_ts` and
`_lsn` with TOP, and a lease workload (small documents updated with If-Match from several
threads and processes) that must lose no update.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey, exceptions
from azure.cosmos.aio import ContainerProxy as AioContainerProxy
from cosmos_rest import unique
from lease_worker import run as run_lease_worker

from cosmos_emulator import RunningCosmosEmulator

STALE = MatchConditions.IfNotModified


def test_conditional_patch_on_etag(container: ContainerProxy) -> None:
    first = container.create_item({"id": "o", "pk": "a", "state": "pending", "n": 0})
    second = container.patch_item(
        "o",
        "a",
        [{"op": "incr", "path": "/n", "value": 1}],
        etag=first["_etag"],
        match_condition=STALE,
    )
    assert second["n"] == 1 and second["_etag"] != first["_etag"]
    with pytest.raises(exceptions.CosmosAccessConditionFailedError) as err:
        container.patch_item(
            "o",
            "a",
            [{"op": "set", "path": "/state", "value": "sent"}],
            etag=first["_etag"],
            match_condition=STALE,
        )
    assert err.value.status_code == 412
    # In a batch: the stale operation fails with 412, the whole batch with it.
    with pytest.raises(exceptions.CosmosBatchOperationError) as batch_err:
        container.execute_item_batch(
            [
                ("upsert", ({"id": "other", "pk": "a"},)),
                (
                    "patch",
                    ("o", [{"op": "set", "path": "/state", "value": "sent"}]),
                    {"if_match_etag": first["_etag"]},
                ),
            ],
            partition_key="a",
        )
    assert batch_err.value.error_index == 1
    assert batch_err.value.operation_responses[1]["statusCode"] == 412
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("other", "a")
    current = container.read_item("o", "a")
    assert (current["state"], current["n"], current["_etag"]) == ("pending", 1, second["_etag"])
    results = container.execute_item_batch(
        [
            (
                "patch",
                ("o", [{"op": "set", "path": "/state", "value": "sent"}]),
                {"if_match_etag": second["_etag"]},
            )
        ],
        partition_key="a",
    )
    assert results[0]["statusCode"] == 200 and results[0]["resourceBody"]["state"] == "sent"


@pytest.fixture
def outbox(container: ContainerProxy) -> ContainerProxy:
    """Outbox messages over three partitions, some rewritten after creation."""
    for i in range(9):
        container.create_item({"id": f"m{i}", "pk": f"p{i % 3}", "sent": False, "seq": i})
    container.patch_item("m1", "p1", [{"op": "set", "path": "/sent", "value": True}])
    container.patch_item("m4", "p1", [{"op": "set", "path": "/sent", "value": True}])
    container.replace_item("m0", {"id": "m0", "pk": "p0", "sent": False, "seq": 0, "retry": 1})
    return container


def _ids(rows: Any) -> list[str]:
    return [r["id"] for r in rows]


def _query(container: ContainerProxy, text: str, pk: str | None = None, **params: Any) -> list[Any]:
    parameters = [{"name": f"@{k}", "value": v} for k, v in params.items()]
    if pk is None:
        return list(
            container.query_items(text, parameters=parameters, enable_cross_partition_query=True)
        )
    return list(container.query_items(text, parameters=parameters, partition_key=pk))


def test_outbox_queries_ordered_by_lsn_with_top(outbox: ContainerProxy) -> None:
    # Last modification order: m2 m3 m5 m6 m7 m8 (untouched), then m1 m4 (patched), m0.
    pending = "SELECT TOP @n * FROM c WHERE c.sent = false ORDER BY c._lsn"
    assert _ids(_query(outbox, pending, n=3)) == ["m2", "m3", "m5"]
    assert _ids(_query(outbox, pending, n=100)) == ["m2", "m3", "m5", "m6", "m7", "m8", "m0"]
    assert _ids(_query(outbox, pending, "p0", n=2)) == ["m3", "m6"]
    newest = "SELECT TOP 2 c.id, c._lsn FROM c ORDER BY c._lsn DESC"
    rows = _query(outbox, newest)
    assert _ids(rows) == ["m0", "m4"] and rows[0]["_lsn"] > rows[1]["_lsn"]
    # Resuming after a known position, as a dispatcher that remembers its last LSN does.
    mark = outbox.read_item("m8", "p2")["_lsn"]
    after = "SELECT VALUE c.id FROM c WHERE c._lsn > @mark ORDER BY c._lsn"
    assert _query(outbox, after, mark=mark) == ["m1", "m4", "m0"]
    highest = _query(outbox, "SELECT VALUE MAX(c._lsn) FROM c")
    assert highest == [outbox.read_item("m0", "p0")["_lsn"]]


def test_outbox_queries_ordered_by_ts(outbox: ContainerProxy) -> None:
    rows = _query(outbox, "SELECT c.id, c._ts FROM c ORDER BY c._ts")
    stamps = [r["_ts"] for r in rows]
    assert stamps == sorted(stamps) and sorted(_ids(rows)) == [f"m{i}" for i in range(9)]
    rows = _query(outbox, "SELECT TOP 4 c.id, c._ts FROM c ORDER BY c._ts DESC")
    stamps = [r["_ts"] for r in rows]
    assert len(rows) == 4 and stamps == sorted(stamps, reverse=True)
    in_partition = _query(outbox, "SELECT TOP 1 * FROM c ORDER BY c._ts DESC", "p1")
    assert len(in_partition) == 1 and in_partition[0]["pk"] == "p1"
    latest = max(d["_ts"] for d in _query(outbox, "SELECT * FROM c"))
    assert _query(outbox, "SELECT VALUE COUNT(1) FROM c WHERE c._ts <= @t", t=latest) == [9]


def test_racing_if_match_writers_exactly_one_wins_per_etag(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    clients = [CosmosClient(cosmos_emulator.url, cosmos_emulator.key) for _ in range(6)]
    link = container.container_link.split("/")
    container.create_item({"id": "lease", "pk": "lease", "owner": None})
    barrier = threading.Barrier(len(clients))

    def claim(index: int) -> bool:
        proxy = clients[index].get_database_client(link[1]).get_container_client(link[3])
        lease = proxy.read_item("lease", "lease")
        barrier.wait()  # everyone holds the same etag before anyone writes
        lease["owner"] = f"w{index}"
        try:
            if index % 2:
                proxy.replace_item("lease", lease, etag=lease["_etag"], match_condition=STALE)
            else:
                proxy.patch_item(
                    "lease",
                    "lease",
                    [{"op": "set", "path": "/owner", "value": f"w{index}"}],
                    etag=lease["_etag"],
                    match_condition=STALE,
                )
            return True
        except exceptions.CosmosAccessConditionFailedError:
            return False

    for _round in range(3):
        with ThreadPoolExecutor(len(clients)) as pool:
            wins = list(pool.map(claim, range(len(clients))))
        assert wins.count(True) == 1
        assert container.read_item("lease", "lease")["owner"] == f"w{wins.index(True)}"


def _lease_container(database: DatabaseProxy, leases: int) -> ContainerProxy:
    container = database.create_container(unique("leases"), PartitionKey("/id"))
    for i in range(leases):
        container.create_item({"id": f"lease-{i}", "count": 0, "history": [], "owner": None})
    return container


def _assert_no_lost_update(
    container: ContainerProxy, leases: int, acknowledged: dict[str, dict[str, int]]
) -> None:
    """Every acknowledged update is in the lease, exactly once, and nothing else is."""
    for i in range(leases):
        lease_id = f"lease-{i}"
        doc = container.read_item(lease_id, lease_id)
        expected = {name: counts[lease_id] for name, counts in acknowledged.items()}
        assert doc["count"] == sum(expected.values()), lease_id
        assert {n: doc["history"].count(n) for n in acknowledged} == expected, lease_id


def test_lease_workload_from_threads_loses_no_update(
    cosmos_emulator: RunningCosmosEmulator, database: DatabaseProxy
) -> None:
    leases, workers, updates = 4, 6, 25
    container = _lease_container(database, leases)
    link = container.container_link.split("/")

    def worker(index: int) -> dict[str, int]:
        client = CosmosClient(cosmos_emulator.url, cosmos_emulator.key)
        proxy = client.get_database_client(link[1]).get_container_client(link[3])
        return run_lease_worker(proxy, f"t{index}", updates, leases, seed=index)

    with ThreadPoolExecutor(workers) as pool:
        results = dict(
            zip((f"t{i}" for i in range(workers)), pool.map(worker, range(workers)), strict=True)
        )
    for counts in results.values():
        assert sum(v for k, v in counts.items() if k != "_conflicts") == updates
    assert sum(c["_conflicts"] for c in results.values()) > 0  # the workers did race
    _assert_no_lost_update(container, leases, results)


def test_lease_workload_from_processes_loses_no_update(
    cosmos_emulator: RunningCosmosEmulator, database: DatabaseProxy
) -> None:
    leases, workers, updates = 3, 3, 30
    container = _lease_container(database, leases)
    link = container.container_link.split("/")
    script = Path(__file__).with_name("lease_worker.py")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                cosmos_emulator.url,
                cosmos_emulator.key,
                link[1],
                link[3],
                f"p{i}",
                str(updates),
                str(leases),
                str(i),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    results: dict[str, dict[str, int]] = {}
    try:
        for proc in procs:  # every worker connected, then all start at once
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for i, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            results[f"p{i}"] = json.loads(out.strip().splitlines()[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    for counts in results.values():
        assert sum(v for k, v in counts.items() if k != "_conflicts") == updates
    assert sum(c["_conflicts"] for c in results.values()) > 0  # the workers did race
    _assert_no_lost_update(container, leases, results)


async def test_aio_if_match_updates_lose_nothing(aio_container: AioContainerProxy) -> None:
    await aio_container.create_item({"id": "lease", "pk": "l", "count": 0})
    conflicts = 0

    async def bump() -> None:
        nonlocal conflicts
        while True:
            lease = await aio_container.read_item("lease", "l")
            try:
                await aio_container.patch_item(
                    "lease",
                    "l",
                    [{"op": "incr", "path": "/count", "value": 1}],
                    etag=lease["_etag"],
                    match_condition=STALE,
                )
                return
            except exceptions.CosmosAccessConditionFailedError:
                conflicts += 1

    await asyncio.gather(*(bump() for _ in range(20)))
    assert (await aio_container.read_item("lease", "l"))["count"] == 20
    assert conflicts > 0  # every read went out before the first write: they did race
