"""Cross-partition queries through the SDK's query-plan path agree with a direct evaluation.

The SDK merges per-range results of our rewritten queries (ORDER BY items, aggregate items,
OFFSET/LIMIT windows, DISTINCT); the engine evaluating the original query over all documents
is the reference. Paging is forced small so continuation tokens are exercised too.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey
from cosmos_rest import unique

from cosmos_emulator.query.evaluator import run, validate
from cosmos_emulator.query.parser import parse_query

QUERIES = [
    "SELECT * FROM c ORDER BY c.n",
    "SELECT c.id, c.n FROM c ORDER BY c.n DESC",
    "SELECT VALUE c.id FROM c WHERE c.n >= 10 ORDER BY c.id",
    "SELECT VALUE c.s FROM c ORDER BY c.s DESC",
    "SELECT TOP 7 VALUE c.id FROM c ORDER BY c.n",
    "SELECT VALUE c.id FROM c ORDER BY c.id OFFSET 5 LIMIT 9",
    "SELECT VALUE c.id FROM c OFFSET 3 LIMIT 4",
    "SELECT VALUE COUNT(1) FROM c WHERE c.flag",
    "SELECT VALUE SUM(c.n) FROM c",
    "SELECT VALUE MIN(c.n) FROM c WHERE c.flag = false",
    "SELECT VALUE MAX(c.s) FROM c",
    "SELECT VALUE AVG(c.n) FROM c WHERE c.n < 20",
    "SELECT DISTINCT VALUE c.group FROM c",
    "SELECT DISTINCT VALUE c.group FROM c ORDER BY c.group",
    "SELECT VALUE c.id FROM c WHERE c.group IN ('a', 'b') AND NOT c.flag ORDER BY c.n DESC",
    "SELECT DISTINCT VALUE c.group FROM c ORDER BY c.group OFFSET 1 LIMIT 2",
    "SELECT DISTINCT VALUE c.n FROM c ORDER BY c.n DESC OFFSET 3 LIMIT 5",
    # Rewritten queries print functions, `?:` and `??` back as SQL the ranges parse again.
    "SELECT VALUE {'id': c.id, 'size': c.n > 10 ? 'big' : 'small'} FROM c ORDER BY c.id",
    "SELECT VALUE c.missing ?? CONCAT(c.s, '-', ToString(POWER(c.n, 2))) FROM c ORDER BY c.n",
    r"SELECT VALUE COUNT(1) FROM c WHERE RegexMatch(c.s, '^[xy]\\d$') AND IS_INTEGER(c.n)",
    "SELECT TOP 5 VALUE DateTimeAdd('dd', c.n, '2020-01-01T00:00:00Z') FROM c ORDER BY c.n DESC",
]


@pytest.fixture(scope="module")
def dataset() -> list[dict[str, Any]]:
    rng = random.Random(5)
    docs = []
    for i in range(40):
        doc: dict[str, Any] = {
            "id": f"d{i:02d}",
            "pk": f"p{rng.randrange(7)}",
            "n": rng.randrange(30),
            "s": rng.choice(["x", "y", "z", "w"]) + str(rng.randrange(5)),
            "flag": rng.random() < 0.5,
            "group": rng.choice(["a", "b", "c"]),
        }
        docs.append(doc)
    return docs


@pytest.fixture
def loaded(database: DatabaseProxy, dataset: list[dict[str, Any]]) -> ContainerProxy:
    container = database.create_container(unique("plan"), PartitionKey("/pk"))
    for doc in dataset:
        container.create_item(doc)
    return container


def strip_system(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if not k.startswith("_")}
    return value


@pytest.mark.parametrize("text", QUERIES)
def test_plan_path_matches_direct_evaluation(
    loaded: ContainerProxy, dataset: list[dict[str, Any]], text: str
) -> None:
    query = parse_query(text)
    validate(query)
    expected = run(query, dataset, {})
    got = [
        strip_system(r)
        for r in loaded.query_items(text, enable_cross_partition_query=True, max_item_count=4)
    ]
    if query.order_by or "COUNT" in text or "SUM" in text or "MIN" in text or "MAX" in text:
        assert got == expected
    else:
        assert sorted(map(repr, got)) == sorted(map(repr, expected))
        assert len(got) == len(expected)
