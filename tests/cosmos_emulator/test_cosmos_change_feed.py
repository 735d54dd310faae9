"""Change feed, latest-version mode, as the SDK's pull model reads it (sync and aio).

The SDK sends `A-IM: Incremental feed`, scopes by partition key range id (plus EPK headers for
a partition key or a narrower feed range), starts with no condition (beginning),
`If-None-Match: *` (now) or `If-Modified-Since` (point in time), and continues from the
response ETag sent back as `If-None-Match`; 304 means nothing new.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey
from azure.cosmos.aio import ContainerProxy as AioContainerProxy
from cosmos_rest import call, unique

from cosmos_emulator import RunningCosmosEmulator, start_in_background


def _token(container: ContainerProxy) -> str:
    """The continuation the SDK leaves in the last response headers."""
    return str(container.client_connection.last_response_headers["etag"])


def _ids(docs: Any) -> list[str]:
    return [d["id"] for d in docs]


def test_from_the_beginning_each_live_item_once_at_its_latest_version_in_lsn_order(
    container: ContainerProxy,
) -> None:
    for i in range(4):
        container.create_item({"id": f"i{i}", "pk": "a" if i % 2 else "b", "v": 0})
    container.replace_item("i0", {"id": "i0", "pk": "b", "v": 1})
    container.patch_item("i1", "a", [{"op": "incr", "path": "/v", "value": 5}])
    container.delete_item("i2", "b")
    container.upsert_item({"id": "i3", "pk": "a", "v": 3})

    feed = list(container.query_items_change_feed(start_time="Beginning"))

    # i2 was deleted: latest-version mode does not show deletes. Order = last modification.
    assert _ids(feed) == ["i0", "i1", "i3"]
    assert [d["v"] for d in feed] == [1, 5, 3]
    lsns = [d["_lsn"] for d in feed]
    assert lsns == sorted(lsns) and len(set(lsns)) == 3
    for doc in feed:
        assert doc == container.read_item(doc["id"], doc["pk"])
    # The default (no start_time) starts from now: nothing yet.
    assert list(container.query_items_change_feed()) == []


def test_etag_and_lsn_move_on_every_kind_of_write(container: ContainerProxy) -> None:
    writes = [
        container.create_item({"id": "x", "pk": "a", "v": 0}),
        container.replace_item("x", {"id": "x", "pk": "a", "v": 1}),
        container.upsert_item({"id": "x", "pk": "a", "v": 2}),
        container.patch_item("x", "a", [{"op": "set", "path": "/v", "value": 3}]),
        container.execute_item_batch(
            [("replace", ("x", {"id": "x", "pk": "a", "v": 4}))], partition_key="a"
        )[0]["resourceBody"],
    ]
    assert len({w["_etag"] for w in writes}) == len(writes)
    lsns = [w["_lsn"] for w in writes]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(writes)
    # A stored `_lsn` in a body is the server's, never the client's.
    assert container.upsert_item({"id": "x", "pk": "a", "_lsn": 1})["_lsn"] > lsns[-1]
    assert [d.get("v") for d in _feed(container)] == [None]


def _feed(container: ContainerProxy, **kwargs: Any) -> list[dict[str, Any]]:
    return list(container.query_items_change_feed(start_time="Beginning", **kwargs))


def test_continuation_resumes_after_what_was_read_and_shows_updates_again(
    container: ContainerProxy,
) -> None:
    container.create_item({"id": "a1", "pk": "a"})
    container.create_item({"id": "b1", "pk": "b"})
    assert _ids(_feed(container)) == ["a1", "b1"]
    token = _token(container)

    assert list(container.query_items_change_feed(continuation=token)) == []
    token = _token(container)  # a continuation after "nothing new" still works
    container.create_item({"id": "a2", "pk": "a"})
    container.replace_item("a1", {"id": "a1", "pk": "a", "v": 2})
    again = list(container.query_items_change_feed(continuation=token))
    assert _ids(again) == ["a2", "a1"] and again[1]["v"] == 2
    # An old token replays from where it was taken, never earlier.
    assert _ids(container.query_items_change_feed(continuation=token)) == ["a2", "a1"]


def test_max_item_count_pages_in_order_and_the_token_of_a_page_continues_after_it(
    container: ContainerProxy,
) -> None:
    for i in range(7):
        container.create_item({"id": f"i{i}", "pk": f"p{i % 3}"})
    pages = container.query_items_change_feed(start_time="Beginning", max_item_count=3).by_page()
    first = list(next(pages))
    assert _ids(first) == ["i0", "i1", "i2"]
    after_first = _token(container)
    assert [len(list(p)) for p in pages] == [3, 1]
    rest = list(container.query_items_change_feed(continuation=after_first, max_item_count=3))
    assert _ids(rest) == [f"i{i}" for i in range(3, 7)]
    # Iterating the items (not pages) drains every page.
    assert len(list(container.query_items_change_feed(start_time="Beginning", max_item_count=2)))


def test_start_from_now_sees_only_later_writes(container: ContainerProxy) -> None:
    container.create_item({"id": "old", "pk": "a"})
    assert list(container.query_items_change_feed(start_time="Now")) == []
    token = _token(container)
    container.create_item({"id": "new", "pk": "b"})
    container.upsert_item({"id": "old", "pk": "a", "touched": True})
    assert _ids(container.query_items_change_feed(continuation=token)) == ["new", "old"]


def _next_second() -> datetime:
    """Waits (polling, bounded) until the clock enters a new whole second; returns its start."""
    start = int(time.time())
    deadline = time.monotonic() + 3
    while int(time.time()) == start:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return datetime.fromtimestamp(start + 1, UTC)


def test_start_from_a_point_in_time(container: ContainerProxy) -> None:
    container.create_item({"id": "before", "pk": "a"})
    container.create_item({"id": "rewritten", "pk": "a"})
    point = _next_second()  # If-Modified-Since has whole seconds, like `_ts`
    container.create_item({"id": "after", "pk": "b"})
    container.upsert_item({"id": "rewritten", "pk": "a", "v": 2})
    assert _ids(container.query_items_change_feed(start_time=point)) == ["after", "rewritten"]
    # (azure-cosmos 4.17.1 cannot parse its own continuation token of a point-in-time start:
    # it reads PointInTimeMs as seconds, so resuming such a feed is not tested here.)
    future = datetime.fromtimestamp(time.time() + 3600, UTC)
    assert list(container.query_items_change_feed(start_time=future)) == []


def test_by_partition_key_and_by_feed_range(container: ContainerProxy) -> None:
    for i in range(6):
        container.create_item({"id": f"i{i}", "pk": "a" if i % 2 else "b"})
    assert _ids(_feed(container, partition_key="a")) == ["i1", "i3", "i5"]
    token = _token(container)
    container.create_item({"id": "b-late", "pk": "b"})
    container.create_item({"id": "a-late", "pk": "a"})
    assert _ids(container.query_items_change_feed(continuation=token)) == ["a-late"]

    ranges = list(container.read_feed_ranges())
    assert len(ranges) == 1
    assert len(_feed(container, feed_range=ranges[0])) == 8
    only_b = container.feed_range_from_partition_key("b")
    assert _ids(_feed(container, feed_range=only_b)) == ["i0", "i2", "i4", "b-late"]


@pytest.mark.filterwarnings("ignore:'partition_key_range_id' is deprecated:DeprecationWarning")
def test_by_partition_key_range_id_with_the_plain_etag_as_continuation(
    container: ContainerProxy,
) -> None:
    """The SDK's older form: a range id, and the server's own ETag as the continuation."""
    for i in range(3):
        container.create_item({"id": f"i{i}", "pk": "a"})
    feed = container.query_items_change_feed(
        partition_key_range_id="0", start_time="Beginning", max_item_count=2
    )
    assert _ids(feed) == ["i0", "i1", "i2"]
    token = _token(container)
    assert token == f'"{container.read_item("i2", "a")["_lsn"]}"'
    container.create_item({"id": "new", "pk": "b"})
    again = container.query_items_change_feed(partition_key_range_id="0", continuation=token)
    assert _ids(again) == ["new"]


def test_hierarchical_partition_key_prefix(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("h"), PartitionKey(["/tenant", "/user"], kind="MultiHash")
    )
    container.create_item({"id": "1", "tenant": "t1", "user": "u1"})
    container.create_item({"id": "2", "tenant": "t2", "user": "u1"})
    container.create_item({"id": "3", "tenant": "t1", "user": "u2"})
    assert _ids(_feed(container, partition_key=["t1"])) == ["1", "3"]
    assert _ids(_feed(container, partition_key=["t1", "u2"])) == ["3"]


def test_expired_items_leave_the_feed(ttl_container: ContainerProxy) -> None:
    ttl_container.create_item({"id": "short", "pk": "a", "ttl": 1})
    ttl_container.create_item({"id": "kept", "pk": "a"})
    assert _ids(_feed(ttl_container)) == ["short", "kept"]
    deadline = time.monotonic() + 5
    while _ids(_feed(ttl_container)) != ["kept"]:
        assert time.monotonic() < deadline, "the expired item stayed in the change feed"
        time.sleep(0.05)


def test_the_wire_304_etag_and_bad_tokens(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    created = container.create_item({"id": "w", "pk": "a"})
    url, key = cosmos_emulator.url, cosmos_emulator.key
    path = container.container_link + "/docs/"
    feed = {"A-IM": "Incremental feed", "x-ms-documentdb-partitionkeyrangeid": "0"}
    status, headers, body = call(url, key, "GET", path, headers=feed)
    assert status == 200 and _ids(body["Documents"]) == ["w"] and body["_count"] == 1
    assert headers["etag"] == f'"{created["_lsn"]}"' and headers["x-ms-item-count"] == "1"
    status, headers_304, body = call(
        url, key, "GET", path, headers={**feed, "If-None-Match": headers["etag"]}
    )
    assert status == 304 and body is None and headers_304["etag"] >= headers["etag"]
    status, headers_now, _ = call(url, key, "GET", path, headers={**feed, "If-None-Match": "*"})
    assert status == 304 and headers_now["etag"].strip('"').isdigit()
    for bad in (
        {"If-None-Match": '"abc"'},
        {"If-None-Match": '"' + "9" * 30 + '"'},
        {"If-Modified-Since": "yesterday"},
        {"If-Modified-Since": "Mon, 01 Jan 99999999999 00:00:00 GMT"},
    ):
        status, _, body = call(url, key, "GET", path, headers={**feed, **bad})
        assert status == 400, bad
    status, _, body = call(
        url, key, "GET", path, headers={**feed, "x-ms-documentdb-partitionkeyrangeid": "7"}
    )
    assert status == 400
    # Without A-IM it is still the plain read feed.
    status, headers, body = call(url, key, "GET", path)
    assert status == 200 and _ids(body["Documents"]) == ["w"] and "etag" not in headers


async def test_aio_change_feed(aio_container: AioContainerProxy) -> None:
    for i in range(5):
        await aio_container.create_item({"id": f"i{i}", "pk": "a" if i % 2 else "b"})
    await aio_container.delete_item("i4", "b")
    await aio_container.upsert_item({"id": "i0", "pk": "b", "v": 1})
    feed = [d async for d in aio_container.query_items_change_feed(start_time="Beginning")]
    assert _ids(feed) == ["i1", "i2", "i3", "i0"] and feed[-1]["v"] == 1
    token = str(aio_container.client_connection.last_response_headers["etag"])
    assert [d async for d in aio_container.query_items_change_feed(continuation=token)] == []
    pages = aio_container.query_items_change_feed(start_time="Beginning", max_item_count=3)
    sizes = [len([d async for d in page]) async for page in pages.by_page()]
    assert sizes[:2] == [3, 1] and sum(sizes) == 4

    by_pk = aio_container.query_items_change_feed(start_time="Beginning", partition_key="a")
    assert _ids([d async for d in by_pk]) == ["i1", "i3"]

    now = aio_container.query_items_change_feed(start_time="Now")
    assert [d async for d in now] == []
    token = str(aio_container.client_connection.last_response_headers["etag"])
    await aio_container.create_item({"id": "new", "pk": "a"})
    paged = aio_container.query_items_change_feed(continuation=token, max_item_count=1)
    assert _ids([d async for d in paged]) == ["new"]


def test_a_continuation_survives_a_restart_with_a_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        client = CosmosClient(emu.url, emu.key)
        container = client.create_database("d").create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "before", "pk": "a"})
        assert _ids(_feed(container)) == ["before"]
        token = _token(container)
        last = container.read_item("before", "a")["_lsn"]
    with start_in_background(data_dir=data) as emu:
        client = CosmosClient(emu.url, emu.key)
        container = client.get_database_client("d").get_container_client("c")
        assert container.read_item("before", "a")["_lsn"] == last
        assert list(container.query_items_change_feed(continuation=token)) == []
        created = container.create_item({"id": "after", "pk": "b"})
        assert created["_lsn"] > last
        assert _ids(container.query_items_change_feed(continuation=token)) == ["after"]
