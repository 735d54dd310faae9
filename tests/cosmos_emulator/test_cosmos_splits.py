"""Issue 44, item 1: partition key ranges split and merge live, as Cosmos's do.

Through the real Python SDK (azure-cosmos 4.17): a change feed continued across a split and a
merge loses and repeats nothing, through the SDK's own `handle_feed_range_gone` after its
410; queries page across a split; session tokens from before it are served. Over the wire:
the gone ids answer 410 with substatus 1002 (1007 to the change feed after a merge),
`/pkranges` lists the children with their `parents` and a new ETag, ids are never reused, a
throughput raise past 10,000 RU/s per range splits, the operator switch needs the fault token,
and a restart keeps the ranges. The JavaScript SDK's side is in tests/js/cosmos_ranges.test.mjs.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey
from azure.cosmos._change_feed.change_feed_state import ChangeFeedStateV2
from azure.cosmos.aio import CosmosClient as AioCosmosClient
from cosmos_rest import call, unique, values

from cosmos_emulator import RunningCosmosEmulator, start_in_background
from cosmos_emulator.journal import JOURNAL_NAME, JournalError

ITEMS = 30


@pytest.fixture
def emulator() -> Iterator[RunningCosmosEmulator]:
    """An emulator of the test's own: splits change its containers for good."""
    with start_in_background("127.0.0.1", 0) as emu:
        yield emu


@pytest.fixture
def client(emulator: RunningCosmosEmulator) -> Iterator[CosmosClient]:
    with CosmosClient(emulator.url, emulator.key) as cosmos:
        yield cosmos


@pytest.fixture
def database(client: CosmosClient) -> DatabaseProxy:
    return client.create_database(unique("db"))


@pytest.fixture
def container(database: DatabaseProxy) -> ContainerProxy:
    container = database.create_container(unique("c"), PartitionKey("/pk"))
    for n in range(ITEMS):
        container.create_item({"id": f"i{n:02}", "pk": f"p{n}", "n": n})
    return container


def _names(container: ContainerProxy) -> tuple[str, str]:
    _, database, _, name = container.container_link.split("/")
    return database, name


def _pkranges(
    emulator: RunningCosmosEmulator, container: ContainerProxy, etag: str | None = None
) -> tuple[int, dict[str, str], Any]:
    headers = {"If-None-Match": etag} if etag else {}
    path = f"/{container.container_link}/pkranges/"
    return call(emulator.url, emulator.key, "GET", path, headers=headers)


def _ask_range(
    emulator: RunningCosmosEmulator, container: ContainerProxy, range_id: str, *, feed: bool
) -> tuple[int, dict[str, str], Any]:
    """A change-feed read (`feed`) or a query addressed to one range by id, as the SDKs send."""
    path = f"/{container.container_link}/docs/"
    headers = {"x-ms-documentdb-partitionkeyrangeid": range_id}
    if feed:
        return call(
            emulator.url, emulator.key, "GET", path, headers={**headers, "A-IM": "Incremental feed"}
        )
    headers |= {"Content-Type": "application/query+json", "x-ms-documentdb-isquery": "true"}
    return call(emulator.url, emulator.key, "POST", path, {"query": "SELECT * FROM c"}, headers)


