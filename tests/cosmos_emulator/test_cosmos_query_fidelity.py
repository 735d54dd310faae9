"""Issue 38, query groups: results and response headers as Cosmos gives them, through the SDK.

Group 9: `SELECT DISTINCT ... ORDER BY ... OFFSET ... LIMIT` across partitions.
Group 2: query metrics (`x-ms-documentdb-query-metrics`) and index metrics
(`x-ms-cosmos-index-utilization`) when the request asks for them.
"""

from __future__ import annotations

from typing import Any

import pytest
from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey
from cosmos_rest import unique

# Many items share each value, so a plan that cuts rows before de-duplicating them loses values.
GROUPED: list[dict[str, Any]] = [
    {"id": f"i{i:02d}", "pk": f"p{i % 3}", "group": "abcde"[i % 5], "n": i // 4} for i in range(30)
]


@pytest.fixture
def grouped(container: ContainerProxy) -> ContainerProxy:
    for doc in GROUPED:
        container.create_item(doc)
    return container


def across(container: ContainerProxy, text: str, **options: Any) -> list[Any]:
    return list(container.query_items(text, enable_cross_partition_query=True, **options))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT DISTINCT VALUE c.group FROM c ORDER BY c.group OFFSET 1 LIMIT 3", ["b", "c", "d"]),
        (
            "SELECT DISTINCT VALUE c.group FROM c ORDER BY c.group DESC OFFSET 0 LIMIT 4",
            list("edcb"),
        ),
        (
            "SELECT DISTINCT c.group FROM c ORDER BY c.group OFFSET 3 LIMIT 5",
            [{"group": "d"}, {"group": "e"}],
        ),
        ("SELECT DISTINCT TOP 3 VALUE c.n FROM c ORDER BY c.n", [0, 1, 2]),
        ("SELECT DISTINCT VALUE c.n FROM c ORDER BY c.n DESC OFFSET 2 LIMIT 2", [5, 4]),
    ],
)
def test_distinct_order_by_offset_limit_across_partitions(
    grouped: ContainerProxy, text: str, expected: list[Any]
) -> None:
    # Small pages too, so the SDK's merge resumes per range with continuation tokens.
    assert across(grouped, text) == expected
    assert across(grouped, text, max_item_count=2) == expected


@pytest.mark.parametrize("descending", [False, True])
def test_distinct_rows_wider_than_the_order_by_on_three_ranges(
    database: DatabaseProxy, descending: bool
) -> None:
    """Issue 44: rows that DISTINCT makes one but ORDER BY does not put side by side (each
    `(v, w)` pair on several items, over three ranges, ordered by `v` alone) came back twice:
    the plan said "Ordered", so the SDK dropped only a row equal to the one before it. It
    says "Unordered" for them now, and the SDK remembers every row."""
    three = database.create_container(unique("c"), PartitionKey("/pk"), offer_throughput=30000)
    docs = [{"id": f"i{n}", "pk": f"p{n % 11}", "v": n % 7, "w": n % 3} for n in range(60)]
    for doc in docs:
        three.create_item(doc)
    order = "DESC" if descending else "ASC"
    text = f"SELECT DISTINCT c.v, c.w FROM c ORDER BY c.v {order} OFFSET 2 LIMIT 12"
    pairs = sorted({(d["v"], d["w"]) for d in docs}, reverse=descending)  # 21 distinct pairs
    for page_size in (None, 2):
        rows = across(three, text, max_item_count=page_size)
        assert len({(r["v"], r["w"]) for r in rows}) == len(rows) == 12
        assert [r["v"] for r in rows] == [v for v, _ in pairs][2:14]


def last_headers(container: ContainerProxy) -> dict[str, Any]:
    return dict(container.client_connection.last_response_headers)


def parsed_query_metrics(raw: str) -> dict[str, str]:
    """The SDKs' reading of the header: `name=value` pairs joined by `;`."""
    pairs = [field.split("=", 1) for field in raw.split(";")]
    assert all(len(pair) == 2 for pair in pairs), raw
    return dict((name, value) for name, value in pairs)


def test_query_metrics_when_the_query_asks_for_them(grouped: ContainerProxy) -> None:
    # https://learn.microsoft.com/azure/cosmos-db/nosql/query-metrics: the header's fields
    rows = list(
        grouped.query_items(
            "SELECT * FROM c WHERE c.group = 'a'", partition_key="p0", populate_query_metrics=True
        )
    )
    metrics = parsed_query_metrics(last_headers(grouped)["x-ms-documentdb-query-metrics"])
    in_partition = [d for d in GROUPED if d["pk"] == "p0"]
    assert len(rows) == 2
    assert int(metrics["retrievedDocumentCount"]) == len(in_partition)
    assert int(metrics["outputDocumentCount"]) == 2
    assert int(metrics["outputDocumentSize"]) > 0
    for timed in ("totalExecutionTimeInMs", "VMExecutionTimeInMs", "queryCompileTimeInMs"):
        assert float(metrics[timed]) >= 0.0
    assert 0.0 <= float(metrics["indexUtilizationRatio"]) <= 1.0


