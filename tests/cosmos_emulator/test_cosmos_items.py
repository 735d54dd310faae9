"""Point operations on items through the real sync SDK (plus raw REST where the SDK refuses)."""

from __future__ import annotations

import time

import pytest
from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey, exceptions
from cosmos_rest import call

from cosmos_emulator import RunningCosmosEmulator


def test_create_then_read_returns_the_item_with_system_properties(
    container: ContainerProxy,
) -> None:
    before = int(time.time())
    created = container.create_item({"id": "o1", "pk": "a", "n": 1})
    assert created["n"] == 1
    for prop in ("_rid", "_self", "_etag", "_ts"):
        assert prop in created
    assert before <= created["_ts"] <= int(time.time()) + 1
    read = container.read_item("o1", partition_key="a")
    assert read == created
    headers = container.client_connection.last_response_headers
    assert headers["etag"] == created["_etag"]


def test_duplicate_id_in_one_partition_conflicts_but_not_across_partitions(
    container: ContainerProxy,
) -> None:
    container.create_item({"id": "o1", "pk": "a"})
    with pytest.raises(exceptions.CosmosResourceExistsError) as err:
        container.create_item({"id": "o1", "pk": "a"})
    assert err.value.status_code == 409
    other = container.create_item({"id": "o1", "pk": "b"})
    assert other["pk"] == "b"


def test_point_read_of_a_missing_item_is_404(container: ContainerProxy) -> None:
    """@vercel/cosmosdb-server answers 500 here."""
    with pytest.raises(exceptions.CosmosResourceNotFoundError) as err:
        container.read_item("missing", partition_key="a")
    assert err.value.status_code == 404
    container.create_item({"id": "x", "pk": "a"})
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("x", partition_key="other")


def test_replace_upsert_delete_and_etags(container: ContainerProxy) -> None:
    first = container.create_item({"id": "o1", "pk": "a", "v": 1})
    replaced = container.replace_item("o1", {"id": "o1", "pk": "a", "v": 2})
    assert replaced["v"] == 2
    assert replaced["_etag"] != first["_etag"]
    assert replaced["_rid"] == first["_rid"]
    upserted = container.upsert_item({"id": "o1", "pk": "a", "v": 3})
    assert upserted["v"] == 3 and upserted["_etag"] != replaced["_etag"]
    fresh = container.upsert_item({"id": "o2", "pk": "a", "v": 1})
    assert fresh["v"] == 1
    container.delete_item("o1", partition_key="a")
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("o1", partition_key="a")
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.delete_item("o1", partition_key="a")
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.replace_item("o1", {"id": "o1", "pk": "a"})


def test_upsert_status_codes(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    path = f"/{container.container_link}/docs/"
    headers = {"x-ms-documentdb-partitionkey": '["a"]', "x-ms-documentdb-is-upsert": "True"}
    status, _, _ = call(
        cosmos_emulator.url, cosmos_emulator.key, "POST", path, {"id": "u", "pk": "a"}, headers
    )
    assert status == 201
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "POST",
        path,
        {"id": "u", "pk": "a", "v": 2},
        headers,
    )
    assert status == 200 and body["v"] == 2


