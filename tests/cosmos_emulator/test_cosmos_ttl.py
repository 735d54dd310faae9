"""Time to live: container defaultTtl (null, -1, n) and item ttl."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey, exceptions
from cosmos_rest import unique, values

from cosmos_emulator import RunningCosmosEmulator


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def is_gone(container: ContainerProxy, item_id: str, pk: str) -> bool:
    try:
        container.read_item(item_id, pk)
    except exceptions.CosmosResourceNotFoundError:
        return True
    return False


def test_item_ttl_expires_the_item_for_reads_and_queries(ttl_container: ContainerProxy) -> None:
    """@vercel/cosmosdb-server ignores item TTL."""
    written = time.monotonic()
    ttl_container.create_item({"id": "short", "pk": "a", "ttl": 1})
    ttl_container.create_item({"id": "forever", "pk": "a"})
    assert ttl_container.read_item("short", "a")["ttl"] == 1
    assert wait_until(lambda: is_gone(ttl_container, "short", "a"))
    assert time.monotonic() - written >= 0.9
    ids = [d["id"] for d in ttl_container.query_items("SELECT * FROM c", partition_key="a")]
    assert ids == ["forever"]
    cross = values(
        ttl_container.query_items("SELECT VALUE COUNT(1) FROM c", enable_cross_partition_query=True)
    )
    assert cross == [1]
    # An expired id is free again.
    ttl_container.create_item({"id": "short", "pk": "a"})


def test_container_default_ttl_applies_and_item_ttl_overrides(database: DatabaseProxy) -> None:
    container = database.create_container(unique("c"), PartitionKey("/pk"), default_ttl=1)
    container.create_item({"id": "default", "pk": "a"})
    container.create_item({"id": "pinned", "pk": "a", "ttl": -1})
    container.create_item({"id": "longer", "pk": "a", "ttl": 60})
    assert wait_until(lambda: is_gone(container, "default", "a"))
    assert container.read_item("pinned", "a")["id"] == "pinned"
    assert container.read_item("longer", "a")["id"] == "longer"


def test_item_ttl_is_ignored_without_a_container_default(container: ContainerProxy) -> None:
    container.create_item({"id": "x", "pk": "a", "ttl": 1})
    time.sleep(1.3)  # nothing to poll for: the assertion is that nothing happens
    assert container.read_item("x", "a")["id"] == "x"


def test_rewriting_an_item_restarts_its_ttl(ttl_container: ContainerProxy) -> None:
    first_write = time.monotonic()
    ttl_container.create_item({"id": "x", "pk": "a", "ttl": 2})
    time.sleep(1.2)
    ttl_container.upsert_item({"id": "x", "pk": "a", "ttl": 3})
    # Sleeping past the first expiry is the point: nothing to poll for until then.
    time.sleep(max(0.0, 2.4 - (time.monotonic() - first_write)))
    assert ttl_container.read_item("x", "a")["id"] == "x"
    assert wait_until(lambda: is_gone(ttl_container, "x", "a"))


def test_expired_items_are_purged_in_the_background(fresh_emulator: RunningCosmosEmulator) -> None:
    from azure.cosmos import CosmosClient

    client = CosmosClient(fresh_emulator.url, fresh_emulator.key)
    container = client.create_database("d").create_container(
        "c", PartitionKey("/pk"), default_ttl=-1
    )
    for i in range(5):
        container.create_item({"id": str(i), "pk": "a", "ttl": 1})
    assert fresh_emulator.stats()["stored_items"] == 5
    assert wait_until(lambda: fresh_emulator.stats()["stored_items"] == 0, timeout=5)


@pytest.mark.parametrize("bad_ttl", [0, -2, "10", 1.5])
def test_invalid_item_ttl_is_400(ttl_container: ContainerProxy, bad_ttl: object) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        ttl_container.create_item({"id": "x", "pk": "a", "ttl": bad_ttl})
    assert err.value.status_code == 400