class GoneHandled:
    """Counts the SDK's own `ChangeFeedStateV2.handle_feed_range_gone` calls (it still runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = ChangeFeedStateV2.handle_feed_range_gone

        def counted(state: ChangeFeedStateV2, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(state, *args, **kwargs)

        monkeypatch.setattr(ChangeFeedStateV2, "handle_feed_range_gone", counted)


# -- the change feed follows a split and a merge -------------------------------------------
def test_a_change_feed_continues_across_a_split_with_nothing_lost_or_repeated(
    emulator: RunningCosmosEmulator, container: ContainerProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = GoneHandled(monkeypatch)
    pages = container.query_items_change_feed(start_time="Beginning", max_item_count=7).by_page()
    seen = [d["id"] for d in next(pages)]
    assert emulator.split_range(*_names(container), "0") == ["1", "2"]
    for n in range(ITEMS, ITEMS + 10):  # written after the split, into the children
        container.upsert_item({"id": f"i{n:02}", "pk": f"p{n}", "n": n})
    container.upsert_item({"id": "i03", "pk": "p3", "n": 3, "again": True})  # a seen one, again
    seen += [d["id"] for page in pages for d in page]
    assert gone.calls >= 1  # the SDK met the 410 and moved its continuation to the children
    assert sorted(seen) == sorted([f"i{n:02}" for n in range(ITEMS + 10)] + ["i03"])
    assert seen.count("i03") == 2  # once at its first write, once at its latest: no other repeat


def test_a_continuation_token_from_before_a_split_resumes_on_the_children(
    emulator: RunningCosmosEmulator, container: ContainerProxy, client: CosmosClient
) -> None:
    feed = container.query_items_change_feed(start_time="Beginning", max_item_count=10)
    first = [d["id"] for d in next(feed.by_page())]
    token = container.client_connection.last_response_headers["etag"]
    emulator.split_range(*_names(container), "0")
    # A second client that read the ranges before the split too: its routing map is stale.
    with CosmosClient(emulator.url, emulator.key) as other:
        database, name = _names(container)
        stale = other.get_database_client(database).get_container_client(name)
        rest = [d["id"] for d in stale.query_items_change_feed(continuation=token)]
    assert sorted(first + rest) == [f"i{n:02}" for n in range(ITEMS)]


def test_a_change_feed_continues_across_a_merge(
    emulator: RunningCosmosEmulator, container: ContainerProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    left, right = emulator.split_range(*_names(container), "0")
    gone = GoneHandled(monkeypatch)
    pages = container.query_items_change_feed(start_time="Beginning", max_item_count=4).by_page()
    seen = [d["id"] for d in next(pages)]
    assert emulator.merge_ranges(*_names(container), left, right) == "3"
    container.upsert_item({"id": "late", "pk": "late"})
    seen += [d["id"] for page in pages for d in page]
    assert gone.calls >= 1
    assert sorted(seen) == sorted([f"i{n:02}" for n in range(ITEMS)] + ["late"])


def test_a_hierarchical_prefix_feed_and_queries_follow_two_splits(
    emulator: RunningCosmosEmulator, database: DatabaseProxy
) -> None:
    """A MultiHash key's prefix is an EPK range that the splits cut through (bounds are one
    hashed component long, item EPKs two)."""
    tree = database.create_container(unique("h"), PartitionKey(path=["/t", "/u"], kind="MultiHash"))
    for n in range(40):
        tree.create_item({"id": f"i{n}", "t": f"t{n % 4}", "u": f"u{n % 5}", "n": n})
    pages = tree.query_items_change_feed(
        start_time="Beginning", partition_key=["t1"], max_item_count=3
    ).by_page()
    seen = [d["n"] for d in next(pages)]
    first_child = emulator.split_range(*_names(tree), "0")[0]
    emulator.split_range(*_names(tree), first_child)
    seen += [d["n"] for page in pages for d in page]
    assert sorted(seen) == list(range(1, 40, 4))
    in_prefix = tree.query_items("SELECT VALUE c.n FROM c", partition_key=["t2"])
    assert sorted(values(in_prefix)) == list(range(2, 40, 4))
    ordered = tree.query_items(
        "SELECT VALUE c.n FROM c ORDER BY c.n", enable_cross_partition_query=True
    )
    assert values(ordered) == list(range(40))


# -- the wire: 410s, /pkranges -------------------------------------------------------------
def test_a_split_parent_answers_410_1002_and_pkranges_lists_the_children(
    emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    status, before_headers, before = _pkranges(emulator, container)
    assert status == 200 and [r["id"] for r in before["PartitionKeyRanges"]] == ["0"]
    old_etag = before_headers["etag"]

    children = emulator.split_range(*_names(container), "0")

    for feed in (True, False):
        status, headers, body = _ask_range(emulator, container, "0", feed=feed)
        assert (status, headers["x-ms-substatus"], body["code"]) == (410, "1002", "Gone")
    status, headers, listed = _pkranges(emulator, container)
    assert status == 200 and headers["etag"] != old_etag
    ranges = listed["PartitionKeyRanges"]
    assert [(r["id"], r["parents"]) for r in ranges] == [("1", ["0"]), ("2", ["0"])]
    assert ranges[0]["minInclusive"] == "" and ranges[-1]["maxExclusive"] == "FF"
    assert ranges[0]["maxExclusive"] == ranges[1]["minInclusive"]
    # The SDKs' incremental refresh: what changed since the ETag they hold, then 304.
    status, _, delta = _pkranges(emulator, container, old_etag)
    assert status == 200 and [r["id"] for r in delta["PartitionKeyRanges"]] == children
    assert _pkranges(emulator, container, headers["etag"])[0] == 304
    # Each child answers for its half, and every item is in exactly one.
    held = [_ask_range(emulator, container, c, feed=True)[2]["Documents"] for c in children]
    assert all(held) and sorted(d["id"] for part in held for d in part) == sorted(
        f"i{n:02}" for n in range(ITEMS)
    )


def test_ids_are_never_reused_and_grandchildren_name_every_ancestor(
    emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    names = _names(container)
    left, right = emulator.split_range(*names, "0")
    grandchildren = emulator.split_range(*names, right)
    merged = emulator.merge_ranges(*names, left, grandchildren[0])
    assert (left, right, grandchildren, merged) == ("1", "2", ["3", "4"], "5")
    ranges = _pkranges(emulator, container)[2]["PartitionKeyRanges"]
    assert [(r["id"], r["parents"]) for r in ranges] == [
        ("5", ["0", "1", "2", "3"]),
        ("4", ["0", "2"]),
    ]
    # A merge's sources: 1007 (split or merge) to the change feed, 1002 to a query.
    assert _ask_range(emulator, container, "1", feed=True)[1]["x-ms-substatus"] == "1007"
    assert _ask_range(emulator, container, "1", feed=False)[1]["x-ms-substatus"] == "1002"
    assert _ask_range(emulator, container, "2", feed=True)[1]["x-ms-substatus"] == "1002"
    assert _ask_range(emulator, container, "9", feed=True)[0] == 400  # never existed
    with pytest.raises(ValueError, match="is gone"):
        emulator.split_range(*names, "2")
    emulator.split_range(*names, "5")  # 6, 7, 4 now
    with pytest.raises(ValueError, match="not adjacent"):
        emulator.merge_ranges(*names, "6", "4")


def test_the_sdk_routes_reads_writes_and_session_tokens_after_a_split(
    emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    # The client holds a session token of range 0 and a routing map naming it.
    container.upsert_item({"id": "i00", "pk": "p0", "n": 100})
    emulator.split_range(*_names(container), "0")
    assert container.read_item("i00", partition_key="p0")["n"] == 100  # the old token served
    container.upsert_item({"id": "i01", "pk": "p1", "n": 101})
    token = container.client_connection.last_response_headers["x-ms-session-token"]
    assert token.split(":")[0] in ("1", "2")  # a child's token now
    assert container.read_item("i01", partition_key="p1")["n"] == 101
    assert len(list(container.read_all_items())) == ITEMS
    assert len([fr for fr in container.read_feed_ranges()]) == 2


# -- queries -------------------------------------------------------------------------------
def test_a_cross_partition_query_pages_across_a_split(
    emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    pages = container.query_items(
        "SELECT * FROM c", enable_cross_partition_query=True, max_item_count=7
    ).by_page()
    got = [d["id"] for d in next(pages)]
    emulator.split_range(*_names(container), "0")
    got += [d["id"] for page in pages for d in page]
    assert got == [f"i{n:02}" for n in range(ITEMS)]


def test_a_feed_range_query_resumes_its_parents_continuation_on_the_children(
    emulator: RunningCosmosEmulator, database: DatabaseProxy
) -> None:
    """Over two ranges the SDK keeps a continuation per range; when one splits it hands that
    range's continuation to each child, which resume where the parent was (before: 400)."""
    two = database.create_container(unique("c"), PartitionKey("/pk"), offer_throughput=20000)
    for n in range(ITEMS):
        two.create_item({"id": f"i{n:02}", "pk": f"p{n}", "n": n})
    whole = {"Range": {"min": "", "max": "FF", "isMinInclusive": True, "isMaxInclusive": False}}
    pages = two.query_items("SELECT * FROM c", feed_range=whole, max_item_count=4).by_page()
    got = [d["id"] for d in next(pages)]
    emulator.split_range(*_names(two), "0")
    got += [d["id"] for page in pages for d in page]
    assert sorted(got) == [f"i{n:02}" for n in range(ITEMS)]


