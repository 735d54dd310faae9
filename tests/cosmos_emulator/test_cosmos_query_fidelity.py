"""Issue 38, query groups: results and response headers as Cosmos gives them, through the SDK.

Group 9: `SELECT DISTINCT ... ORDER BY ... OFFSET ... LIMIT` across partitions.
Group 2: query metrics (`x-ms-documentdb-query-metrics`) and index metrics
(`x-ms-cosmos-index-utilization`) when the request asks for them.
"""

from __future__ import annotations

from typing import Any

import pytest
from azure.cosmos import ContainerProxy

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
        ("SELECT DISTINCT VALUE c.group FROM c ORDER BY c.group DESC OFFSET 0 LIMIT 4", list("edcb")),
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
