"""The documented SQL subset, single-partition and cross-partition (via the query plan)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey, exceptions
from cosmos_rest import unique

from cosmos_emulator import RunningCosmosEmulator

DOCS: list[dict[str, Any]] = [
    {"id": "1", "pk": "a", "n": 3, "name": "apple", "tags": ["x", "y"], "status": "open"},
    {"id": "2", "pk": "a", "n": 1, "name": "avocado", "tags": [], "status": "done"},
    {"id": "3", "pk": "b", "n": 2, "name": "banana", "tags": ["x"], "status": "open"},
    {"id": "4", "pk": "b", "name": "blueberry", "status": None},
    {"id": "5", "pk": "c", "n": 5, "name": "cherry", "tags": ["z"], "status": "open"},
]


@pytest.fixture
def filled(container: ContainerProxy) -> ContainerProxy:
    for doc in DOCS:
        container.create_item(doc)
    return container


def ids(rows: list[Any]) -> list[str]:
    return [r["id"] for r in rows]


def q(container: ContainerProxy, text: str, pk: str | None = None, **params: Any) -> list[Any]:
    parameters = [{"name": f"@{k}", "value": v} for k, v in params.items()]
    if pk is None:
        return list(
            container.query_items(text, parameters=parameters, enable_cross_partition_query=True)
        )
    return list(container.query_items(text, parameters=parameters, partition_key=pk))


def test_query_on_an_empty_partition_returns_nothing(container: ContainerProxy) -> None:
    """@vercel/cosmosdb-server fails with "missing partition keys" here."""
    assert q(container, "SELECT * FROM c", pk="nobody") == []
    container.create_item({"id": "1", "pk": "someone"})
    assert q(container, "SELECT * FROM c WHERE c.id = @id", pk="nobody", id="1") == []
    assert q(container, "SELECT VALUE COUNT(1) FROM c", pk="nobody") == [0]


def test_where_comparisons_and_logic(filled: ContainerProxy) -> None:
    assert ids(q(filled, "SELECT * FROM c WHERE c.n > 1 AND c.n <= 3")) == ["1", "3"]
    assert ids(q(filled, "SELECT * FROM c WHERE c.n = 1 OR c.name = 'cherry'")) == ["2", "5"]
    assert ids(q(filled, "SELECT * FROM c WHERE NOT (c.n >= 2)")) == ["2"]
    assert ids(q(filled, "SELECT * FROM c WHERE c.n != 3")) == ["2", "3", "5"]
    assert ids(q(filled, "SELECT * FROM c WHERE c.status IN ('done', 'x')")) == ["2"]
    assert ids(q(filled, "SELECT * FROM c WHERE c.status = null")) == ["4"]
    assert ids(q(filled, "SELECT * FROM c WHERE NOT IS_DEFINED(c.n)")) == ["4"]
    assert ids(q(filled, "SELECT * FROM c WHERE STARTSWITH(c.name, 'b')")) == ["3", "4"]
    assert ids(q(filled, "SELECT * FROM c WHERE ARRAY_LENGTH(c.tags) >= 1")) == ["1", "3", "5"]
    assert ids(q(filled, "SELECT * FROM c WHERE c.n = '3'")) == []  # no type coercion


def test_parameters(filled: ContainerProxy) -> None:
    rows = q(filled, "SELECT * FROM c WHERE c.status = @s AND c.n >= @min", s="open", min=3)
    assert ids(rows) == ["1", "5"]
    assert ids(q(filled, "SELECT * FROM c WHERE c.pk = @p", p="a")) == ["1", "2"]


def test_projections_and_value(filled: ContainerProxy) -> None:
    rows = q(filled, "SELECT c.id, c.n AS count FROM c WHERE c.pk = 'b'", pk="b")
    assert rows == [{"id": "3", "count": 2}, {"id": "4"}]
    assert q(filled, "SELECT VALUE c.name FROM c", pk="a") == ["apple", "avocado"]
    assert q(filled, "SELECT VALUE c.n FROM c", pk="b") == [2]  # undefined is dropped
    rows = q(filled, "SELECT c.id, c.tags[0] AS first FROM c WHERE c.id = '1'", pk="a")
    assert rows == [{"id": "1", "first": "x"}]


def test_count_in_a_partition_and_across_partitions(
    filled: ContainerProxy, cosmos_emulator: RunningCosmosEmulator
) -> None:
    assert q(filled, "SELECT VALUE COUNT(1) FROM c", pk="a") == [2]
    before = cosmos_emulator.operation_counts().get("QueryPlan", 0)
    assert q(filled, "SELECT VALUE COUNT(1) FROM c WHERE c.status = 'open'") == [3]
    assert cosmos_emulator.operation_counts()["QueryPlan"] == before + 1
    assert q(filled, "SELECT VALUE SUM(c.n) FROM c") == [11]
    assert q(filled, "SELECT VALUE MAX(c.n) FROM c") == [5]
    assert q(filled, "SELECT VALUE AVG(c.n) FROM c WHERE c.pk = 'a'") == [2]
    assert q(filled, "SELECT COUNT(1) AS total FROM c", pk="a") == [{"total": 2}]


def test_order_by_across_partitions(filled: ContainerProxy) -> None:
    rows = q(filled, "SELECT * FROM c WHERE IS_DEFINED(c.n) ORDER BY c.n")
    assert ids(rows) == ["2", "3", "1", "5"]
    rows = q(filled, "SELECT c.id FROM c WHERE IS_DEFINED(c.n) ORDER BY c.n DESC")
    assert rows == [{"id": "5"}, {"id": "1"}, {"id": "3"}, {"id": "2"}]
    assert q(filled, "SELECT VALUE c.name FROM c ORDER BY c.name DESC", pk="b") == [
        "blueberry",
        "banana",
    ]


def test_top_and_offset_limit(filled: ContainerProxy) -> None:
    assert len(q(filled, "SELECT TOP 2 * FROM c")) == 2
    assert ids(q(filled, "SELECT TOP 2 * FROM c WHERE IS_DEFINED(c.n) ORDER BY c.n")) == ["2", "3"]
    rows = q(filled, "SELECT * FROM c WHERE IS_DEFINED(c.n) ORDER BY c.n OFFSET 1 LIMIT 2")
    assert ids(rows) == ["3", "1"]
    assert ids(q(filled, "SELECT * FROM c ORDER BY c.id OFFSET @o LIMIT @l", o=3, l=5)) == [
        "4",
        "5",
    ]
    assert ids(q(filled, "SELECT TOP @t * FROM c ORDER BY c.id", t=1)) == ["1"]


def test_distinct(filled: ContainerProxy) -> None:
    assert sorted(q(filled, "SELECT DISTINCT VALUE c.status FROM c WHERE IS_STRING(c.status)")) == [
        "done",
        "open",
    ]


def test_paging_with_continuation_tokens(container: ContainerProxy) -> None:
    for i in range(25):
        container.create_item({"id": f"{i:02d}", "pk": "a" if i % 3 else "b", "i": i})
    pager = container.query_items(
        "SELECT * FROM c WHERE c.pk = 'a'", partition_key="a", max_item_count=4
    ).by_page()
    first = list(next(pager))
    token = pager.continuation_token  # type: ignore[attr-defined]  # typed as a plain iterator
    assert len(first) == 4 and token
    resumed = container.query_items(
        "SELECT * FROM c WHERE c.pk = 'a'", partition_key="a", max_item_count=4
    ).by_page(token)
    rest = [d for page in resumed for d in page]
    all_ids = ids(first) + ids(rest)
    assert all_ids == [f"{i:02d}" for i in range(25) if i % 3]
    cross_pages = list(
        container.query_items(
            "SELECT * FROM c", enable_cross_partition_query=True, max_item_count=10
        ).by_page()
    )
    assert [len(list(p)) for p in cross_pages] == [10, 10, 5]
    ordered = q(container, "SELECT VALUE c.i FROM c ORDER BY c.i DESC")
    assert ordered == list(range(24, -1, -1))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("SELECT * FROM c JOIN t IN c.tags", "JOIN"),
        ("SELECT c.status, COUNT(1) FROM c GROUP BY c.status", "GROUP BY"),
        ("SELECT * FROM c WHERE c.name LIKE 'a%'", "LIKE"),
        ("SELECT * FROM c WHERE EXISTS(SELECT VALUE t FROM t IN c.tags)", "EXISTS"),
        ("SELECT * FROM c WHERE FullTextContains(c.name, 'a')", "FULLTEXTCONTAINS"),
        ("SELECT VALUE ST_DISTANCE(c.loc, c.loc) FROM c", "ST_DISTANCE"),
        ("SELECT * FROM c WHERE udf.f(c.n)", "user-defined"),
    ],
)
def test_unsupported_sql_is_a_400_naming_it(filled: ContainerProxy, text: str, named: str) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        q(filled, text, pk="a")
    assert err.value.status_code == 400
    assert named in str(err.value.message)


def test_syntax_errors_are_400(filled: ContainerProxy) -> None:
    for text in ("SELECT FROM c", "SELECT * FROM c WHERE", "SELECT * FROM c WHERE x.n = 1"):
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:
            q(filled, text, pk="a")
        assert err.value.status_code == 400


def test_query_with_a_sql_text_only(filled: ContainerProxy) -> None:
    rows = list(
        filled.query_items(
            "SELECT * FROM root r WHERE r.pk = 'c'", enable_cross_partition_query=True
        )
    )
    assert ids(rows) == ["5"]


def test_cross_partition_results_follow_creation_order(container: ContainerProxy) -> None:
    for i in range(6):
        container.create_item({"id": str(i), "pk": f"p{i % 3}", "n": i})
    container.replace_item("0", {"id": "0", "pk": "p0", "n": 0, "touched": True})
    assert q(container, "SELECT VALUE c.n FROM c") == [0, 1, 2, 3, 4, 5]
    assert q(container, "SELECT VALUE c.n FROM c OFFSET 1 LIMIT 2") == [1, 2]
    assert [d["id"] for d in container.read_all_items()] == ["0", "1", "2", "3", "4", "5"]


def test_read_items_by_id_and_partition(filled: ContainerProxy) -> None:
    found = filled.read_items([("1", "a"), ("3", "b"), ("missing", "a"), ("1", "b")])
    assert sorted(d["id"] for d in found) == ["1", "3"]


def test_multiple_order_by_needs_a_composite_index(database: DatabaseProxy) -> None:
    plain = database.create_container(unique("p"), PartitionKey("/pk"))
    plain.create_item({"id": "1", "pk": "a", "x": 1, "y": 2})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        q(plain, "SELECT * FROM c ORDER BY c.x, c.y")
    assert err.value.status_code == 400 and "composite index" in str(err.value.message)

    policy = {
        "indexingMode": "consistent",
        "includedPaths": [{"path": "/*"}],
        "compositeIndexes": [
            [{"path": "/x", "order": "ascending"}, {"path": "/y", "order": "descending"}]
        ],
    }
    indexed = database.create_container(unique("i"), PartitionKey("/pk"), indexing_policy=policy)
    for i, (x, y) in enumerate([(1, 1), (0, 5), (1, 3), (0, 2)]):
        indexed.create_item({"id": str(i), "pk": f"p{i}", "x": x, "y": y})
    rows = q(indexed, "SELECT VALUE [c.x, c.y] FROM c ORDER BY c.x, c.y DESC")
    assert rows == [[0, 5], [0, 2], [1, 3], [1, 1]]
    reverse = q(indexed, "SELECT VALUE [c.x, c.y] FROM c ORDER BY c.x DESC, c.y ASC")
    assert reverse == [[1, 1], [1, 3], [0, 2], [0, 5]]


def test_order_by_must_be_a_property_path(filled: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        q(filled, "SELECT * FROM c ORDER BY LOWER(c.name)", pk="a")
    assert err.value.status_code == 400


def test_current_timestamp_is_the_servers_clock_beside_the_item(container: ContainerProxy) -> None:
    """One query returns an item and the database's time, the way a lease is judged."""
    written = container.create_item({"id": "lease", "pk": "a"})
    before_ms = int(time.time() * 1000)
    [row] = q(
        container,
        "SELECT GetCurrentTimestamp() AS now, c._ts AS ts FROM c WHERE c.id = 'lease'",
        pk="a",
    )
    after_ms = int(time.time() * 1000)
    assert before_ms <= row["now"] <= after_ms
    assert row["ts"] == written["_ts"] and row["ts"] * 1000 <= row["now"]
