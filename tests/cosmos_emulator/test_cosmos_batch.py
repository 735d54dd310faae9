"""Transactional batch: every operation type, all-or-nothing, limits."""

from __future__ import annotations

import pytest
from azure.cosmos import ContainerProxy, exceptions
from cosmos_rest import call

from cosmos_emulator import RunningCosmosEmulator


def test_every_operation_type_succeeds_in_one_batch(container: ContainerProxy) -> None:
    """@vercel/cosmosdb-server fails upsert/replace/read/delete in a batch with a 500."""
    container.create_item({"id": "r", "pk": "a", "v": 1})
    container.create_item({"id": "d", "pk": "a"})
    container.create_item({"id": "p", "pk": "a", "n": 1})
    results = container.execute_item_batch(
        [
            ("create", ({"id": "c", "pk": "a"},)),
            ("upsert", ({"id": "u", "pk": "a", "v": 1},)),
            ("upsert", ({"id": "r", "pk": "a", "v": 2},)),
            ("read", ("r",)),
            ("replace", ("c", {"id": "c", "pk": "a", "replaced": True})),
            ("delete", ("d",)),
            ("patch", ("p", [{"op": "incr", "path": "/n", "value": 1}])),
        ],
        partition_key="a",
    )
    assert [r["statusCode"] for r in results] == [201, 201, 200, 200, 200, 204, 200]
    assert results[3]["resourceBody"]["v"] == 2
    assert results[0]["eTag"] == results[0]["resourceBody"]["_etag"]
    assert container.read_item("c", "a")["replaced"] is True
    assert container.read_item("u", "a")["v"] == 1
    assert container.read_item("p", "a")["n"] == 2
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("d", "a")


def test_later_operations_see_earlier_ones(container: ContainerProxy) -> None:
    results = container.execute_item_batch(
        [
            ("create", ({"id": "x", "pk": "a", "v": 1},)),
            ("patch", ("x", [{"op": "set", "path": "/v", "value": 2}])),
            ("read", ("x",)),
            ("delete", ("x",)),
        ],
        partition_key="a",
    )
    assert results[2]["resourceBody"]["v"] == 2
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("x", "a")


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_batch_is_atomic(container: ContainerProxy, failing: int) -> None:
    """@vercel/cosmosdb-server keeps operations written before the failing one."""
    container.create_item({"id": "taken", "pk": "a", "v": 0})
    ops: list[tuple[str, tuple[object, ...]]] = [
        ("create", ({"id": "n1", "pk": "a"},)),
        ("upsert", ({"id": "taken", "pk": "a", "v": 1},)),
        ("create", ({"id": "n2", "pk": "a"},)),
    ]
    ops[failing] = ("create", ({"id": "taken", "pk": "a"},))
    with pytest.raises(exceptions.CosmosBatchOperationError) as err:
        container.execute_item_batch(ops, partition_key="a")
    assert err.value.error_index == failing
    statuses = [r["statusCode"] for r in err.value.operation_responses]
    assert statuses == [409 if i == failing else 424 for i in range(3)]
    assert container.read_item("taken", "a")["v"] == 0
    for item_id in ("n1", "n2"):
        with pytest.raises(exceptions.CosmosResourceNotFoundError):
            container.read_item(item_id, "a")


def test_failing_read_replace_and_etag_condition_fail_the_batch(container: ContainerProxy) -> None:
    item = container.create_item({"id": "x", "pk": "a", "v": 1})
    container.replace_item("x", {"id": "x", "pk": "a", "v": 2})
    cases = [
        (("read", ("missing",)), 404),
        (("replace", ("missing", {"id": "missing", "pk": "a"})), 404),
        (("delete", ("missing",)), 404),
        (("replace", ("x", {"id": "x", "pk": "a", "v": 9}), {"if_match_etag": item["_etag"]}), 412),
    ]
    for op, status in cases:
        with pytest.raises(exceptions.CosmosBatchOperationError) as err:
            container.execute_item_batch(
                [("create", ({"id": "new", "pk": "a"},)), op],  # type: ignore[list-item]
                partition_key="a",
            )
        assert err.value.error_index == 1
        assert [r["statusCode"] for r in err.value.operation_responses] == [424, status]
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("new", "a")
    assert container.read_item("x", "a")["v"] == 2


def test_etag_condition_that_holds_succeeds(container: ContainerProxy) -> None:
    item = container.create_item({"id": "x", "pk": "a", "v": 1})
    results = container.execute_item_batch(
        [("replace", ("x", {"id": "x", "pk": "a", "v": 2}), {"if_match_etag": item["_etag"]})],
        partition_key="a",
    )
    assert results[0]["statusCode"] == 200


def test_operation_for_another_partition_fails_the_batch(container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosBatchOperationError) as err:
        container.execute_item_batch(
            [
                ("create", ({"id": "1", "pk": "a"},)),
                ("create", ({"id": "2", "pk": "b"},)),
            ],
            partition_key="a",
        )
    assert err.value.error_index == 1
    assert [r["statusCode"] for r in err.value.operation_responses] == [424, 400]


def test_more_than_100_operations_is_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    ops = [
        {"operationType": "Create", "resourceBody": {"id": str(i), "pk": "a"}} for i in range(101)
    ]
    status, _, body = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "POST",
        f"/{container.container_link}/docs/",
        ops,
        {
            "x-ms-documentdb-partitionkey": '["a"]',
            "x-ms-cosmos-is-batch-request": "True",
            "x-ms-cosmos-batch-atomic": "True",
        },
    )
    assert status == 400, body
    assert "100" in body["message"]
    hundred = [("create", ({"id": str(i), "pk": "a"},)) for i in range(100)]
    assert len(container.execute_item_batch(hundred, partition_key="a")) == 100


def test_batch_over_the_request_size_limit_is_413(container: ContainerProxy) -> None:
    blob = "x" * (700 * 1024)
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.execute_item_batch(
            [("create", ({"id": str(i), "pk": "a", "blob": blob},)) for i in range(3)],
            partition_key="a",
        )
    assert err.value.status_code == 413
    assert list(container.query_items("SELECT * FROM c", partition_key="a")) == []