def test_query_metrics_across_partitions_through_the_plan(grouped: ContainerProxy) -> None:
    assert across(
        grouped,
        "SELECT VALUE c.id FROM c ORDER BY c.id OFFSET 0 LIMIT 3",
        populate_query_metrics=True,
    ) == ["i00", "i01", "i02"]
    metrics = parsed_query_metrics(last_headers(grouped)["x-ms-documentdb-query-metrics"])
    assert int(metrics["retrievedDocumentCount"]) == len(GROUPED)


def test_a_partition_scoped_query_uses_the_key_index_and_a_count_loads_no_document(
    grouped: ContainerProxy,
) -> None:
    """Issue 44, as the azure-cosmos SDK's own `test_populate_index_metrics` expects of
    Cosmos: `SELECT * FROM c` in a partition lists the key's index, whole, and nothing else;
    and a COUNT without a filter is answered from the index, retrieving no document."""
    list(grouped.query_items("SELECT * FROM c", partition_key="p0", populate_index_metrics=True))
    assert last_headers(grouped)["x-ms-cosmos-index-utilization"] == {
        "UtilizedSingleIndexes": [
            {
                "FilterExpression": "",
                "IndexSpec": "/pk/?",
                "FilterPreciseSet": True,
                "IndexPreciseSet": True,
                "IndexImpactScore": "High",
            }
        ],
        "PotentialSingleIndexes": [],
        "UtilizedCompositeIndexes": [],
        "PotentialCompositeIndexes": [],
    }
    counted: list[Any] = list(
        grouped.query_items(
            "SELECT VALUE COUNT(1) FROM c", partition_key="p0", populate_query_metrics=True
        )
    )
    assert counted == [len([d for d in GROUPED if d["pk"] == "p0"])]
    metrics = parsed_query_metrics(last_headers(grouped)["x-ms-documentdb-query-metrics"])
    assert (metrics["retrievedDocumentCount"], metrics["retrievedDocumentSize"]) == ("0", "0")
    assert metrics["outputDocumentCount"] == "1"


def test_no_metrics_unless_asked(grouped: ContainerProxy) -> None:
    list(grouped.query_items("SELECT * FROM c", partition_key="p0"))
    headers = last_headers(grouped)
    assert "x-ms-documentdb-query-metrics" not in headers
    assert "x-ms-cosmos-index-utilization" not in headers


def test_index_metrics_name_the_paths_the_filter_uses(grouped: ContainerProxy) -> None:
    # https://learn.microsoft.com/azure/cosmos-db/nosql/index-metrics: utilized single indexes
    # are the included paths the query used (`/Item/?`, `/Price/?` for `c.Item = ... AND
    # c.Price > 2`); the Python SDK decodes the base64 JSON into a dict.
    list(
        grouped.query_items(
            "SELECT TOP 10 c.id FROM c WHERE c.group = 'a' AND c.n > 2 AND c.group != 'b' "
            "ORDER BY c.id",
            partition_key="p0",
            populate_index_metrics=True,
        )
    )
    info = last_headers(grouped)["x-ms-cosmos-index-utilization"]
    assert isinstance(info, dict)
    # The partition key scope first (see the next test), then the filter's and ORDER BY's paths.
    assert [i["IndexSpec"] for i in info["UtilizedSingleIndexes"]] == [
        "/pk/?",
        "/group/?",
        "/n/?",
        "/id/?",
    ]
    assert info["UtilizedSingleIndexes"][0]["IndexImpactScore"] == "High"
    assert info["PotentialSingleIndexes"] == []
    assert info["UtilizedCompositeIndexes"] == []
    assert info["PotentialCompositeIndexes"] == []


def test_index_metrics_name_the_composite_index_an_order_by_uses(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("ix"),
        PartitionKey("/pk"),
        indexing_policy={
            "compositeIndexes": [
                [{"path": "/group", "order": "ascending"}, {"path": "/n", "order": "descending"}]
            ]
        },
    )
    container.create_item({"id": "1", "pk": "a", "group": "x", "n": 1})
    rows: list[Any] = list(
        container.query_items(
            "SELECT VALUE c.id FROM c ORDER BY c.group ASC, c.n DESC",
            partition_key="a",
            populate_index_metrics=True,
        )
    )
    assert rows == ["1"]
    info = last_headers(container)["x-ms-cosmos-index-utilization"]
    assert [i["IndexSpec"] for i in info["UtilizedSingleIndexes"]] == ["/pk/?"]  # the scope
    assert [i["IndexSpecs"] for i in info["UtilizedCompositeIndexes"]] == [
        ["/group ASC", "/n DESC"]
    ]
