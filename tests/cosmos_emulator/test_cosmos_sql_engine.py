"""The SQL engine on its own: Cosmos semantics that are awkward to reach through the SDK."""

from __future__ import annotations

from typing import Any

import pytest

from cosmos_emulator.errors import CosmosError
from cosmos_emulator.query.evaluator import run, validate
from cosmos_emulator.query.parser import parse_query
from cosmos_emulator.query.planner import needs_plan, query_plan

DOCS: list[dict[str, Any]] = [
    {"id": "a", "n": 1, "flag": True, "arr": [1, 2], "o": {"x": 1}, "s": "Apple"},
    {"id": "b", "n": "1", "flag": False, "arr": [True, 2], "s": "apple"},
    {"id": "c", "n": None, "flag": 1},
    {"id": "d"},
]


def ids(text: str, **params: Any) -> list[Any]:
    query = parse_query(text)
    validate(query)
    return run(query, DOCS, {f"@{k}": v for k, v in params.items()})


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("c.n = 1", ["a"]),  # no coercion between "1" and 1
        ("c.n > 0", ["a"]),  # comparing across types is undefined, so filtered out
        ("c.n = null", ["c"]),  # null is a value; a missing property is not
        ("NOT IS_DEFINED(c.n)", ["d"]),
        ("c.flag", ["a"]),  # only a true boolean passes, not a truthy number
        ("c.flag = 1", ["c"]),
        ("c.arr = [1, 2]", ["a"]),  # deep equality, and true is not 1
        ('c.o = {"x": 1}', ["a"]),
        ("c.missing != 1", []),  # undefined != 1 is undefined
        ("NOT (c.missing = 1)", []),
        ("c.missing = 1 OR c.id = 'd'", ["d"]),
        ("c.n IN (1, '1')", ["a", "b"]),
        ("c.n NOT IN (1)", ["b", "c"]),
        ("c.n BETWEEN 0 AND 2", ["a"]),
        ("STARTSWITH(c.s, 'app', true)", ["a", "b"]),
        ("CONTAINS(c.s, 'ppl')", ["a", "b"]),
        ("LOWER(c.s) = 'apple'", ["a", "b"]),
        ("ARRAY_CONTAINS(c.arr, 2)", ["a", "b"]),
        ("c.s || '!' = 'Apple!'", ["a"]),
    ],
)
def test_where_semantics(where: str, expected: list[str]) -> None:
    assert ids(f"SELECT VALUE c.id FROM c WHERE {where}") == expected


def test_projection_names_and_undefined_fields() -> None:
    rows = ids("SELECT c.id, c.o.x, c['s'], 1 + 1, c.n AS num FROM c WHERE c.id = 'a'")
    assert rows == [{"id": "a", "x": 1, "s": "Apple", "$1": 2, "num": 1}]
    assert ids("SELECT c.o FROM c WHERE c.id = 'b'") == [{}]


def test_order_by_uses_the_cosmos_type_order() -> None:
    assert ids("SELECT VALUE c.id FROM c ORDER BY c.n") == ["d", "c", "a", "b"]
    assert ids("SELECT VALUE c.id FROM c ORDER BY c.n DESC") == ["b", "a", "c", "d"]


def test_aggregates() -> None:
    assert ids("SELECT VALUE COUNT(1) FROM c") == [4]
    assert ids("SELECT VALUE COUNT(c.n) FROM c") == [3]
    assert ids("SELECT VALUE SUM(c.n) FROM c WHERE c.id = 'a'") == [1]
    assert ids("SELECT VALUE SUM(c.n) FROM c") == []  # a non-number makes SUM undefined
    assert ids("SELECT VALUE MAX(c.id) FROM c") == ["d"]
    assert ids("SELECT COUNT(1) AS n, MIN(c.id) AS first FROM c") == [{"n": 4, "first": "a"}]


@pytest.mark.parametrize(
    "text",
    [
        "SELECT c.id, COUNT(1) FROM c",  # bare property beside an aggregate
        "SELECT * FROM c WHERE COUNT(1) > 1",
        "SELECT TOP 1 * FROM c OFFSET 0 LIMIT 1",
        "SELECT * FROM c WHERE root.id = 'a'",
        "SELECT * FROM c WHERE c.id = @undefined_param",
    ],
)
def test_invalid_queries_are_400(text: str) -> None:
    with pytest.raises(CosmosError) as err:
        ids(text)
    assert err.value.status == 400


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM c ORDER BY c.n",
        "SELECT c.id FROM c WHERE c.n > 0 ORDER BY c.n DESC, c.id",
        "SELECT VALUE COUNT(1) FROM c WHERE c.flag",
        "SELECT VALUE AVG(c.n) FROM c",
        "SELECT DISTINCT VALUE c.s FROM c",
        "SELECT VALUE c.id FROM c OFFSET 1 LIMIT 2",
        "SELECT TOP 2 c.id FROM c ORDER BY c.id",
    ],
)
def test_rewritten_queries_of_the_plan_parse_and_run(text: str) -> None:
    query = parse_query(text)
    assert needs_plan(query)
    plan = query_plan(query, {})
    rewritten = plan["queryInfo"]["rewrittenQuery"].replace(
        "{documentdb-formattableorderbyquery-filter}", "true"
    )
    if rewritten:
        again = parse_query(rewritten)
        validate(again)
        run(again, DOCS, {})
    assert plan["queryRanges"] == [
        {"min": "", "max": "FF", "isMinInclusive": True, "isMaxInclusive": False}
    ]


def test_plain_queries_need_no_plan() -> None:
    assert not needs_plan(parse_query("SELECT c.id FROM c WHERE c.n = 1"))


@pytest.mark.parametrize(
    "text",
    [
        "SELECT VALUE c.id FROM c",
        "SELECT VALUE c.id FROM c WHERE IS_DEFINED(c.n)",
        "SELECT c.s FROM c",
        "SELECT VALUE c.id FROM c OFFSET 1 LIMIT 2",
        "SELECT TOP 3 VALUE c.id FROM c",
        "SELECT VALUE c.id FROM c ORDER BY c.id DESC",
    ],
)
@pytest.mark.parametrize("needed", [0, 1, 2, 3, 10])
def test_early_stop_returns_a_prefix_of_the_full_result(text: str, needed: int) -> None:
    query = parse_query(text)
    validate(query)
    full = run(query, DOCS, {})
    partial = run(query, DOCS, {}, needed=needed)
    assert partial[: min(needed, len(full))] == full[:needed]
    assert len(partial) >= min(needed, len(full))
