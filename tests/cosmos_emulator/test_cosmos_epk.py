"""Effective-partition-key scoped requests: hierarchical key prefixes and feed ranges."""

from __future__ import annotations

from typing import Any

import pytest
from azure.cosmos import DatabaseProxy, PartitionKey
from azure.cosmos.partition_key import PartitionKey as SdkPartitionKey
from cosmos_rest import unique, values

from cosmos_emulator.epk import effective_partition_key


@pytest.mark.parametrize(
    "values",
    [["a"], [""], [1], [2.5], [-7], [True], [False], [None], ["ünï漢"], ["x" * 300]],
)
def test_hash_epk_matches_the_sdk(values: list[Any]) -> None:
    sdk = SdkPartitionKey(path="/pk", kind="Hash")
    assert effective_partition_key(values, "Hash") == sdk._get_effective_partition_key_string(
        values
    )


@pytest.mark.parametrize("values", [["t"], ["t", "u"], ["t", 1, None], [True, "x", 3.25]])
def test_multi_hash_epk_matches_the_sdk(values: list[Any]) -> None:
    sdk = SdkPartitionKey(path=["/a", "/b", "/c"], kind="MultiHash")
    assert effective_partition_key(values, "MultiHash") == sdk._get_effective_partition_key_string(
        values
    )


def test_query_by_a_prefix_of_a_hierarchical_key(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("h"), PartitionKey(path=["/tenant", "/user"], kind="MultiHash")
    )
    for item_id, tenant, user in [("1", "a", "x"), ("2", "a", "y"), ("3", "b", "x")]:
        container.create_item({"id": item_id, "tenant": tenant, "user": user})
    rows = container.query_items("SELECT VALUE c.id FROM c", partition_key=["a"])
    assert sorted(values(rows)) == ["1", "2"]
    assert values(container.query_items("SELECT VALUE c.id FROM c", partition_key=["b"])) == ["3"]
    assert values(container.query_items("SELECT VALUE c.id FROM c", partition_key=["z"])) == []


def test_query_by_feed_range(database: DatabaseProxy) -> None:
    container = database.create_container(unique("f"), PartitionKey("/pk"))
    for i in range(5):
        container.create_item({"id": str(i), "pk": f"p{i}"})
    ranges = list(container.read_feed_ranges())
    assert len(ranges) == 1
    everything = container.query_items("SELECT VALUE c.id FROM c", feed_range=ranges[0])
    assert sorted(values(everything)) == ["0", "1", "2", "3", "4"]
    one = container.feed_range_from_partition_key("p3")
    assert values(container.query_items("SELECT VALUE c.id FROM c", feed_range=one)) == ["3"]
