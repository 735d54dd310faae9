"""Partial document updates through the real sync SDK."""

from __future__ import annotations

import pytest
from azure.cosmos import ContainerProxy, exceptions


def test_patch_operations(container: ContainerProxy) -> None:
    container.create_item(
        {"id": "o1", "pk": "a", "n": 1, "tags": ["x"], "old": True, "nested": {"k": 1}}
    )
    patched = container.patch_item(
        "o1",
        "a",
        [
            {"op": "set", "path": "/status", "value": "done"},
            {"op": "add", "path": "/tags/-", "value": "y"},
            {"op": "add", "path": "/tags/0", "value": "first"},
            {"op": "replace", "path": "/nested/k", "value": 2},
            {"op": "remove", "path": "/old"},
            {"op": "incr", "path": "/n", "value": 5},
            {"op": "incr", "path": "/fresh", "value": 2},
            {"op": "move", "from": "/nested", "path": "/moved"},
        ],
    )
    assert patched["status"] == "done"
    assert patched["tags"] == ["first", "x", "y"]
    assert patched["moved"] == {"k": 2} and "nested" not in patched
    assert "old" not in patched
    assert patched["n"] == 6 and patched["fresh"] == 2
    assert container.read_item("o1", "a") == patched


def test_failing_patch_changes_nothing(container: ContainerProxy) -> None:
    original = container.create_item({"id": "o1", "pk": "a", "n": 1})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.patch_item(
            "o1",
            "a",
            [
                {"op": "set", "path": "/x", "value": 1},
                {"op": "replace", "path": "/missing", "value": 2},
            ],
        )
    assert err.value.status_code == 400
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.patch_item("o1", "a", [{"op": "set", "path": "/pk", "value": "b"}])
    assert err.value.status_code == 400
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.patch_item("o1", "a", [{"op": "incr", "path": "/n", "value": "x"}])
    assert err.value.status_code == 400
    assert container.read_item("o1", "a") == original


def test_patch_filter_predicate(container: ContainerProxy) -> None:
    container.create_item({"id": "o1", "pk": "a", "v": 2})
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        container.patch_item(
            "o1",
            "a",
            [{"op": "set", "path": "/status", "value": "x"}],
            filter_predicate="from c where c.v = 3",
        )
    done = container.patch_item(
        "o1",
        "a",
        [{"op": "set", "path": "/status", "value": "done"}],
        filter_predicate="from c where c.v = 2",
    )
    assert done["status"] == "done"


def test_patch_missing_item_is_404(container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        container.patch_item("nope", "a", [{"op": "set", "path": "/x", "value": 1}])


def test_patch_more_than_ten_operations_is_400(container: ContainerProxy) -> None:
    container.create_item({"id": "o1", "pk": "a"})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.patch_item(
            "o1", "a", [{"op": "set", "path": f"/f{i}", "value": i} for i in range(11)]
        )
    assert err.value.status_code == 400
