"""What the JavaScript SDK needs beyond what the Python SDK sends (issue 26), via the Python SDK.

- the bare-array patch body (`item.patch([...])` in JavaScript);
- `x-ms-indexing-directive` (exclude / include, and `indexingPolicy.automatic: false`);
- computed properties in a container definition.

tests/js/cosmos.test.mjs runs the same cases through @azure/cosmos.
"""

from __future__ import annotations

from typing import Any

import pytest
from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey, exceptions
from azure.cosmos import _base as sdk_base
from azure.cosmos.documents import IndexingDirective
from cosmos_rest import call, unique, values
from js_requests import bare_array_body

from cosmos_emulator import RunningCosmosEmulator

# -- patch ------------------------------------------------------------------------------------


def test_patch_body_as_a_bare_array(container: ContainerProxy) -> None:
    container.create_item({"id": "o1", "pk": "a", "n": 1, "tags": []})
    ops: list[dict[str, Any]] = [
        {"op": "incr", "path": "/n", "value": 4},
        {"op": "add", "path": "/tags/-", "value": "js"},
    ]
    patched = container.patch_item("o1", "a", ops, raw_request_hook=bare_array_body(ops))
    assert patched["n"] == 5 and patched["tags"] == ["js"]
    assert container.read_item("o1", "a")["n"] == 5


def test_bare_array_patch_keeps_the_etag_condition(container: ContainerProxy) -> None:
    created = container.create_item({"id": "o1", "pk": "a", "n": 1})
    container.upsert_item({"id": "o1", "pk": "a", "n": 2})
    ops = [{"op": "set", "path": "/n", "value": 9}]
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        container.patch_item(
            "o1",
            "a",
            ops,
            etag=created["_etag"],
            match_condition=MatchConditions.IfNotModified,
            raw_request_hook=bare_array_body(ops),
        )
    assert container.read_item("o1", "a")["n"] == 2


def test_bare_array_patch_inside_a_transactional_batch(container: ContainerProxy) -> None:
    """The JavaScript SDK's batch Patch operation may carry the bare array too."""
    container.create_item({"id": "p", "pk": "a", "n": 1})
    link = container.container_link
    bare = [{"op": "incr", "path": "/n", "value": 1}]
    results, _ = container.client_connection._Batch(
        [{"operationType": "Patch", "id": "p", "resourceBody": bare}],
        sdk_base.GetPathFromLink(link, "docs"),
        sdk_base.GetResourceIdOrFullNameFromLink(link),
        {"partitionKey": "a"},
    )
    assert [r["statusCode"] for r in results] == [200]
    assert container.read_item("p", "a")["n"] == 2


@pytest.mark.parametrize(
    "body",
    [b'"set"', b"42", b"[]", b"{}", b'[{"op": "set", "path": "/id", "value": "x"}]'],
)
def test_bad_patch_bodies_are_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy, body: bytes
) -> None:
    before = container.create_item({"id": "o1", "pk": "a"})
    status, _, answer = call(
        cosmos_emulator.url,
        cosmos_emulator.key,
        "PATCH",
        f"/{container.container_link}/docs/o1",
        body,
        {"x-ms-documentdb-partitionkey": '["a"]'},
    )
    assert status == 400, answer
    assert container.read_item("o1", "a") == before


# -- indexing directive -----------------------------------------------------------------------


def query_ids(container: ContainerProxy, where: str = "") -> list[str]:
    return sorted(
        row["id"]
        for row in container.query_items(
            f"SELECT c.id FROM c {where}", enable_cross_partition_query=True
        )
    )


def test_an_excluded_item_is_left_out_of_queries_only(container: ContainerProxy) -> None:
    container.create_item({"id": "in", "pk": "a", "foo": "bar"})
    container.create_item(
        {"id": "out", "pk": "a", "foo": "bar"}, indexing_directive=IndexingDirective.Exclude
    )
    assert query_ids(container, "WHERE c.foo = 'bar'") == ["in"]
    assert query_ids(container) == ["in"]
    scoped = container.query_items("SELECT * FROM c", partition_key="a")
    assert [d["id"] for d in scoped] == ["in"]
    # Point reads, the read feed and the change feed still see it.
    assert container.read_item("out", "a")["foo"] == "bar"
    assert sorted(d["id"] for d in container.read_all_items()) == ["in", "out"]
    feed = container.query_items_change_feed(start_time="Beginning")
    assert sorted(d["id"] for d in feed) == ["in", "out"]


