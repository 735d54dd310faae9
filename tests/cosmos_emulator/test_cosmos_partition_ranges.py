"""Issue 38, item 3: a container on several physical partitions (partition key ranges).

Through the real SDKs (sync and aio): the ranges the SDK reads from `/pkranges`, routing by
them (each range answers only for its own keys), session tokens and LSNs per range, feed
ranges and the change feed per range and whole, cross-partition queries that the SDK fans
out and merges, `read_items`, `read_all_items` and a transactional batch in one range.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey
from azure.cosmos.aio import CosmosClient as AioCosmosClient
from cosmos_rest import call, unique, values

from cosmos_emulator import RunningCosmosEmulator, start_in_background
from cosmos_emulator.journal import JournalError
from cosmos_emulator.ranges import MAX_PARTITION_RANGES

RANGES = 3
# Three equal parts of the hash-V2 space [00..., 3F...F] (the emulator's choice: see its README).
BOUNDS = ["", "15555555555555555555555555555555", "2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "FF"]
ITEMS = 30  # enough distinct keys that every one of the three ranges holds some
SESSION_TOKEN = re.compile(r"(\d+):-1#(\d+)")


@pytest.fixture(scope="module")
def cosmos_emulator() -> Iterator[RunningCosmosEmulator]:
    """This module's emulator, with three ranges; conftest's `client` and `database` use it."""
    with start_in_background("127.0.0.1", 0, partition_ranges=RANGES) as emu:
        yield emu


@pytest.fixture
def container(database: DatabaseProxy) -> ContainerProxy:
    container = database.create_container(unique("c"), PartitionKey("/pk"))
    for n in range(ITEMS):
        container.create_item({"id": f"i{n}", "pk": f"p{n}", "n": n})
    return container


def _headers(container: ContainerProxy) -> dict[str, str]:
    return dict(container.client_connection.last_response_headers)


def _ranges_of(container: ContainerProxy) -> list[dict[str, Any]]:
    return [fr["Range"] for fr in container.read_feed_ranges()]


def _range_holding(container: ContainerProxy, pk: str) -> int:
    """Which feed range holds `pk`, by the SDK's own hashing (not the emulator's)."""
    key_range = container.feed_range_from_partition_key(pk)
    holders = [
        i
        for i, fr in enumerate(container.read_feed_ranges())
        if container.is_feed_range_subset(fr, key_range)
    ]
    assert len(holders) == 1, holders
    return holders[0]


class RequestLog:
    """The headers of every request the SDK sent (a `raw_response_hook`)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []

    def __call__(self, response: Any) -> None:
        self.sent.append(dict(response.http_request.headers))


# -- the ranges ------------------------------------------------------------------------------
def test_the_sdk_reads_n_ranges_splitting_the_epk_space_evenly(
    container: ContainerProxy, cosmos_emulator: RunningCosmosEmulator
) -> None:
    ranges = _ranges_of(container)
    assert [(r["min"], r["max"]) for r in ranges] == list(itertools.pairwise(BOUNDS))

    path = f"/{container.container_link}/pkranges/"
    status, headers, body = call(cosmos_emulator.url, cosmos_emulator.key, "GET", path)
    assert status == 200 and [r["id"] for r in body["PartitionKeyRanges"]] == ["0", "1", "2"]
    assert headers["x-ms-item-count"] == "3"
    # The SDK drains /pkranges until a 304 on the ETag it was given.
    again, _, _ = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "GET",
        path,
        headers={"If-None-Match": headers["etag"]},
    )
    assert again == 304


def test_a_container_gets_one_range_per_10000_ru_of_its_throughput(
    fresh_emulator: RunningCosmosEmulator,
) -> None:
    # An emulator started with the default (one range): throughput alone decides.
    client = CosmosClient(fresh_emulator.url, fresh_emulator.key)
    db = client.create_database(unique("db"))
    assert len(_ranges_of(db.create_container(unique("c"), PartitionKey("/pk")))) == 1
    assert (
        len(
            _ranges_of(
                db.create_container(unique("c"), PartitionKey("/pk"), offer_throughput=10000)
            )
        )
        == 1
    )
    big = db.create_container(unique("c"), PartitionKey("/pk"), offer_throughput=25000)
    assert len(_ranges_of(big)) == 3