def test_if_match_with_a_stale_etag_is_412(container: ContainerProxy) -> None:
    first = container.create_item({"id": "o1", "pk": "a", "v": 1})
    current = container.replace_item("o1", {"id": "o1", "pk": "a", "v": 2})
    with pytest.raises(exceptions.CosmosAccessConditionFailedError) as err:
        container.replace_item(
            "o1",
            {"id": "o1", "pk": "a", "v": 3},
            etag=first["_etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    assert err.value.status_code == 412
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        container.delete_item(
            "o1",
            partition_key="a",
            etag=first["_etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        container.upsert_item(
            {"id": "o1", "pk": "a"},
            etag=first["_etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    ok = container.replace_item(
        "o1",
        {"id": "o1", "pk": "a", "v": 4},
        etag=current["_etag"],
        match_condition=MatchConditions.IfNotModified,
    )
    assert ok["v"] == 4


def test_upsert_if_match_creates_a_missing_item(container: ContainerProxy) -> None:
    """If-Match guards only the replace path of an upsert (as in Cosmos)."""
    created = container.upsert_item(
        {"id": "new", "pk": "a"}, etag='"whatever"', match_condition=MatchConditions.IfNotModified
    )
    assert created["id"] == "new"


def test_if_none_match_on_read_is_304(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    item = container.create_item({"id": "o1", "pk": "a"})
    path = f"/{container.container_link}/docs/o1/"
    pk = {"x-ms-documentdb-partitionkey": '["a"]'}
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "GET",
        path,
        headers={**pk, "If-None-Match": item["_etag"]},
    )
    assert status == 304 and body is None
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "GET",
        path,
        headers={**pk, "If-None-Match": '"stale"'},
    )
    assert status == 200 and body["id"] == "o1"


@pytest.mark.parametrize("bad_id", ["a/b", "a\\b", "a?b", "a#b", "x" * 1024, "\u00e9" * 512, ""])
def test_invalid_ids_are_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy, bad_id: str
) -> None:
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "POST",
        f"/{container.container_link}/docs/",
        {"id": bad_id, "pk": "a"},
        {"x-ms-documentdb-partitionkey": '["a"]'},
    )
    assert status == 400, body
    assert body["code"] == "BadRequest"


def test_an_item_id_of_1023_bytes_is_accepted(container: ContainerProxy) -> None:
    """Cosmos's quota for an item id is 1,023 bytes (255 characters is the one for names)."""
    for long_id in ("x" * 1023, "\u00e9" * 511 + "x"):
        container.create_item({"id": long_id, "pk": "a"})
        assert container.read_item(long_id, partition_key="a")["id"] == long_id


def test_over_long_ids_are_refused_with_cosmoss_text(
    client: CosmosClient, database: DatabaseProxy, container: ContainerProxy
) -> None:
    """The words the azure-cosmos SDK's own `test_create_illegal_characters` matches."""
    name = "ID_with_more_than_255" + "_add" * 255
    for create in (
        lambda: client.create_database(name),
        lambda: database.create_container(name, PartitionKey("/pk")),
    ):
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:
            create()
        assert err.value.status_code == 400
        assert "Ensure to provide a unique non-empty string less than '255' characters." in (
            err.value.message
        )
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.create_item({"id": name, "pk": "a"})
    assert err.value.status_code == 400
    assert "Ensure to provide a unique non-empty string less than '1024' characters." in (
        err.value.message
    )


def test_items_over_2_mb_are_413(container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.create_item({"id": "big", "pk": "a", "blob": "x" * (2 * 1024 * 1024 + 1)})
    assert err.value.status_code == 413
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("big", partition_key="a")


def test_partition_key_mismatch_is_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    status, _, _ = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "POST",
        f"/{container.container_link}/docs/",
        {"id": "1", "pk": "a"},
        {"x-ms-documentdb-partitionkey": '["b"]'},
    )
    assert status == 400


def test_item_without_the_partition_key_property_lives_in_the_undefined_partition(
    container: ContainerProxy,
) -> None:
    container.create_item({"id": "nopk"})
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("nopk", partition_key="a")


def test_ids_with_spaces_and_unicode_round_trip(container: ContainerProxy) -> None:
    for item_id in ("with space", "ünïcødé", "a+b=c&d"):
        container.create_item({"id": item_id, "pk": "a"})
        assert container.read_item(item_id, partition_key="a")["id"] == item_id
        container.delete_item(item_id, partition_key="a")


def test_read_all_items_pages(container: ContainerProxy) -> None:
    for i in range(7):
        container.create_item({"id": f"i{i}", "pk": "a" if i % 2 else "b"})
    pages = list(container.read_all_items(max_item_count=3).by_page())
    assert [len(list(p)) for p in pages] == [3, 3, 1]
