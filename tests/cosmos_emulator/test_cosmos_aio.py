"""The same behaviours through the async SDK (aiohttp transport)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.cosmos import exceptions
from azure.cosmos.aio import ContainerProxy


async def test_point_operations(aio_container: ContainerProxy) -> None:
    created = await aio_container.create_item({"id": "o1", "pk": "a", "v": 1})
    with pytest.raises(exceptions.CosmosResourceExistsError):
        await aio_container.create_item({"id": "o1", "pk": "a"})
    await aio_container.create_item({"id": "o1", "pk": "b"})
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        await aio_container.read_item("missing", "a")
    assert (await aio_container.read_item("o1", "a")) == created
    replaced = await aio_container.replace_item("o1", {"id": "o1", "pk": "a", "v": 2})
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        await aio_container.replace_item(
            "o1",
            {"id": "o1", "pk": "a", "v": 3},
            etag=created["_etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    patched = await aio_container.patch_item(
        "o1",
        "a",
        [{"op": "incr", "path": "/v", "value": 1}],
        filter_predicate="from c where c.v = 2",
    )
    assert patched["v"] == 3 and patched["_etag"] != replaced["_etag"]
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        await aio_container.patch_item(
            "o1",
            "a",
            [{"op": "set", "path": "/x", "value": 1}],
            filter_predicate="from c where c.v = 2",
        )
    assert (await aio_container.upsert_item({"id": "o1", "pk": "a", "v": 9}))["v"] == 9
    await aio_container.delete_item("o1", "a")
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        await aio_container.read_item("o1", "a")


async def test_batch_all_operations_and_atomicity(aio_container: ContainerProxy) -> None:
    await aio_container.create_item({"id": "r", "pk": "a", "v": 1})
    results = await aio_container.execute_item_batch(
        [
            ("create", ({"id": "c", "pk": "a"},)),
            ("upsert", ({"id": "r", "pk": "a", "v": 2},)),
            ("read", ("r",)),
            ("replace", ("c", {"id": "c", "pk": "a", "x": 1})),
            ("patch", ("c", [{"op": "set", "path": "/y", "value": 2}])),
            ("delete", ("c",)),
        ],
        partition_key="a",
    )
    assert [r["statusCode"] for r in results] == [201, 200, 200, 200, 200, 204]
    with pytest.raises(exceptions.CosmosBatchOperationError) as err:
        await aio_container.execute_item_batch(
            [
                ("create", ({"id": "n", "pk": "a"},)),
                ("upsert", ({"id": "r", "pk": "a", "v": 99},)),
                ("create", ({"id": "r", "pk": "a"},)),
            ],
            partition_key="a",
        )
    assert err.value.error_index == 2
    assert [r["statusCode"] for r in err.value.operation_responses] == [424, 424, 409]
    assert (await aio_container.read_item("r", "a"))["v"] == 2
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        await aio_container.read_item("n", "a")


async def test_ttl(aio_container: ContainerProxy) -> None:
    await aio_container.create_item({"id": "t", "pk": "a", "ttl": 1})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            await aio_container.read_item("t", "a")
        except exceptions.CosmosResourceNotFoundError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("item with ttl=1 never expired")
    rows = [d async for d in aio_container.query_items("SELECT * FROM c", partition_key="a")]
    assert rows == []


async def test_queries(aio_container: ContainerProxy) -> None:
    assert [
        d async for d in aio_container.query_items("SELECT * FROM c", partition_key="empty")
    ] == []
    for i in range(12):
        await aio_container.create_item({"id": f"{i:02d}", "pk": f"p{i % 3}", "n": i})
    ordered: list[Any] = [
        d
        async for d in aio_container.query_items(
            "SELECT VALUE c.n FROM c WHERE c.n >= @min ORDER BY c.n DESC",
            parameters=[{"name": "@min", "value": 5}],
        )
    ]
    assert ordered == list(range(11, 4, -1))
    counted: list[Any] = [
        d async for d in aio_container.query_items("SELECT VALUE COUNT(1) FROM c")
    ]
    assert counted == [12]
    in_p1: list[Any] = [
        d
        async for d in aio_container.query_items("SELECT VALUE COUNT(1) FROM c", partition_key="p1")
    ]
    assert in_p1 == [4]
    pages = aio_container.query_items("SELECT * FROM c", max_item_count=5).by_page()
    sizes = [len([d async for d in page]) async for page in pages]
    assert sizes == [5, 5, 2]
    top = [d["id"] async for d in aio_container.query_items("SELECT TOP 3 * FROM c ORDER BY c.n")]
    assert top == ["00", "01", "02"]