def test_every_item_lives_in_the_range_of_its_key(container: ContainerProxy) -> None:
    listed: list[str] = []
    for index, feed_range in enumerate(container.read_feed_ranges()):
        in_range = list(
            container.query_items_change_feed(feed_range=feed_range, start_time="Beginning")
        )
        assert in_range, f"range {index} holds none of {ITEMS} keys"
        assert all(_range_holding(container, d["pk"]) == index for d in in_range)
        # A query routed to the range answers from it alone, too.
        queried = values(container.query_items("SELECT VALUE c.id FROM c", feed_range=feed_range))
        assert sorted(queried) == sorted(d["id"] for d in in_range)
        listed += queried
    assert sorted(listed) == sorted(f"i{n}" for n in range(ITEMS))


def test_a_range_that_does_not_exist_is_refused(
    container: ContainerProxy, cosmos_emulator: RunningCosmosEmulator
) -> None:
    path = f"/{container.container_link}/docs/"
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "POST",
        path,
        {"query": "SELECT * FROM c"},
        {
            "Content-Type": "application/query+json",
            "x-ms-documentdb-isquery": "true",
            "x-ms-documentdb-partitionkeyrangeid": "3",
        },
    )
    assert status == 400 and "'3' does not exist" in body["message"]


def test_epk_headers_wider_than_the_named_range_stay_within_it(
    container: ContainerProxy, cosmos_emulator: RunningCosmosEmulator
) -> None:
    feed_range = list(container.read_feed_ranges())[1]
    in_range = {
        d["id"]
        for d in container.query_items_change_feed(feed_range=feed_range, start_time="Beginning")
    }
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "POST",
        f"/{container.container_link}/docs/",
        {"query": "SELECT * FROM c"},
        {
            "Content-Type": "application/query+json",
            "x-ms-documentdb-isquery": "true",
            "x-ms-documentdb-partitionkeyrangeid": "1",
            "x-ms-start-epk": "",
            "x-ms-end-epk": "FF",
        },
    )
    assert status == 200 and {d["id"] for d in body["Documents"]} == in_range


# -- session tokens and LSNs per range ---------------------------------------------------------
def test_session_tokens_and_lsns_are_kept_per_range(container: ContainerProxy) -> None:
    by_range: dict[int, list[str]] = {}
    for n in range(ITEMS):
        by_range.setdefault(_range_holding(container, f"p{n}"), []).append(f"p{n}")
    (first, keys), (second, other_keys) = sorted(by_range.items())[:2]

    container.upsert_item({"id": "w", "pk": keys[0]})
    token = SESSION_TOKEN.fullmatch(_headers(container)["x-ms-session-token"])
    assert token is not None and int(token[1]) == first
    assert _headers(container)["x-ms-documentdb-partitionkeyrangeid"] == str(first)
    assert _headers(container)["lsn"] == token[2]
    # every setup write counted in its own range only
    assert int(token[2]) == len(keys) + 1

    container.upsert_item({"id": "w", "pk": other_keys[0]})
    other = SESSION_TOKEN.fullmatch(_headers(container)["x-ms-session-token"])
    assert other is not None and int(other[1]) == second
    assert int(other[2]) == len(other_keys) + 1

    # The SDK sends back the token of the range it routes to, and only that one.
    log = RequestLog()
    container.read_item("w", keys[0], raw_response_hook=log)
    assert log.sent[-1]["x-ms-session-token"] == token[0]
    container.read_item("w", other_keys[0], raw_response_hook=log)
    assert log.sent[-1]["x-ms-session-token"] == other[0]


def test_a_cross_partition_answer_carries_every_ranges_token(container: ContainerProxy) -> None:
    rows = list(container.query_items("SELECT * FROM c", enable_cross_partition_query=True))
    assert len(rows) == ITEMS
    tokens = [
        SESSION_TOKEN.fullmatch(t) for t in _headers(container)["x-ms-session-token"].split(",")
    ]
    assert [int(t[1]) for t in tokens if t is not None] == list(range(RANGES))
    assert sum(int(t[2]) for t in tokens if t is not None) == ITEMS


# -- the change feed -----------------------------------------------------------------------------
def test_the_change_feed_per_range_continues_with_its_own_token(container: ContainerProxy) -> None:
    feed_range = list(container.read_feed_ranges())[1]
    first = container.query_items_change_feed(feed_range=feed_range, start_time="Beginning")
    seen = {d["id"] for d in first}
    token = _headers(container)["etag"]
    assert seen

    fresh = {n: f"new{n}" for n in range(ITEMS)}
    for n, pk in fresh.items():
        container.create_item({"id": f"j{n}", "pk": pk})
    expected = {f"j{n}" for n, pk in fresh.items() if _range_holding(container, pk) == 1}
    assert expected
    more = container.query_items_change_feed(feed_range=feed_range, continuation=token)
    assert {d["id"] for d in more} == expected