def test_a_later_write_brings_an_excluded_item_back(container: ContainerProxy) -> None:
    container.create_item({"id": "x", "pk": "a"}, indexing_directive=IndexingDirective.Exclude)
    assert query_ids(container) == []
    container.upsert_item(
        {"id": "x", "pk": "a", "v": 2}, headers={"x-ms-indexing-directive": "Include"}
    )
    assert query_ids(container) == ["x"]
    container.replace_item(
        "x", {"id": "x", "pk": "a", "v": 3}, headers={"x-ms-indexing-directive": "Exclude"}
    )
    assert query_ids(container) == []
    # No directive: the policy's default (automatic) indexes it again.
    container.replace_item("x", {"id": "x", "pk": "a", "v": 4})
    assert query_ids(container) == ["x"]


def test_automatic_false_indexes_only_included_items(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("manual"),
        PartitionKey("/pk"),
        indexing_policy={"indexingMode": "consistent", "automatic": False},
    )
    container.create_item({"id": "plain", "pk": "a"})
    container.create_item({"id": "inc", "pk": "a"}, indexing_directive=IndexingDirective.Include)
    assert query_ids(container) == ["inc"]


def test_an_unknown_directive_is_400(container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.create_item(
            {"id": "x", "pk": "a"}, headers={"x-ms-indexing-directive": "sometimes"}
        )
    assert err.value.status_code == 400
    assert "x-ms-indexing-directive" in str(err.value)


# -- computed properties ----------------------------------------------------------------------

LOWER_NAME = {"name": "cp_lowerName", "query": "SELECT VALUE LOWER(c.name) FROM c"}
TOTAL = {"name": "cp_total", "query": "SELECT VALUE c.price * c.qty FROM root c"}


@pytest.fixture
def products(database: DatabaseProxy) -> ContainerProxy:
    container = database.create_container(
        unique("cp"), PartitionKey("/pk"), computed_properties=[LOWER_NAME, TOTAL]
    )
    for item in (
        {"id": "1", "pk": "a", "name": "Widget", "price": 3, "qty": 2},
        {"id": "2", "pk": "b", "name": "GADGET", "price": 10, "qty": 1},
        {"id": "3", "pk": "a", "name": "gizmo", "price": 1, "qty": 1},
        {"id": "4", "pk": "b", "price": 2},
    ):
        container.create_item(item)
    return container


def test_computed_properties_are_part_of_the_definition(products: ContainerProxy) -> None:
    assert products.read()["computedProperties"] == [LOWER_NAME, TOTAL]


def test_computed_properties_in_where_order_by_and_select(products: ContainerProxy) -> None:
    rows = list(
        products.query_items(
            "SELECT c.id, c.cp_lowerName FROM c WHERE c.cp_lowerName = 'gadget'",
            enable_cross_partition_query=True,
        )
    )
    assert rows == [{"id": "2", "cp_lowerName": "gadget"}]
    ordered = products.query_items(
        "SELECT VALUE c.id FROM c ORDER BY c.cp_total DESC", enable_cross_partition_query=True
    )
    # Item 4 has no qty: its cp_total is undefined, which sorts first ascending, last here.
    assert values(ordered) == ["2", "1", "3", "4"]
    totals = products.query_items(
        'SELECT VALUE c["cp_total"] FROM c WHERE c.cp_total > 1', partition_key="a"
    )
    assert values(totals) == [6]
    summed = products.query_items(
        "SELECT VALUE SUM(c.cp_total) FROM c", enable_cross_partition_query=True
    )
    assert values(summed) == [17]


def test_select_star_does_not_return_computed_properties(products: ContainerProxy) -> None:
    star = list(products.query_items("SELECT * FROM c WHERE c.id = '1'", partition_key="a"))
    assert "cp_lowerName" not in star[0] and star[0]["name"] == "Widget"
    whole = list(products.query_items("SELECT VALUE c FROM c WHERE c.id = '1'", partition_key="a"))
    assert "cp_total" not in whole[0]
    assert "cp_total" not in products.read_item("1", "a")


def test_a_computed_property_shadows_a_persisted_one_in_queries(products: ContainerProxy) -> None:
    products.create_item({"id": "5", "pk": "a", "name": "Mixed", "cp_lowerName": "stored"})
    rows = products.query_items(
        "SELECT VALUE c.cp_lowerName FROM c WHERE c.id = '5'", partition_key="a"
    )
    assert values(rows) == ["mixed"]
    star = list(products.query_items("SELECT * FROM c WHERE c.id = '5'", partition_key="a"))
    assert star[0]["cp_lowerName"] == "stored"


def test_a_patch_filter_predicate_sees_computed_properties(products: ContainerProxy) -> None:
    ops = [{"op": "set", "path": "/seen", "value": True}]
    with pytest.raises(exceptions.CosmosAccessConditionFailedError):
        products.patch_item("1", "a", ops, filter_predicate="FROM c WHERE c.cp_total = 5")
    patched = products.patch_item("1", "a", ops, filter_predicate="FROM c WHERE c.cp_total = 6")
    assert patched["seen"] is True and "cp_total" not in patched


def test_replacing_the_container_changes_its_computed_properties(
    database: DatabaseProxy, products: ContainerProxy
) -> None:
    upper = {"name": "cp_upper", "query": "SELECT VALUE UPPER(c.name) FROM c"}
    database.replace_container(products, PartitionKey("/pk"), computed_properties=[upper])
    rows = products.query_items(
        "SELECT c.cp_upper, c.cp_lowerName FROM c WHERE c.id = '3'", partition_key="a"
    )
    # cp_lowerName is gone, so the item's (absent) persisted property is read: undefined.
    assert list(rows) == [{"cp_upper": "GIZMO"}]


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ({"name": "id", "query": "SELECT VALUE c.a FROM c"}, "reserved"),
        ({"name": "_ts", "query": "SELECT VALUE c.a FROM c"}, "reserved"),
        ({"name": "a/b", "query": "SELECT VALUE c.a FROM c"}, "top-level"),
        ({"name": "cp", "query": "SELECT c.a FROM c"}, "SELECT VALUE"),
        ({"name": "cp", "query": "SELECT VALUE c.a FROM c WHERE c.a = 1"}, "WHERE"),
        ({"name": "cp", "query": "SELECT VALUE c.a FROM c ORDER BY c.a"}, "ORDER BY"),
        ({"name": "cp", "query": "SELECT TOP 1 VALUE c.a FROM c"}, "TOP"),
        ({"name": "cp", "query": "SELECT DISTINCT VALUE c.a FROM c"}, "DISTINCT"),
        ({"name": "cp", "query": "SELECT VALUE COUNT(1) FROM c"}, "aggregates"),
        ({"name": "cp", "query": "SELECT VALUE GetCurrentTimestamp() FROM c"}, "deterministic"),
        ({"name": "cp", "query": "SELECT VALUE @p FROM c"}, "parameters"),
        ({"name": "cp", "query": "SELECT VALUE c.a FROM c JOIN t IN c.tags"}, "JOIN"),
        ({"name": "cp", "query": "SELECT VALUE x.a FROM c"}, "could not be resolved"),
        ({"name": "cp", "query": ""}, "query"),
        ({"name": "", "query": "SELECT VALUE c.a FROM c"}, "name"),
    ],
)
def test_bad_computed_properties_are_refused_with_the_reason(
    database: DatabaseProxy, definition: dict[str, str], reason: str
) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        database.create_container(
            unique("bad"), PartitionKey("/pk"), computed_properties=[definition]
        )
    assert err.value.status_code == 400
    assert reason in str(err.value)


def test_computed_property_set_rules(database: DatabaseProxy) -> None:
    def create(definitions: list[dict[str, str]]) -> str:
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:
            database.create_container(
                unique("bad"), PartitionKey("/pk"), computed_properties=definitions
            )
        assert err.value.status_code == 400
        return str(err.value)

    assert "unique" in create([LOWER_NAME, LOWER_NAME])
    assert "another computed property" in create(
        [LOWER_NAME, {"name": "cp_x", "query": "SELECT VALUE c.cp_lowerName || 'x' FROM c"}]
    )
    many = [{"name": f"cp{n}", "query": "SELECT VALUE c.a FROM c"} for n in range(21)]
    assert "at most 20" in create(many)
    assert [c.get("id") for c in database.list_containers()] == []


# -- documented gaps --------------------------------------------------------------------------


def test_full_text_ranking_is_400_naming_it(container: ContainerProxy) -> None:
    container.create_item({"id": "1", "pk": "a", "text": "hello"})
    query = "SELECT TOP 1 c.id FROM c ORDER BY RANK FullTextScore(c.text, ['hello'])"
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(container.query_items(query, enable_cross_partition_query=True))
    assert err.value.status_code == 400 and "FullTextScore" in str(err.value.message)
