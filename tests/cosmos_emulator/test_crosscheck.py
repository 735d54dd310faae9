"""Generic SDK cases run against our emulator AND @vercel/cosmosdb-server.

Only cases the third-party server gets right are here (see FACTS.md for its gaps), so a second,
independent implementation keeps our answers honest. The vercel variant is skipped only when
Node is missing outside CI; in CI (`CI=true`) it must run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey, exceptions

from cosmos_emulator import WELL_KNOWN_KEY, RunningCosmosEmulator

pytestmark = [
    pytest.mark.crosscheck,
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]


@pytest.fixture(params=["ours", "vercel"])
def server_container(request: pytest.FixtureRequest) -> Iterator[ContainerProxy]:
    if request.param == "ours":
        emu: RunningCosmosEmulator = request.getfixturevalue("cosmos_emulator")
        url, key = emu.url, emu.key
    else:
        url, key = request.getfixturevalue("vercel_url"), WELL_KNOWN_KEY
    client = CosmosClient(url, key)
    db = client.create_database(f"x-{uuid.uuid4().hex[:8]}")
    try:
        yield db.create_container(f"c-{uuid.uuid4().hex[:8]}", PartitionKey("/pk"))
    finally:
        client.delete_database(db)


def test_create_then_read(server_container: ContainerProxy) -> None:
    created = server_container.create_item({"id": "o1", "pk": "a", "v": 1})
    read = server_container.read_item("o1", partition_key="a")
    assert read["v"] == 1
    assert read["_etag"] == created["_etag"]
    for prop in ("_rid", "_self", "_ts"):
        assert prop in read


def test_duplicate_id_conflicts_only_within_a_partition(server_container: ContainerProxy) -> None:
    server_container.create_item({"id": "o1", "pk": "a"})
    with pytest.raises(exceptions.CosmosResourceExistsError):
        server_container.create_item({"id": "o1", "pk": "a"})
    server_container.create_item({"id": "o1", "pk": "b"})


def test_parameterised_query_in_a_partition(server_container: ContainerProxy) -> None:
    for i, pk in enumerate(["a", "a", "b"]):
        server_container.create_item({"id": f"o{i}", "pk": pk, "status": "open" if i else "done"})
    # @vercel/cosmosdb-server needs the partition key in the WHERE of a partition-scoped query.
    rows = list(
        server_container.query_items(
            "SELECT * FROM c WHERE c.pk = @pk AND c.status = @s",
            parameters=[{"name": "@pk", "value": "a"}, {"name": "@s", "value": "open"}],
            partition_key="a",
        )
    )
    assert [r["id"] for r in rows] == ["o1"]


def test_cross_partition_query(server_container: ContainerProxy) -> None:
    for i, pk in enumerate(["a", "b", "c"]):
        server_container.create_item({"id": f"o{i}", "pk": pk, "n": i})
    rows = list(
        server_container.query_items(
            "SELECT * FROM c WHERE c.n >= @n",
            parameters=[{"name": "@n", "value": 1}],
            enable_cross_partition_query=True,
        )
    )
    assert sorted(r["id"] for r in rows) == ["o1", "o2"]


def test_replace_with_a_stale_etag_is_412(server_container: ContainerProxy) -> None:
    first = server_container.create_item({"id": "o1", "pk": "a", "v": 1})
    second = server_container.replace_item("o1", {"id": "o1", "pk": "a", "v": 2})
    assert second["_etag"] != first["_etag"]
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        server_container.replace_item(
            "o1",
            {"id": "o1", "pk": "a", "v": 3},
            etag=first["_etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    assert server_container.read_item("o1", "a")["v"] == 2


def test_patch_set(server_container: ContainerProxy) -> None:
    server_container.create_item({"id": "o1", "pk": "a", "v": 1})
    patched = server_container.patch_item(
        "o1", "a", [{"op": "set", "path": "/status", "value": "done"}]
    )
    assert patched["status"] == "done" and patched["v"] == 1
    assert server_container.read_item("o1", "a")["status"] == "done"


def test_single_create_batch(server_container: ContainerProxy) -> None:
    results = server_container.execute_item_batch(
        [("create", ({"id": "b1", "pk": "a"},))], partition_key="a"
    )
    assert results[0]["statusCode"] == 201
    assert server_container.read_item("b1", "a")["id"] == "b1"