def test_an_order_by_query_across_a_split_repeats_only_what_the_sdk_restarts(
    emulator: RunningCosmosEmulator, database: DatabaseProxy
) -> None:
    """azure-cosmos 4.17.1 repairs an ORDER BY fan-out after a 410 by starting the children's
    producers from the beginning (`_repair_document_producer`: no continuation), so the rows
    it had already fetched from the split range come again. Every row comes; the only rows
    that repeat are of the first page the SDK fetched from the split range."""
    big = database.create_container(unique("c"), PartitionKey("/pk"), offer_throughput=20000)
    for n in range(ITEMS):
        big.create_item({"id": f"i{n:02}", "pk": f"p{n}", "n": n})
    pages = big.query_items(
        "SELECT * FROM c ORDER BY c.n", enable_cross_partition_query=True, max_item_count=5
    ).by_page()
    before = [d["n"] for d in next(pages)]
    in_range_0 = _ask_range(emulator, big, "0", feed=True)[2]["Documents"]
    fetched_from_0 = sorted(d["n"] for d in in_range_0)[:5]
    emulator.split_range(*_names(big), "0")
    after = [d["n"] for page in pages for d in page]
    assert sorted(set(before + after)) == list(range(ITEMS))
    repeated = {n for n in after if (before + after).count(n) > 1}
    assert repeated and repeated <= set(fetched_from_0)


