"""Issue 38, Deliver 4: built-in scalar functions and the `?:` / `??` operators, via the SDK.

Each case is an example Microsoft's NoSQL query reference gives for the function (the page of
each group is cited above it; each function has its own page under
https://learn.microsoft.com/azure/cosmos-db/nosql/query/<function-name>), run as Cosmos runs
it: a query without FROM, its result compared with the documented one. A function given the
wrong type returns undefined, which the projection then omits: those cases expect MISSING.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey, exceptions
from cosmos_rest import unique

MISSING = object()  # the documented result is undefined: the property is left out


def evaluate(container: ContainerProxy, cases: list[tuple[str, Any]]) -> dict[str, Any]:
    """All `cases` in one query, as `{"r0": <expr>, "r1": ...}` (undefined ones omitted)."""
    fields = ", ".join(f'"r{i}": {expr}' for i, (expr, _) in enumerate(cases))
    rows = list(
        container.query_items(f"SELECT VALUE {{{fields}}}", enable_cross_partition_query=True)
    )
    assert len(rows) == 1
    result: dict[str, Any] = rows[0]
    return result


def check(container: ContainerProxy, cases: list[tuple[str, Any]]) -> None:
    got = evaluate(container, cases)
    for i, (expr, expected) in enumerate(cases):
        key = f"r{i}"
        if expected is MISSING:
            assert key not in got, f"{expr} should be undefined, got {got.get(key)!r}"
        elif isinstance(expected, float):
            assert got.get(key) == pytest.approx(expected, rel=1e-12), expr
        else:
            assert key in got, f"{expr} is undefined, expected {expected!r}"
            assert got[key] == expected and type(got[key]) is type(expected), (
                f"{expr}: {got[key]!r} != {expected!r}"
            )


# https://learn.microsoft.com/azure/cosmos-db/nosql/query/mathematical-functions
MATHEMATICAL: list[tuple[str, Any]] = [
    ("ABS(-1)", 1),
    ("ABS(0)", 0),
    ("ABS(1)", 1),
    ("CEILING(-2.4)", -2),
    ("CEILING(-2.6)", -2),
    ("CEILING(2.4)", 3),
    ("CEILING(2.6)", 3),
    ("FLOOR(-2.4)", -3),
    ("FLOOR(2.6)", 2),
    ("ROUND(2.4)", 2),
    ("ROUND(2.5)", 3),  # midpoints round away from zero
    ("ROUND(-2.5)", -3),
    ("ROUND(-2.6)", -3),
    ("TRUNC(2.6)", 2),
    ("TRUNC(-2.6)", -2),
    ("SIGN(-2)", -1),
    ("SIGN(0)", 0),
    ("SIGN(2)", 1),
    ("SQRT(1)", 1),
    ("SQRT(2.0)", 1.4142135623730952),
    ("SQRT(3)", 1.7320508075688772),
    ("SQUARE(2.0)", 4),
    ("SQUARE(3)", 9),
    ("POWER(2, 3)", 8),
    ("POWER(2.5, 3)", 15.625),
    ("EXP(10)", 22026.465794806718),
    ("EXP(LOG(20))", 19.999999999999996),
    ("LOG(10)", 2.3025850929940459),
    ("LOG(8, 2)", 3),
    ("LOG10(100)", 2),
    ("PI()", 3.141592653589793),
    ("SIN(45.175643)", 0.929607286611012),
    ("COS(14.78)", -0.59946542619465426),
    ("TAN(PI()/2)", 16331239353195370.0),
    ("COT(124.1332)", -0.040311998371148884),
    ("ASIN(-1)", -1.5707963267948966),
    ("ACOS(-1)", 3.1415926535897931),
    ("ATAN(-45.01)", -1.5485826962062663),
    ("ATN2(35.175643, 129.44)", 1.3054517947300646),
    ("DEGREES(PI()/2)", 90),
    ("RADIANS(-45.01)", -0.7855726963226477),
    ("RADIANS(197.1099392)", 3.4402174274458375),
    ("NumberBin(37.752, 0.1)", 37.7),
    ("NumberBin(-37.752)", -38),
    ("NumberBin(37.752, 5)", 35),
    # Undefined: a non-number, outside the domain, or no double can hold the result.
    ("ABS('1')", MISSING),
    ("SQRT(-1)", MISSING),
    ("LOG(0)", MISSING),
    ("POWER(10, 400)", MISSING),
    ("ACOS(2)", MISSING),
    ("NumberBin(1, 0)", MISSING),
]

# https://learn.microsoft.com/azure/cosmos-db/nosql/query/intadd (and the other Int* pages):
# 64-bit integer arithmetic; a non-integer argument is undefined.
INTEGER: list[tuple[str, Any]] = [
    ("IntAdd(-4, 5)", 1),
    ("IntSub(14, 5)", 9),
    ("IntMul(5, 3)", 15),
    ("IntDiv(14, 5)", 2),
    ("IntDiv(-7, 2)", -3),
    ("IntMod(14, 5)", 4),
    ("IntMod(-7, 2)", -1),
    ("IntBitAnd(56, 100)", 32),
    ("IntBitOr(56, 100)", 124),
    ("IntBitXor(56, 100)", 92),
    ("IntBitNot(56)", -57),
    ("IntBitLeftShift(56, 4)", 896),
    ("IntBitRightShift(56, 4)", 3),
    ("IntAdd(9223372036854775807, 1)", -9223372036854775808),
    ("IntDiv(5, 0)", MISSING),
    ("IntAdd(1.5, 1)", MISSING),
    ("IntBitOr('1', 1)", MISSING),
]

# https://learn.microsoft.com/azure/cosmos-db/nosql/query/string-functions
STRING: list[tuple[str, Any]] = [
    ('CONCAT("abc", "def")', "abcdef"),
    ('CONCAT("a", "b", "c", "d")', "abcd"),
    ('CONTAINS("AdventureWorks", "Works")', True),
    ('CONTAINS("AdventureWorks", "works")', False),
    ('CONTAINS("AdventureWorks", "works", true)', True),
    ('ENDSWITH("abc", "b")', False),
    ('ENDSWITH("abc", "bC", true)', True),
    ('STARTSWITH("abc", "b")', False),
    ('STARTSWITH("abc", "A", true)', True),
    ('INDEX_OF("abc", "ab")', 0),
    ('INDEX_OF("abc", "c")', 2),
    ('INDEX_OF("abc", "d")', -1),
    ('INDEX_OF("abcabc", "b", 2)', 4),
    ('LEFT("abc", 1)', "a"),
    ('LEFT("abc", 2)', "ab"),
    ('RIGHT("abc", 1)', "c"),
    ('RIGHT("abc", 2)', "bc"),
    ('LENGTH("abc")', 3),
    ('LOWER("Abc")', "abc"),
    ('UPPER("Abc")', "ABC"),
    ('LTRIM("  abc  ")', "abc  "),
    ('RTRIM("  abc  ")', "  abc"),
    ('TRIM("  abc  ")', "abc"),
    ('REPLACE("This is a Test", "Test", "desk")', "This is a desk"),
    ('REPLICATE("a", 3)', "aaa"),
    ('REVERSE("Abc")', "cbA"),
    ('SUBSTRING("abc", 1, 1)', "b"),
    ('SUBSTRING("abc", 1, 2)', "bc"),
    ('StringEquals("abc", "abc")', True),
    ('StringEquals("abc", "ABC")', False),
    ('StringEquals("abc", "ABC", true)', True),
    ("ToString(1)", "1"),
    ("ToString(-0.5)", "-0.5"),
    ("ToString(true)", "true"),
    ("ToString(null)", "null"),
    ('ToString({"a": [1, "x"]})', '{"a":[1,"x"]}'),
    ('ToString("text")', "text"),
    ("ToString(undefined)", MISSING),
    ('StringToArray("[]")', []),
    ('StringToArray("[1,2,3]")', [1, 2, 3]),
    ('StringToArray("[\\"str\\",2,3]")', ["str", 2, 3]),
    ("StringToArray(\"['a']\")", MISSING),  # JSON strings need double quotes
    ('StringToArray("1")', MISSING),
    ('StringToArray("[")', MISSING),
    ('StringToBoolean("true")', True),
    ('StringToBoolean("    false")', False),
    ('StringToBoolean("\\"true\\"")', MISSING),
    ('StringToBoolean("TRUE")', MISSING),
    ('StringToNull("null")', None),
    ('StringToNull("  null ")', None),
    ('StringToNull("NULL")', MISSING),
    ('StringToNumber("1.000000")', 1),
    ('StringToNumber("3.14")', 3.14),
    ('StringToNumber("   60   ")', 60),
    ('StringToNumber("-1.79769e+308")', -1.79769e308),
    ('StringToNumber("1a")', MISSING),
    ('StringToObject("{}")', {}),
    ('StringToObject("{\\"A\\":[1,2,3]}")', {"A": [1, 2, 3]}),
    ("StringToObject(\"{'a':[1,2,3]}\")", MISSING),
    ('StringToObject("{a:1}")', MISSING),
    ('RegexMatch("abcd", "ABC", "")', False),
    ('RegexMatch("abcd", "ABC", "i")', True),
    ('RegexMatch("abcd", "ab.", "")', True),
    ('RegexMatch("abcd", "ab c", "x")', True),
    ('RegexMatch("abcd", "AB c", "ix")', True),
    ('RegexMatch("a\\nb", "^b$", "m")', True),
    ("UPPER(1)", MISSING),
    ('CONCAT("a", 1)', MISSING),
    ('LENGTH(["a"])', MISSING),
    ('REPLICATE("a", -1)', MISSING),
]

# https://learn.microsoft.com/azure/cosmos-db/nosql/query/array-functions
ARRAY: list[tuple[str, Any]] = [
    (
        'ARRAY_CONCAT(["apples", "strawberries"], ["bananas"])',
        ["apples", "strawberries", "bananas"],
    ),
    ('ARRAY_CONTAINS(["apples", "strawberries", "bananas"], "apples")', True),
    ('ARRAY_CONTAINS(["apples", "strawberries", "bananas"], "mangoes")', False),
    ('ARRAY_CONTAINS([{"name": "apples", "fresh": true}], {"name": "apples"}, true)', True),
    ('ARRAY_CONTAINS([{"name": "apples", "fresh": true}], {"name": "apples"})', False),
    ('ARRAY_CONTAINS_ANY([1, true, "3", [1, 2, 3]], 2, true)', True),
    ('ARRAY_CONTAINS_ANY([1, true, "3", [1, 2, 3]], 4, 5, 6)', False),
    ('ARRAY_CONTAINS_ALL([1, true, "3", [1, 2, 3]], 1, true, "3", [1, 2, 3])', True),
    ('ARRAY_CONTAINS_ALL([1, true, "3", [1, 2, 3]], 1, true, "3", [1, 2, 3], 4)', False),
    ('ARRAY_LENGTH(["apples", "strawberries", "bananas"])', 3),
    ('ARRAY_SLICE(["apples", "strawberries", "bananas"], 1)', ["strawberries", "bananas"]),
    ('ARRAY_SLICE(["apples", "strawberries", "bananas"], 1, 1)', ["strawberries"]),
    ('ARRAY_SLICE(["apples", "strawberries", "bananas"], -2, 1)', ["strawberries"]),
    ('ARRAY_SLICE(["apples", "strawberries", "bananas"], -2, 2)', ["strawberries", "bananas"]),
    ('ARRAY_SLICE(["apples", "strawberries", "bananas"], 1, 0)', []),
    ('ARRAY_SLICE(["apples", "strawberries", "bananas"], 1, 1000)', ["strawberries", "bananas"]),
    ('ARRAY_SLICE(["apples", "strawberries", "bananas"], 1, -100)', []),
    ("SetIntersect([1, 2, 3, 4], [3, 4, 5, 6])", [3, 4]),
    ("SetIntersect([1, 2], [3, 4])", []),
    ('SetIntersect([{"a": 1}, "x"], ["y", {"a": 1}])', [{"a": 1}]),
    ("SetUnion([1, 2, 3, 4], [3, 4, 5, 6])", [1, 2, 3, 4, 5, 6]),
    ("SetUnion([1, 1], [])", [1]),
    ('ARRAY_LENGTH("abc")', MISSING),
    ("ARRAY_CONCAT([1], 2)", MISSING),
    ('ARRAY_SLICE("abc", 1)', MISSING),
    ("SetUnion([1], null)", MISSING),
]

# https://learn.microsoft.com/azure/cosmos-db/nosql/query/type-checking-functions
TYPE_CHECKING: list[tuple[str, Any]] = [
    ("IS_ARRAY([1, 2])", True),
    ("IS_ARRAY({})", False),
    ("IS_BOOL(true)", True),
    ("IS_BOOL(1)", False),
    ('IS_DEFINED({"a": 5}.a)', True),
    ('IS_DEFINED({"a": 5}.b)', False),
    ("IS_NULL(null)", True),
    ("IS_NULL(undefined)", False),
    ("IS_NUMBER(1.5)", True),
    ('IS_NUMBER("1")', False),
    ('IS_OBJECT({"a": 1})', True),
    ("IS_OBJECT([])", False),
    ('IS_PRIMITIVE("a")', True),
    ("IS_PRIMITIVE(null)", True),
    ("IS_PRIMITIVE([1])", False),
    ("IS_PRIMITIVE(undefined)", False),
    ('IS_STRING("a")', True),
    ("IS_STRING(1)", False),
    ("IS_FINITE_NUMBER(1.5)", True),
    ('IS_FINITE_NUMBER("1")', False),
    ("IS_INTEGER(1234)", True),
    ("IS_INTEGER(12.34)", False),
    ('IS_INTEGER("1")', False),
]

# https://learn.microsoft.com/azure/cosmos-db/nosql/query/date-time-functions
DATE_AND_TIME: list[tuple[str, Any]] = [
    ('DateTimeAdd("mm", 1, "2020-07-09T23:20:13.4575530Z")', "2020-08-09T23:20:13.4575530Z"),
    ('DateTimeAdd("hh", -2, "2020-07-09T23:20:13.4575530Z")', "2020-07-09T21:20:13.4575530Z"),
    ('DateTimeAdd("yyyy", 1, "2020-02-29T00:00:00.0000000Z")', "2021-02-28T00:00:00.0000000Z"),
    ('DateTimeAdd("ms", 1, "2020-07-09T23:59:59.9995Z")', "2020-07-10T00:00:00.0005000Z"),
    ('DateTimeDiff("yyyy", "2019-02-04T16:00:00.0000000Z", "2020-07-09T23:20:13.4575530Z")', 1),
    ('DateTimeDiff("mm", "2019-02-04T16:00:00.0000000Z", "2020-07-09T23:20:13.4575530Z")', 17),
    ('DateTimeDiff("dd", "2019-02-04T16:00:00.0000000Z", "2020-07-09T23:20:13.4575530Z")', 521),
    ('DateTimeDiff("hh", "2020-07-09T23:59:00.0000000Z", "2020-07-10T00:01:00.0000000Z")', 1),
    ('DateTimePart("yyyy", "2016-05-29T08:30:00.1301617Z")', 2016),
    ('DateTimePart("mm", "2016-05-29T08:30:00.1301617Z")', 5),
    ('DateTimePart("dd", "2016-05-29T08:30:00.1301617Z")', 29),
    ('DateTimePart("hh", "2016-05-29T08:30:00.1301617Z")', 8),
    ('DateTimePart("mi", "2016-05-29T08:30:00.1301617Z")', 30),
    ('DateTimePart("ss", "2016-05-29T08:30:00.1301617Z")', 0),
    ('DateTimePart("ms", "2016-05-29T08:30:00.1301617Z")', 130),
    ('DateTimePart("mcs", "2016-05-29T08:30:00.1301617Z")', 130161),
    ('DateTimePart("ns", "2016-05-29T08:30:00.1301617Z")', 130161700),
    ("DateTimeFromParts(2017, 4, 20)", "2017-04-20T00:00:00.0000000Z"),
    ("DateTimeFromParts(2017, 4, 20, 13, 15)", "2017-04-20T13:15:00.0000000Z"),
    ("DateTimeFromParts(2017, 4, 20, 13, 15, 20, 3456789)", "2017-04-20T13:15:20.3456789Z"),
    ('DateTimeToTicks("2020-07-09T23:20:13.4575530Z")', 15943368134575530),
    ('DateTimeToTimestamp("2020-07-09T23:20:13.4575530Z")', 1594336813457),
    ("TicksToDateTime(15943368134575530)", "2020-07-09T23:20:13.4575530Z"),
    ("TimestampToDateTime(1594336813457)", "2020-07-09T23:20:13.4570000Z"),
    ('DateTimeBin("2021-06-28T17:24:29.2991234Z", "hh")', "2021-06-28T17:00:00.0000000Z"),
    ('DateTimeBin("2021-06-28T17:24:29.2991234Z", "hh", 2)', "2021-06-28T16:00:00.0000000Z"),
    (
        'DateTimeBin("2021-06-28T17:24:29.2991234Z", "hh", 1, "2021-01-01T00:30:00.0000000Z")',
        "2021-06-28T16:30:00.0000000Z",
    ),
    ('DateTimeBin("2021-06-28T17:24:29.2991234Z", "dd", 7)', "2021-06-24T00:00:00.0000000Z"),
    ('DateTimeAdd("dd", 1, "not a date")', MISSING),
    ('DateTimePart("fortnight", "2016-05-29T08:30:00.1301617Z")', MISSING),
    ("DateTimeFromParts(2017, 13, 1)", MISSING),
    ('DateTimeToTicks("2020-02-30T00:00:00.0000000Z")', MISSING),
]


@pytest.mark.parametrize(
    "cases",
    [MATHEMATICAL, INTEGER, STRING, ARRAY, TYPE_CHECKING, DATE_AND_TIME],
    ids=["mathematical", "integer", "string", "array", "type-checking", "date-and-time"],
)
def test_documented_examples(container: ContainerProxy, cases: list[tuple[str, Any]]) -> None:
    check(container, cases)


ISO_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z")


def test_current_time_functions_read_one_clock(container: ContainerProxy) -> None:
    got = evaluate(
        container,
        [
            ("GetCurrentDateTime()", None),
            ("GetCurrentTicks()", None),
            ("GetCurrentTimestamp()", None),
            ("DateTimeToTicks(GetCurrentDateTime())", None),
            ("RAND()", None),
        ],
    )
    assert ISO_DATE_TIME.fullmatch(got["r0"])
    assert abs(got["r1"] // 10_000 - got["r2"]) < 60_000  # ticks and milliseconds agree
    assert abs(got["r3"] - got["r1"]) < 60 * 10_000_000
    assert 0 <= got["r4"] < 1


# https://learn.microsoft.com/azure/cosmos-db/nosql/query/ternary-coalesce-operators
def test_conditional_and_coalesce_operators(container: ContainerProxy) -> None:
    for doc in (
        {"id": "1", "pk": "a", "price": 150, "name": "boots"},
        {"id": "2", "pk": "a", "price": 20, "name": None},
        {"id": "3", "pk": "b", "price": "n/a"},
    ):
        container.create_item(doc)
    rows = list(
        container.query_items(
            'SELECT c.id, c.price > 100 ? "premium" : "standard" AS tier, '
            'c.name ?? "unnamed" AS name, '
            "(c.price < 50 ? c.price : c.missing) ?? 0 AS cheap "
            "FROM c ORDER BY c.id",
            enable_cross_partition_query=True,
        )
    )
    assert rows == [
        {"id": "1", "tier": "premium", "name": "boots", "cheap": 0},
        # null is a value: `??` keeps it; only undefined falls through.
        {"id": "2", "tier": "standard", "name": None, "cheap": 20},
        # A comparison across types is undefined, and only true picks the first branch.
        {"id": "3", "tier": "standard", "name": "unnamed", "cheap": 0},
    ]
    nested: list[Any] = list(
        container.query_items(
            'SELECT VALUE c.price > 100 ? "high" : c.price > 50 ? "mid" : "low" FROM c '
            "WHERE IS_NUMBER(c.price) ? c.price > 10 : false",
            partition_key="a",
        )
    )
    assert sorted(nested) == ["high", "low"]


def test_functions_in_computed_properties(database: DatabaseProxy) -> None:
    # https://learn.microsoft.com/azure/cosmos-db/nosql/query/computed-properties
    container = database.create_container(
        unique("cp"),
        PartitionKey("/pk"),
        computed_properties=[
            {"name": "cp_area", "query": "SELECT VALUE POWER(c.side, 2) FROM c"},
            {"name": "cp_size", "query": 'SELECT VALUE c.side > 2 ? "big" : "small" FROM c'},
            {"name": "cp_label", "query": 'SELECT VALUE c.label ?? CONCAT("#", c.id) FROM c'},
            {"name": "cp_day", "query": 'SELECT VALUE DateTimePart("dd", c.at) FROM c'},
        ],
    )
    container.create_item({"id": "1", "pk": "a", "side": 3, "at": "2024-05-29T08:30:00Z"})
    container.create_item({"id": "2", "pk": "a", "side": 1.5, "label": "tile"})
    rows = list(
        container.query_items(
            "SELECT c.id, c.cp_area, c.cp_size, c.cp_label, c.cp_day FROM c "
            "WHERE c.cp_area > 1 ORDER BY c.cp_area DESC",
            partition_key="a",
        )
    )
    assert rows == [
        {"id": "1", "cp_area": 9, "cp_size": "big", "cp_label": "#1", "cp_day": 29},
        {"id": "2", "cp_area": 2.25, "cp_size": "small", "cp_label": "tile"},
    ]


@pytest.mark.parametrize("function", ["GetCurrentDateTime()", "GetCurrentTicks()", "RAND()"])
def test_computed_properties_refuse_nondeterministic_functions(
    database: DatabaseProxy, function: str
) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as caught:
        database.create_container(
            unique("cp"),
            PartitionKey("/pk"),
            computed_properties=[{"name": "cp_now", "query": f"SELECT VALUE {function} FROM c"}],
        )
    assert caught.value.status_code == 400
    assert "not deterministic" in str(caught.value.message)


def test_a_query_without_from_runs_its_selection_once(container: ContainerProxy) -> None:
    container.create_item({"id": "1", "pk": "a"})
    container.create_item({"id": "2", "pk": "b"})
    rows = list(container.query_items("SELECT ABS(-1) AS a, 2", enable_cross_partition_query=True))
    assert rows == [{"a": 1, "$1": 2}]
    with pytest.raises(exceptions.CosmosHttpResponseError) as caught:
        list(container.query_items("SELECT *", enable_cross_partition_query=True))
    assert caught.value.status_code == 400
    assert "FROM clause is omitted" in str(caught.value.message)


def test_a_wrong_number_of_arguments_is_400(container: ContainerProxy) -> None:
    for text in ("SELECT VALUE ABS(1, 2)", "SELECT VALUE CONCAT('a')", "SELECT VALUE PI(1)"):
        with pytest.raises(exceptions.CosmosHttpResponseError) as caught:
            list(container.query_items(text, enable_cross_partition_query=True))
        assert caught.value.status_code == 400
        assert "argument" in str(caught.value.message)
