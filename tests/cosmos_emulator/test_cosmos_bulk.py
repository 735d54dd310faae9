"""Bulk: non-atomic batches by partition key range, as the JavaScript SDK's bulk sends them.

azure-cosmos 4.17 has no bulk API (only the transactional `execute_item_batch`), so these
tests send the JavaScript SDK's bulk request (`items.bulk` / `executeBulkOperations`: no
partition key header, `x-ms-documentdb-partitionkeyrangeid`, `x-ms-cosmos-batch-atomic:
false`, a `partitionKey` on every operation) through the Python SDK's own connection: its
signing, headers and retries. tests/js/cosmos.test.mjs sends it from the JavaScript SDK.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey, exceptions
from cosmos_rest import unique
from js_requests import send_bulk


def pk(*values: object) -> str:
    return json.dumps(list(values))


def op(kind: str, key: str | None, **fields: Any) -> dict[str, Any]:
    """One bulk operation as the JavaScript SDK sends it (`key`: its partitionKey string)."""
    built: dict[str, Any] = {"operationType": kind, **fields}
    if key is not None:
        built["partitionKey"] = key
    return built


def body(item_id: str, key: str, **extra: Any) -> dict[str, Any]:
    return {"id": item_id, "pk": key, **extra}


def test_each_operation_carries_its_own_partition_key(container: ContainerProxy) -> None:
    container.create_item({"id": "r", "pk": "b", "v": 1})
    container.create_item({"id": "d", "pk": "c"})
    container.create_item({"id": "p", "pk": "a", "n": 1})
    status, results = send_bulk(
        container,
        [
            op("Create", pk("a"), resourceBody=body("x", "a")),
            op("Create", pk("b"), resourceBody=body("x", "b")),
            op("Upsert", pk("b"), resourceBody=body("r", "b", v=2)),
            op("Read", pk("b"), id="r"),
            op("Replace", pk("a"), id="x", resourceBody=body("x", "a", new=True)),
            op("Delete", pk("c"), id="d"),
            # The JavaScript SDK's patch body: a bare array of operations.
            op("Patch", pk("a"), id="p", resourceBody=[{"op": "incr", "path": "/n", "value": 2}]),
        ],
    )
    assert status == 200
    assert [r["statusCode"] for r in results] == [201, 201, 200, 200, 200, 204, 200]
    assert results[3]["resourceBody"]["v"] == 2
    assert results[0]["eTag"] == results[0]["resourceBody"]["_etag"]
    assert all(r["requestCharge"] > 0 for r in results)
    assert container.read_item("x", "a")["new"] is True
    assert container.read_item("x", "b")["pk"] == "b"
    assert container.read_item("p", "a")["n"] == 3
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("d", "c")


def test_a_failing_operation_rolls_back_nothing(container: ContainerProxy) -> None:
    """Unlike a transactional batch: the others commit, each failure keeps its own status."""
    taken = container.create_item({"id": "taken", "pk": "a", "v": 0})
    status, results = send_bulk(
        container,
        [
            op("Create", pk("a"), resourceBody=body("n1", "a")),
            op("Create", pk("a"), resourceBody=body("taken", "a")),
            op("Replace", pk("a"), id="missing", resourceBody=body("missing", "a")),
            op(
                "Replace",
                pk("a"),
                id="taken",
                ifMatch='"stale"',
                resourceBody=body("taken", "a", v=9),
            ),
            op("Upsert", pk("b"), resourceBody=body("n2", "b")),
        ],
    )
    assert status == 207
    assert [r["statusCode"] for r in results] == [201, 409, 404, 412, 201]
    assert all("message" in r for r in results[1:4])
    assert container.read_item("n1", "a")["id"] == "n1"
    assert container.read_item("n2", "b")["id"] == "n2"
    assert container.read_item("taken", "a") == taken


def test_continue_on_error_false_stops_at_the_first_failure(container: ContainerProxy) -> None:
    container.create_item({"id": "taken", "pk": "a"})
    status, results = send_bulk(
        container,
        [
            op("Create", pk("a"), resourceBody=body("before", "a")),
            op("Create", pk("a"), resourceBody=body("taken", "a")),
            op("Create", pk("b"), resourceBody=body("after", "b")),
        ],
        continue_on_error=False,
    )
    assert status == 207
    assert [r["statusCode"] for r in results] == [201, 409, 424]
    assert container.read_item("before", "a")["id"] == "before"
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("after", "b")


def test_an_operation_without_a_partition_key_fails_alone(container: ContainerProxy) -> None:
    status, results = send_bulk(
        container,
        [
            op("Create", None, resourceBody=body("nopk", "a")),
            op("Create", '["a", "extra"]', resourceBody=body("two", "a")),
            op("Create", pk("b"), resourceBody=body("wrong", "a")),
            op("Create", pk("a"), resourceBody=body("ok", "a")),
        ],
    )
    assert status == 207
    assert [r["statusCode"] for r in results] == [400, 400, 400, 201]
    assert "PartitionKey value must be supplied" in results[0]["message"]
    assert [i["id"] for i in container.read_all_items()] == ["ok"]


def test_hierarchical_partition_keys(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("h"), PartitionKey(["/tenant", "/user"], kind="MultiHash")
    )
    status, results = send_bulk(
        container,
        [
            op("Create", pk("t", "u1"), resourceBody={"id": "1", "tenant": "t", "user": "u1"}),
            op("Create", pk("t", "u2"), resourceBody={"id": "1", "tenant": "t", "user": "u2"}),
        ],
    )
    assert (status, [r["statusCode"] for r in results]) == (200, [201, 201])
    assert container.read_item("1", ["t", "u2"])["user"] == "u2"


def test_unknown_range_and_too_many_operations_are_refused(container: ContainerProxy) -> None:
    one = [op("Create", pk("a"), resourceBody=body("x", "a"))]
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        send_bulk(container, one, range_id="7")
    assert err.value.status_code == 400
    assert "Partition key range" in str(err.value)
    many = [op("Create", pk("a"), resourceBody=body(f"i{n}", "a")) for n in range(101)]
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        send_bulk(container, many)
    assert err.value.status_code == 400
    assert list(container.read_all_items()) == []


def test_the_transactional_batch_stays_atomic(container: ContainerProxy) -> None:
    """What the Python SDK sends (`x-ms-cosmos-batch-atomic: True`) is still all-or-nothing."""
    container.create_item({"id": "taken", "pk": "a"})
    with pytest.raises(exceptions.CosmosBatchOperationError) as err:
        container.execute_item_batch(
            [("create", ({"id": "n1", "pk": "a"},)), ("create", ({"id": "taken", "pk": "a"},))],
            partition_key="a",
        )
    assert [r["statusCode"] for r in err.value.operation_responses] == [424, 409]
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.read_item("n1", "a")


def test_malformed_operations_fail_alone_with_a_reason(container: ContainerProxy) -> None:
    bad: list[Any] = [
        op("Create", None, partitionKey=5, resourceBody=body("a", "a")),
        op("Create", "not json", resourceBody=body("b", "a")),
        op("Create", '[["nested"]]', resourceBody=body("c", "a")),
        "not an object",
        op("Nope", pk("a"), id="x"),
        op("Read", pk("a")),
        op("Patch", pk("a"), id="x", resourceBody="set"),
    ]
    status, results = send_bulk(
        container, [*bad, op("Create", pk("a"), resourceBody=body("ok", "a"))]
    )
    assert status == 207
    assert [r["statusCode"] for r in results] == [400] * len(bad) + [201]
    assert all(r["message"] for r in results[:-1])
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        send_bulk(container, [])
    assert err.value.status_code == 400
    assert [i["id"] for i in container.read_all_items()] == ["ok"]