# -- throughput ----------------------------------------------------------------------------
def test_raising_throughput_past_10000_ru_per_range_splits_the_widest_ranges(
    emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    container.replace_throughput(10000)
    assert emulator.partition_key_range_ids(*_names(container)) == ["0"]  # one range holds it
    container.replace_throughput(25000)  # three ranges' worth
    ranges = _pkranges(emulator, container)[2]["PartitionKeyRanges"]
    assert [(r["id"], r["parents"]) for r in ranges] == [
        ("3", ["0", "1"]),
        ("4", ["0", "1"]),
        ("2", ["0"]),
    ]
    container.replace_throughput(400)  # Cosmos never merges when throughput falls
    assert len(emulator.partition_key_range_ids(*_names(container))) == 3
    assert sum(1 for _ in container.query_items_change_feed(start_time="Beginning")) == ITEMS


# -- the operator switch over HTTP ---------------------------------------------------------
def test_the_http_switch_needs_the_fault_token_and_no_foreign_origin(
    emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    url = emulator.url + "_emulator/ranges"
    database, name = _names(container)
    split = {"database": database, "container": name, "split": "0"}
    bearer = {"Authorization": f"Bearer {emulator.fault_token}"}
    assert httpx.post(url, json=split).status_code == 401
    foreign = {**bearer, "Origin": "http://attacker.example"}
    assert httpx.post(url, json=split, headers=foreign).status_code == 403
    as_text = {**bearer, "Content-Type": "text/plain"}
    assert httpx.post(url, content=b"{}", headers=as_text).status_code == 415
    assert emulator.partition_key_range_ids(database, name) == ["0"]  # nothing changed

    answer = httpx.post(url, json=split, headers=bearer)
    assert answer.status_code == 200 and answer.json() == {"ranges": ["1", "2"], "made": ["1", "2"]}
    merge = {"database": database, "container": name, "merge": ["1", "2"]}
    assert httpx.post(url, json=merge, headers=bearer).json() == {"ranges": ["3"], "made": ["3"]}
    for bad in ({**split, "split": "0"}, {**split, "merge": ["3"]}, {"database": database}):
        assert httpx.post(url, json=bad, headers=bearer).status_code == 400
    missing = {**split, "container": "nope", "split": "3"}
    assert httpx.post(url, json=missing, headers=bearer).status_code == 404


# -- persistence ---------------------------------------------------------------------------
def test_a_restart_keeps_the_ranges_their_parents_and_what_is_gone(tmp_path: Path) -> None:
    data = tmp_path / "cosmos"
    with start_in_background(data_dir=data) as emu, CosmosClient(emu.url, emu.key) as cosmos:
        db = cosmos.create_database("d")
        coll = db.create_container("c", PartitionKey("/pk"))
        for n in range(ITEMS):
            coll.create_item({"id": f"i{n:02}", "pk": f"p{n}"})
        emu.split_range("d", "c", "0")
        emu.merge_ranges("d", "c", *emu.split_range("d", "c", "2"))
        before = _pkranges(emu, coll)[2]["PartitionKeyRanges"]
        per_range = {
            r["id"]: _ask_range(emu, coll, r["id"], feed=True)[2]["_count"] for r in before
        }
    for _ in range(2):  # the second start replays the compacted journal the first one wrote
        with start_in_background(data_dir=data) as emu, CosmosClient(emu.url, emu.key) as cosmos:
            coll = cosmos.get_database_client("d").get_container_client("c")
            after = _pkranges(emu, coll)[2]["PartitionKeyRanges"]
            assert [(r["id"], r["parents"], r["minInclusive"]) for r in after] == [
                (r["id"], r["parents"], r["minInclusive"]) for r in before
            ]
            assert {
                r["id"]: _ask_range(emu, coll, r["id"], feed=True)[2]["_count"] for r in after
            } == per_range
            assert _ask_range(emu, coll, "0", feed=True)[1]["x-ms-substatus"] == "1002"
            assert _ask_range(emu, coll, "3", feed=True)[1]["x-ms-substatus"] == "1007"
            assert sum(1 for _ in coll.query_items_change_feed(start_time="Beginning")) == ITEMS
    with start_in_background(data_dir=data) as emu:
        assert emu.split_range("d", "c", "1") == ["6", "7"]  # ids go on from where they were


def _kr(range_id: str, low: str, high: str) -> dict[str, object]:
    return {"id": range_id, "min": low, "max": high, "parents": ["0"], "g": 1}


def _journal_line(record: object) -> bytes:
    text = json.dumps(record, separators=(",", ":")).encode()
    return b"%08x " % zlib.crc32(text) + text + b"\n"


_MID = f"{1 << 125:032X}"
HOSTILE_RANGE_MAPS: list[tuple[str, object]] = [
    ("not an object", [1]),
    ("a gap", {"live": [_kr("1", "", _MID)], "gone": {"0": 1002}, "next": 2, "g": 1}),
    (
        "an overlap",
        {"live": [_kr("1", "", "FF"), _kr("2", _MID, "FF")], "gone": {}, "next": 3, "g": 1},
    ),
    ("live and gone", {"live": [_kr("1", "", "FF")], "gone": {"1": 1002}, "next": 2, "g": 1}),
    ("an id not below next", {"live": [_kr("7", "", "FF")], "gone": {}, "next": 2, "g": 1}),
    ("a foreign substatus", {"live": [_kr("1", "", "FF")], "gone": {"0": 500}, "next": 2, "g": 1}),
    ("no ranges", {"live": [], "gone": {}, "next": 2, "g": 1}),
    (
        "parents not a list",
        {"live": [{**_kr("1", "", "FF"), "parents": "0"}], "gone": {}, "next": 2, "g": 1},
    ),
]


@pytest.mark.parametrize(
    ("name", "ranges"), HOSTILE_RANGE_MAPS, ids=[n for n, _ in HOSTILE_RANGE_MAPS]
)
def test_a_hostile_range_map_in_the_journal_refuses_the_start(
    tmp_path: Path, name: str, ranges: object
) -> None:
    data = tmp_path / "cosmos"
    with start_in_background(data_dir=data) as emu, CosmosClient(emu.url, emu.key) as cosmos:
        rid = cosmos.create_database("d").create_container("c", PartitionKey("/pk")).read()["_rid"]
    journal = data / JOURNAL_NAME
    with journal.open("ab") as fh:
        fh.write(_journal_line({"ops": [{"o": "r", "c": rid, "m": ranges}]}))
        fh.write(_journal_line({"ops": []}))  # a good line after it: not a torn tail
    before = journal.read_bytes()
    with pytest.raises(JournalError, match="is invalid"):
        start_in_background(data_dir=data)
    assert journal.read_bytes() == before


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        b'{"database": "d", "container": "c"}',
        b'{"database": "d", "container": "c", "split": 0}',
        b'{"database": "d", "container": "c", "split": "0", "merge": ["1", "2"]}',
        b'{"database": "d", "container": "c", "merge": ["1", "2", "3"]}',
        b'{"database": "d", "container": "c", "merge": "12"}',
        b'{"database": "d", "container": "c", "split": "' + b"9" * 100 + b'"}',
        b'{"database": 5, "container": "c", "split": "0"}',
        b'{"database": "d", "container": "c", "split": "0", "extra": 1}',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_the_ranges_switch_answers_a_bad_change_with_400_and_changes_nothing(
    emulator: RunningCosmosEmulator, body: bytes
) -> None:
    with CosmosClient(emulator.url, emulator.key) as cosmos:
        cosmos.create_database("d").create_container("c", PartitionKey("/pk"))
    headers = {
        "Authorization": f"Bearer {emulator.fault_token}",
        "Content-Type": "application/json",
    }
    answer = httpx.post(emulator.url + "_emulator/ranges", content=body, headers=headers)
    assert answer.status_code == 400 and answer.json()["code"] == "BadRequest"
    assert emulator.partition_key_range_ids("d", "c") == ["0"]


# -- the aio SDK -----------------------------------------------------------------------------
async def test_the_aio_change_feed_continues_across_a_split(
    emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    database, name = _names(container)
    async with AioCosmosClient(emulator.url, emulator.key) as cosmos:
        aio = cosmos.get_database_client(database).get_container_client(name)
        pages = aio.query_items_change_feed(start_time="Beginning", max_item_count=8).by_page()
        seen = [d["id"] async for d in await pages.__anext__()]
        emulator.split_range(database, name, "0")
        await aio.create_item({"id": "late", "pk": "late"})
        async for page in pages:
            seen += [d["id"] async for d in page]
    assert sorted(seen) == sorted([f"i{n:02}" for n in range(ITEMS)] + ["late"])
