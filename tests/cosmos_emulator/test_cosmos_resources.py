"""Databases and containers through the real sync SDK."""

from __future__ import annotations

import pytest
from azure.cosmos import CosmosClient, DatabaseProxy, PartitionKey, exceptions
from cosmos_rest import unique, values

from cosmos_emulator import RunningCosmosEmulator


def test_database_lifecycle(client: CosmosClient) -> None:
    name = unique("db")
    created = client.create_database(name)
    assert created.read()["id"] == name
    with pytest.raises(exceptions.CosmosResourceExistsError):
        client.create_database(name)
    assert name in [d["id"] for d in client.list_databases()]
    found = list(
        client.query_databases(
            {  # type: ignore[arg-type]  # the SDK accepts a query spec too
                "query": "SELECT * FROM r WHERE r.id = @id",
                "parameters": [{"name": "@id", "value": name}],
            }
        )
    )
    assert [d["id"] for d in found] == [name]
    again = client.create_database_if_not_exists(name)
    assert again.read()["_rid"] == created.read()["_rid"]
    client.delete_database(name)
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        client.get_database_client(name).read()
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        client.delete_database(name)


def test_container_lifecycle(database: DatabaseProxy) -> None:
    name = unique("c")
    container = database.create_container_if_not_exists(
        name, PartitionKey("/orderId"), default_ttl=-1
    )
    props = container.read()
    assert props["partitionKey"]["paths"] == ["/orderId"]
    assert props["partitionKey"]["kind"] == "Hash"
    assert props["defaultTtl"] == -1
    assert props["_rid"] and props["_etag"] and props["_self"].endswith("/")
    same = database.create_container_if_not_exists(name, PartitionKey("/orderId"))
    assert same.read()["_rid"] == props["_rid"]
    with pytest.raises(exceptions.CosmosResourceExistsError):
        database.create_container(name, PartitionKey("/orderId"))
    assert [c["id"] for c in database.list_containers()] == [name]
    assert [
        c["id"]
        for c in database.query_containers(
            "SELECT * FROM r WHERE r.id = @id", parameters=[{"name": "@id", "value": name}]
        )
    ] == [name]

    replaced = database.replace_container(container, PartitionKey("/orderId"), default_ttl=30)
    assert replaced.read()["defaultTtl"] == 30
    assert replaced.read()["_etag"] != props["_etag"]

    database.delete_container(name)
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        database.get_container_client(name).read()


def test_deleting_a_database_deletes_its_containers_and_items(client: CosmosClient) -> None:
    name = unique("db")
    db = client.create_database(name)
    container = db.create_container("c", PartitionKey("/pk"))
    container.create_item({"id": "1", "pk": "a"})
    client.delete_database(name)
    db = client.create_database(name)
    container = db.create_container("c", PartitionKey("/pk"))
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("1", "a")
    client.delete_database(name)


def test_partition_key_cannot_change(database: DatabaseProxy) -> None:
    container = database.create_container(unique("c"), PartitionKey("/a"))
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        database.replace_container(container, PartitionKey("/b"))
    assert err.value.status_code == 400


def test_invalid_default_ttl_is_rejected(database: DatabaseProxy) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        database.create_container(unique("c"), PartitionKey("/pk"), default_ttl=0)
    assert err.value.status_code == 400


def test_hierarchical_partition_key(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("h"), PartitionKey(path=["/tenant", "/user"], kind="MultiHash")
    )
    assert container.read()["partitionKey"]["kind"] == "MultiHash"
    container.create_item({"id": "1", "tenant": "t", "user": "u1"})
    container.create_item({"id": "1", "tenant": "t", "user": "u2"})
    assert container.read_item("1", ["t", "u2"])["user"] == "u2"
    with pytest.raises(exceptions.CosmosResourceExistsError):
        container.create_item({"id": "1", "tenant": "t", "user": "u1"})
    rows = values(container.query_items("SELECT VALUE c.user FROM c", partition_key=["t", "u1"]))
    assert rows == ["u1"]


def test_account_metadata_advertises_the_served_url(
    client: CosmosClient, cosmos_emulator: RunningCosmosEmulator
) -> None:
    account = client.get_database_account()
    url = cosmos_emulator.url
    assert account.WritableLocations[0]["databaseAccountEndpoint"] == url
    assert account.ConsistencyPolicy is not None
    assert account.ConsistencyPolicy["defaultConsistencyLevel"] == "Session"
