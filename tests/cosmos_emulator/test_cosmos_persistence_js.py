"""Issue 26's writes under `--data` (issue 22): journaled, LSN-indexed, back after a restart.

Bulk operations, bare-array patches and writes with `x-ms-indexing-directive` go through the
same store calls as every other write, so they reach the journal and the change feed's LSN
indexes; an item's "left out of queries" flag and a container's computed properties and
indexing policy are part of what the journal keeps. Each test restarts twice: the first start
replays the journal as it was written request by request, the second the snapshot the first
start compacted it into (both write item records).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey
from azure.cosmos.documents import IndexingDirective
from js_requests import bare_array_body, send_bulk

from cosmos_emulator import RunningCosmosEmulator, start_in_background
from cosmos_emulator.journal import JOURNAL_NAME, JournalError

RESTARTS = ("replaying the journal as written", "replaying the compacted snapshot")


def _container(emu: RunningCosmosEmulator, name: str) -> ContainerProxy:
    return CosmosClient(emu.url, emu.key).get_database_client("d").get_container_client(name)


def _queried_ids(container: ContainerProxy) -> list[str]:
    rows = container.query_items("SELECT c.id FROM c", enable_cross_partition_query=True)
    return sorted(row["id"] for row in rows)


def _feed_ids(container: ContainerProxy, **scope: Any) -> list[str]:
    return [d["id"] for d in container.query_items_change_feed(start_time="Beginning", **scope)]


def test_excluded_items_stay_out_of_queries_after_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        database = CosmosClient(emu.url, emu.key).create_database("d")
        plain = database.create_container("plain", PartitionKey("/pk"))
        plain.create_item({"id": "in", "pk": "a"})
        plain.create_item({"id": "out", "pk": "a"}, indexing_directive=IndexingDirective.Exclude)
        # Indexed, then replaced with Exclude (the Python SDK offers the option on create only,
        # so the header goes as the JavaScript SDK sends it): the last write decides.
        plain.create_item({"id": "dropped", "pk": "b"})
        plain.replace_item(
            "dropped", {"id": "dropped", "pk": "b"}, headers={"x-ms-indexing-directive": "Exclude"}
        )
        # Excluded, then upserted without a directive: back in the index.
        plain.create_item({"id": "back", "pk": "b"}, indexing_directive=IndexingDirective.Exclude)
        plain.upsert_item({"id": "back", "pk": "b", "v": 2})
        manual = database.create_container(
            "manual",
            PartitionKey("/pk"),
            indexing_policy={"indexingMode": "consistent", "automatic": False},
        )
        manual.create_item({"id": "unlisted", "pk": "a"})
        manual.create_item({"id": "inc", "pk": "a"}, indexing_directive=IndexingDirective.Include)
        assert _queried_ids(plain) == ["back", "in"]
        assert _queried_ids(manual) == ["inc"]

    for restart in RESTARTS:
        with start_in_background(data_dir=data) as emu:
            plain, manual = _container(emu, "plain"), _container(emu, "manual")
            assert _queried_ids(plain) == ["back", "in"], restart
            assert _queried_ids(manual) == ["inc"], restart
            # Still stored: point reads and the change feed see every item.
            assert plain.read_item("out", "a")["id"] == "out"
            assert _feed_ids(plain) == ["in", "out", "dropped", "back"]
            assert _feed_ids(manual) == ["unlisted", "inc"]
            assert manual.read()["indexingPolicy"]["automatic"] is False
    with start_in_background(data_dir=data) as emu:
        # The restored policy still decides new writes; a default write re-indexes an item.
        manual = _container(emu, "manual")
        manual.create_item({"id": "new", "pk": "a"})
        plain = _container(emu, "plain")
        plain.upsert_item({"id": "out", "pk": "a"})
        assert _queried_ids(manual) == ["inc"]
        assert _queried_ids(plain) == ["back", "in", "out"]


def test_computed_properties_come_back_with_their_replacement(tmp_path: Path) -> None:
    data = tmp_path / "data"
    lower = {"name": "cp_lower", "query": "SELECT VALUE LOWER(c.name) FROM c"}
    total = {"name": "cp_total", "query": "SELECT VALUE c.price * c.qty FROM c"}
    with start_in_background(data_dir=data) as emu:
        database = CosmosClient(emu.url, emu.key).create_database("d")
        products = database.create_container(
            "products", PartitionKey("/pk"), computed_properties=[lower]
        )
        products.create_item({"id": "1", "pk": "a", "name": "Widget", "price": 3, "qty": 2})
        products.create_item({"id": "2", "pk": "a", "name": "GADGET", "price": 10, "qty": 1})
        # The replace is journaled as its own record: the restart must end with `total` only.
        database.replace_container(products, PartitionKey("/pk"), computed_properties=[total])

    for restart in RESTARTS:
        with start_in_background(data_dir=data) as emu:
            products = _container(emu, "products")
            assert products.read()["computedProperties"] == [total], restart
            rows = products.query_items(
                "SELECT c.id, c.cp_total, c.cp_lower FROM c WHERE c.cp_total > 5 "
                "ORDER BY c.cp_total DESC",
                partition_key="a",
            )
            assert list(rows) == [{"id": "2", "cp_total": 10}, {"id": "1", "cp_total": 6}]


def _bulk(kind: str, key: str, **fields: Any) -> dict[str, Any]:
    """A bulk operation as the JavaScript SDK sends it: its own partition key, a JSON string."""
    return {"operationType": kind, "partitionKey": json.dumps([key]), **fields}


def test_bulk_and_bare_array_patch_writes_are_journaled_and_in_the_change_feed(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        database = CosmosClient(emu.url, emu.key).create_database("d")
        container = database.create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "p", "pk": "a", "n": 1})
        container.create_item({"id": "gone", "pk": "b"})
        ops = [{"op": "incr", "path": "/n", "value": 10}]
        container.patch_item("p", "a", ops, raw_request_hook=bare_array_body(ops))
        incr_100 = [{"op": "incr", "path": "/n", "value": 100}]
        status, results = send_bulk(
            container,
            [
                _bulk("Create", "a", resourceBody={"id": "x", "pk": "a"}),
                _bulk("Create", "a", resourceBody={"id": "x", "pk": "a"}),  # 409: nothing undone
                _bulk("Upsert", "b", resourceBody={"id": "y", "pk": "b"}),
                _bulk("Delete", "b", id="gone"),
                _bulk("Patch", "a", id="p", resourceBody=incr_100),
            ],
        )
        assert status == 207
        assert [r["statusCode"] for r in results] == [201, 409, 201, 204, 200]
        # The LSN indexes saw every write: the feed in write order, whole and by partition key.
        assert _feed_ids(container) == ["x", "y", "p"]
        assert _feed_ids(container, partition_key="a") == ["x", "p"]
        before = sorted(
            container.query_items("SELECT * FROM c", enable_cross_partition_query=True),
            key=lambda d: d["id"],
        )

    for restart in RESTARTS:
        with start_in_background(data_dir=data) as emu:
            container = _container(emu, "c")
            after = container.query_items("SELECT * FROM c", enable_cross_partition_query=True)
            assert sorted(after, key=lambda d: d["id"]) == before, restart
            assert container.read_item("p", "a")["n"] == 111
            assert _feed_ids(container) == ["x", "y", "p"]
            assert _feed_ids(container, partition_key="a") == ["x", "p"]
            assert _feed_ids(container, partition_key="b") == ["y"]


def _framed(record: dict[str, Any]) -> bytes:
    text = json.dumps(record, separators=(",", ":")).encode()
    return b"%08x " % zlib.crc32(text) + text + b"\n"


BAD_COMPUTED = [{"name": "id", "query": "SELECT VALUE c.a FROM c"}]  # a reserved name


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param(lambda item, props: {**item, "n": "no"}, id="index flag not a boolean"),
        pytest.param(
            lambda item, props: {
                "o": "c~",
                "r": props["_rid"],
                "p": {**props, "computedProperties": BAD_COMPUTED},
            },
            id="computed properties the emulator refuses",
        ),
    ],
)
def test_a_hostile_record_of_these_fields_refuses_the_start(tmp_path: Path, hostile: Any) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        database = CosmosClient(emu.url, emu.key).create_database("d")
        container = database.create_container("c", PartitionKey("/pk"))
        doc = container.create_item({"id": "1", "pk": "a"})
        props = container.read()
    item = {"o": "i", "c": props["_rid"], "k": '["a"]', "d": doc, "w": 1.0, "s": 1}
    journal = data / JOURNAL_NAME
    # A good record after it: corruption, not a torn tail.
    journal.write_bytes(
        journal.read_bytes() + _framed({"ops": [hostile(item, props)]}) + _framed({"ops": []})
    )
    written = journal.read_bytes()
    with pytest.raises(JournalError, match="is invalid"):
        start_in_background(data_dir=data)
    assert journal.read_bytes() == written  # refused, nothing rewritten