def test_the_whole_containers_change_feed_lists_each_item_once(container: ContainerProxy) -> None:
    listed = [d["id"] for d in container.query_items_change_feed(start_time="Beginning")]
    assert sorted(listed) == sorted(f"i{n}" for n in range(ITEMS))
    token = container.client_connection.last_response_headers["etag"]
    container.upsert_item({"id": "i3", "pk": "p3", "n": 33})
    container.create_item({"id": "late", "pk": "late"})
    after = [d["id"] for d in container.query_items_change_feed(continuation=token)]
    assert sorted(after) == ["i3", "late"]


# -- queries the SDK fans out and merges --------------------------------------------------------
def _query(container: ContainerProxy, text: str) -> list[Any]:
    return list(container.query_items(text, enable_cross_partition_query=True))


def test_cross_partition_queries_merge_every_range_once(container: ContainerProxy) -> None:
    assert [d["n"] for d in _query(container, "SELECT * FROM c ORDER BY c.n DESC")] == list(
        range(ITEMS - 1, -1, -1)
    )
    assert _query(container, "SELECT VALUE COUNT(1) FROM c") == [ITEMS]
    assert _query(container, "SELECT VALUE SUM(c.n) FROM c") == [sum(range(ITEMS))]
    assert _query(container, "SELECT VALUE MAX(c.n) FROM c") == [ITEMS - 1]
    assert [d["n"] for d in _query(container, "SELECT * FROM c ORDER BY c.n OFFSET 5 LIMIT 3")] == [
        5,
        6,
        7,
    ]
    assert [d["n"] for d in _query(container, "SELECT TOP 4 c.n FROM c ORDER BY c.n")] == [
        0,
        1,
        2,
        3,
    ]
    assert sorted(_query(container, "SELECT DISTINCT VALUE c.n % 4 FROM c")) == [0, 1, 2, 3]
    assert len(_query(container, "SELECT * FROM c")) == ITEMS


def test_read_items_and_read_all_items_across_ranges(container: ContainerProxy) -> None:
    wanted = [(f"i{n}", f"p{n}") for n in (3, 17, 2, 25, 0, 11)]
    assert {_range_holding(container, pk) for _, pk in wanted} == set(range(RANGES))
    assert [d["id"] for d in container.read_items(wanted)] == [i for i, _ in wanted]
    assert sorted(d["id"] for d in container.read_all_items()) == sorted(
        f"i{n}" for n in range(ITEMS)
    )


def test_a_transactional_batch_runs_in_its_one_range(container: ContainerProxy) -> None:
    home = _range_holding(container, "p7")
    before = _range_lsns(container)
    results = container.execute_item_batch(
        [("create", ({"id": "b1", "pk": "p7"},)), ("upsert", ({"id": "i7", "pk": "p7", "n": 70},))],
        "p7",
    )
    assert [r["statusCode"] for r in results] == [201, 200]
    after = _range_lsns(container)
    assert after == {r: n + (1 if r == home else 0) for r, n in before.items()}


def _range_lsns(container: ContainerProxy) -> dict[int, int]:
    list(container.query_items("SELECT VALUE 1 FROM c", enable_cross_partition_query=True))
    tokens = _headers(container)["x-ms-session-token"].split(",")
    return {int(m[1]): int(m[2]) for t in tokens if (m := SESSION_TOKEN.fullmatch(t))}


def test_container_statistics_are_per_range(container: ContainerProxy) -> None:
    statistics = container.read(populate_partition_key_range_statistics=True)["statistics"]
    assert [s["id"] for s in statistics] == ["0", "1", "2"]
    counts = [0] * RANGES
    for n in range(ITEMS):
        counts[_range_holding(container, f"p{n}")] += 1
    assert [s["documentCount"] for s in statistics] == counts


def test_hierarchical_keys_route_by_their_first_components_range(database: DatabaseProxy) -> None:
    container = database.create_container(unique("h"), PartitionKey(["/t", "/u"], kind="MultiHash"))
    for n in range(ITEMS):
        container.create_item({"id": f"i{n}", "t": f"t{n % 5}", "u": f"u{n}", "n": n})
    per_range = [
        [d["t"] for d in container.query_items_change_feed(feed_range=fr, start_time="Beginning")]
        for fr in container.read_feed_ranges()
    ]
    assert sorted(t for ts in per_range for t in ts) == sorted(f"t{n % 5}" for n in range(ITEMS))
    # A key's range is its first component's: a prefix lives in one range.
    ranges_of: dict[str, set[int]] = {}
    for index, first_components in enumerate(per_range):
        for first in first_components:
            ranges_of.setdefault(first, set()).add(index)
    assert all(len(holders) == 1 for holders in ranges_of.values())
    prefix = sorted(n for n in range(ITEMS) if n % 5 == 2)
    assert [
        d["n"] for d in container.query_items("SELECT * FROM c ORDER BY c.n", partition_key=["t2"])
    ] == prefix
    assert (
        sorted(
            d["n"]
            for d in container.query_items_change_feed(partition_key=["t2"], start_time="Beginning")
        )
        == prefix
    )


# -- the aio SDK --------------------------------------------------------------------------------
async def test_the_aio_sdk_reads_feed_ranges_change_feeds_and_merged_queries(
    cosmos_emulator: RunningCosmosEmulator,
) -> None:
    async with AioCosmosClient(cosmos_emulator.url, cosmos_emulator.key) as aio_client:
        db = await aio_client.create_database(unique("adb"))
        try:
            container = await db.create_container(unique("ac"), PartitionKey("/pk"))
            for n in range(ITEMS):
                await container.create_item({"id": f"i{n}", "pk": f"p{n}", "n": n})
            feed_ranges = [fr async for fr in container.read_feed_ranges()]
            assert len(feed_ranges) == RANGES
            per_range = []
            for feed_range in feed_ranges:
                feed = container.query_items_change_feed(
                    feed_range=feed_range, start_time="Beginning"
                )
                per_range.append([d["id"] async for d in feed])
            assert all(per_range)
            assert sorted(i for ids in per_range for i in ids) == sorted(
                f"i{n}" for n in range(ITEMS)
            )
            ordered = container.query_items("SELECT VALUE c.n FROM c ORDER BY c.n")
            assert values([n async for n in ordered]) == list(range(ITEMS))
            counted = container.query_items("SELECT VALUE COUNT(1) FROM c")
            assert values([n async for n in counted]) == [ITEMS]
        finally:
            await aio_client.delete_database(db)


# -- the option and persistence -------------------------------------------------------------------
def test_the_range_count_survives_a_restart(tmp_path: Path) -> None:
    with start_in_background(data_dir=tmp_path, partition_ranges=RANGES) as emu:
        db = CosmosClient(emu.url, emu.key).create_database("db")
        container = db.create_container("c", PartitionKey("/pk"))
        for n in range(ITEMS):
            container.create_item({"id": f"i{n}", "pk": f"p{n}"})
    with start_in_background(data_dir=tmp_path) as emu:  # started with the default: 1
        container = (
            CosmosClient(emu.url, emu.key).get_database_client("db").get_container_client("c")
        )
        feed_ranges = list(container.read_feed_ranges())
        assert len(feed_ranges) == RANGES
        listed = [
            d["id"]
            for fr in feed_ranges
            for d in container.query_items_change_feed(feed_range=fr, start_time="Beginning")
        ]
        assert sorted(listed) == sorted(f"i{n}" for n in range(ITEMS))


@pytest.mark.parametrize("count", [0, MAX_PARTITION_RANGES + 1, "3"])
def test_a_journaled_range_count_out_of_bounds_refuses_the_start(
    tmp_path: Path, count: object
) -> None:
    with start_in_background(data_dir=tmp_path, partition_ranges=RANGES) as emu:
        CosmosClient(emu.url, emu.key).create_database("db").create_container(
            "c", PartitionKey("/pk")
        )
    journal = next(tmp_path.glob("*.jsonl"))
    lines = journal.read_bytes().splitlines()
    for index, line in enumerate(lines):
        record = json.loads(line.split(b" ", 1)[1])
        for op in record["ops"]:
            if op["o"] == "c":
                assert op["n"] == RANGES
                op["n"] = count
                text = json.dumps(record).encode()
                lines[index] = b"%08x " % zlib.crc32(text) + text
    journal.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(JournalError, match="is invalid"):
        start_in_background(data_dir=tmp_path)


@pytest.mark.parametrize(
    ("argv", "env"),
    [(["--partition-ranges", "0"], {}), ([], {"COSMOS_EMULATOR_PARTITION_RANGES": "many"})],
)
def test_a_bad_range_count_refuses_the_start(argv: list[str], env: dict[str, str]) -> None:
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run(
        [sys.executable, "-m", "cosmos_emulator", "--port", "0", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(src), **env},
    )
    assert done.returncode == 2 and "partition ranges must be" in done.stderr
