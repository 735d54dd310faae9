"""Hostile bodies, queries and headers: each is a 400 naming the reason, never the 500 bug path."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, exceptions
from cosmos_rest import call, values

from cosmos_emulator import RunningCosmosEmulator


def strict_json(raw: bytes) -> Any:
    """Standard JSON only: Python's own decoder would accept NaN and Infinity."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(raw, parse_constant=refuse)


def docs_path(container: ContainerProxy) -> str:
    return f"/{container.container_link}/docs"


def post_raw(
    emu: RunningCosmosEmulator,
    container: ContainerProxy,
    body: bytes,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    status, _, data = call(
        emu.url,
        emu.key,
        "POST",
        docs_path(container),
        body,
        {"x-ms-documentdb-partitionkey": '["a"]', **(headers or {})},
    )
    return status, data


def assert_bad_request(err: exceptions.CosmosHttpResponseError, *words: str) -> None:
    assert err.status_code == 400, err
    message = str(err.message)
    for word in words:
        assert word in message, message


# -- item bodies -------------------------------------------------------------------------------
def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"n": value}
    return value


def test_an_item_nested_deeper_than_128_levels_is_400(container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.create_item({"id": "deep", "pk": "a", "n": nested(200)})
    assert_bad_request(err.value, "128")


def test_an_item_at_the_nesting_limit_is_stored(container: ContainerProxy) -> None:
    item = {"id": "edge", "pk": "a", "n": nested(127)}  # the item itself is level one
    assert container.create_item(item)["n"] == item["n"]


def test_json_nested_far_beyond_the_recursion_limit_is_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    status, data = post_raw(cosmos_emulator, container, b"[" * 100_000 + b"]" * 100_000)
    assert status == 400
    assert data["code"] == "BadRequest" and "128" in data["message"]


@pytest.mark.parametrize(
    "number", [b"1e400", b"-1e400", b"9" * 5000, b"9" * 400, b"NaN", b"Infinity", b"-Infinity"]
)
def test_numbers_no_double_can_hold_are_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy, number: bytes
) -> None:
    body = b'{"id": "n", "pk": "a", "v": ' + number + b"}"
    status, data = post_raw(cosmos_emulator, container, body)
    assert status == 400, data
    assert data["code"] == "BadRequest"
    assert "double" in data["message"] or "not a JSON number" in data["message"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_the_sdk_cannot_store_nan_or_infinity(container: ContainerProxy, value: float) -> None:
    # The SDK serialises these as NaN / Infinity, which are not JSON; Cosmos refuses them.
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.upsert_item({"id": "f", "pk": "a", "v": value})
    assert_bad_request(err.value, "not a JSON number")


def test_a_body_that_is_not_utf8_is_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    status, data = post_raw(cosmos_emulator, container, b'{"id": "\xff", "pk": "a"}')
    assert status == 400 and "UTF-8" in data["message"]


def test_a_patch_that_would_overflow_a_double_is_400(container: ContainerProxy) -> None:
    container.create_item({"id": "p", "pk": "a", "v": 1.5e308, "list": [1]})
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.patch_item("p", "a", [{"op": "incr", "path": "/v", "value": 1.5e308}])
    assert_bad_request(err.value, "overflow")
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.patch_item("p", "a", [{"op": "set", "path": "/list/\u00b2", "value": 1}])
    assert_bad_request(err.value, "index")
    assert container.read_item("p", "a")["v"] == 1.5e308


def test_a_patch_that_nests_too_deep_is_400(container: ContainerProxy) -> None:
    container.create_item({"id": "q", "pk": "a", "n": nested(100)})
    path = "/n" * 100
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        container.patch_item("q", "a", [{"op": "set", "path": path, "value": nested(100)}])
    assert_bad_request(err.value, "128")


def test_every_response_is_strict_json(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    container.create_item({"id": "big", "pk": "a", "v": 1e308})
    status, _, _ = call(cosmos_emulator.url, cosmos_emulator.key, "GET", docs_path(container))
    assert status == 200
    request = urllib.request.Request(cosmos_emulator.url + "_emulator/health")
    with urllib.request.urlopen(request, timeout=5) as resp:
        strict_json(resp.read())
    items = list(
        container.query_items("SELECT VALUE c.v * 10 FROM c", enable_cross_partition_query=True)
    )
    assert items == []  # beyond the largest double: undefined, dropped, never Infinity


# -- SQL ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("SELECT * FROM c WHERE " + "(" * 5000 + "true" + ")" * 5000, "nests"),
        ("SELECT VALUE " + "- " * 5000 + "1 FROM c", "nests"),
        ("SELECT * FROM c WHERE " + "NOT " * 5000 + "true", "nests"),
        ("SELECT VALUE c" + ".a" * 5000 + " FROM c", "nest"),
        ("SELECT VALUE " + " - ".join(["1"] * 5000) + " FROM c", "nest"),
        ("SELECT VALUE " + "LOWER(" * 100 + "'a'" + ")" * 100 + " FROM c", "nests"),
        ("SELECT VALUE " + "true ? 1 : " * 5000 + "1 FROM c", "nests"),
        ("SELECT VALUE " + " ?? ".join(["c.a"] * 5000) + " FROM c", "nest"),
        ("SELECT VALUE " + "ABS(" * 100 + "1" + ")" * 100 + " FROM c", "nests"),
        ("SELECT VALUE 1e400 FROM c", "double"),
        ("SELECT VALUE " + "9" * 5000 + " FROM c", "too long"),
        ("SELECT VALUE '\\u12' FROM c", "hex"),
        ("SELECT * FROM c WHERE c.id = '" + "x" * 600_000 + "'", "512"),
    ],
)
def test_hostile_query_text_is_400(container: ContainerProxy, query: str, reason: str) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(container.query_items(query, partition_key="a"))
    assert_bad_request(err.value, reason)


def test_long_generated_or_chains_still_run(container: ContainerProxy) -> None:
    container.create_item({"id": "7", "pk": "a"})
    query = "SELECT VALUE c.id FROM c WHERE " + " OR ".join(f"c.id = '{i}'" for i in range(3000))
    assert values(container.query_items(query, partition_key="a")) == ["7"]


# Built-in functions given hostile arguments: bounded work, undefined where Cosmos says so,
# else a 400 naming the bound (the bounds are in src/cosmos_emulator/query/functions.py).
BIG = "a" * 100_000


@pytest.fixture
def big_item(container: ContainerProxy) -> ContainerProxy:
    container.create_item({"id": "big", "pk": "a", "big": BIG})
    return container


def test_hostile_function_arguments_are_undefined_and_cheap(big_item: ContainerProxy) -> None:
    cases = {
        "replicate_huge": "REPLICATE('x', 1e15)",  # Cosmos: undefined past 10,000 characters
        "replicate_big": "REPLICATE(c.big, 2)",
        "replicate_edge": "LENGTH(REPLICATE('ab', 5000))",
        "power": "POWER(10, 1e9)",
        "power_int": "POWER(2, 100000000)",
        "square": "SQUARE(1e200)",
        "exp": "EXP(1e6)",
        "shift": "IntBitLeftShift(1, 1000000000)",
        "wrap": "IntMul(9223372036854775807, 9223372036854775807)",
        "far_date": "DateTimeAdd('yyyy', 1e15, '2020-01-01T00:00:00Z')",
        "far_ticks": "TicksToDateTime(9223372036854775807)",
        "slice": "ARRAY_SLICE([1, 2], 9007199254740991, 9007199254740991)",
        "left": "LENGTH(LEFT(c.big, 1e300))",
    }
    fields = ", ".join(f'"{name}": {expr}' for name, expr in cases.items())
    started = time.monotonic()
    rows = values(big_item.query_items(f"SELECT VALUE {{{fields}}} FROM c", partition_key="a"))
    assert time.monotonic() - started < 5
    assert rows == [
        {"replicate_edge": 10_000, "shift": 0, "wrap": 1, "slice": [], "left": len(BIG)}
    ]


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("RegexMatch(c.big, '(a+)+$')", "backtrack exponentially"),
        ("RegexMatch(c.big, '(a|aa)*b')", "backtrack exponentially"),
        ("RegexMatch(c.big, '(a?){30}a{30}')", "backtrack exponentially"),
        (r"RegexMatch(c.big, '\\w+@')", "work bound"),  # '\\' in SQL text is one backslash
        ("RegexMatch(c.big, '.*.*.*x')", "work bound"),
        (r"RegexMatch('a', '(a)\\1')", "back-references"),
        ("RegexMatch('a', '" + "x" * 2000 + "')", "longer than 1000"),
        ("RegexMatch('a', '(')", "invalid regular expression"),
        ("RegexMatch('a', 'a', 'q')", "modifier"),
        ("REPLACE(c.big, 'a', c.big)", "exceeds"),
        ("CONCAT(" + ", ".join(["c.big"] * 22) + ")", "exceeds"),
    ],
)
def test_hostile_function_work_is_refused(big_item: ContainerProxy, expr: str, reason: str) -> None:
    started = time.monotonic()
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(big_item.query_items(f"SELECT VALUE {expr} FROM c", partition_key="a"))
    assert time.monotonic() - started < 5
    assert_bad_request(err.value, reason)


def test_hostile_query_parameters_are_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    body = b'{"query": "SELECT * FROM c WHERE c.v = @v", "parameters": [{"name": "@v", "value": '
    for value in (b"NaN", b"1e999", b"[" * 3000 + b"]" * 3000):
        status, data = post_raw(
            cosmos_emulator,
            container,
            body + value + b"}]}",
            {"Content-Type": "application/query+json", "x-ms-documentdb-isquery": "true"},
        )
        assert status == 400 and data["code"] == "BadRequest", data


def test_a_forged_continuation_token_is_400(container: ContainerProxy) -> None:
    container.create_item({"id": "1", "pk": "a"})
    token = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
    pages = container.query_items("SELECT * FROM c", partition_key="a").by_page(token)
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        list(next(pages))
    assert_bad_request(err.value, "continuation")


# -- headers -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header",
    [
        '["a"',
        '"a"',
        "[" * 5000 + "]" * 5000,
        '[{"a": 1}]',
        "[[1]]",
        "[NaN]",
        "[1e400]",
        '["a", "b", "c", "d"]',
        '["' + "x" * 3000 + '"]',
        "\u00ff",
    ],
)
def test_a_hostile_partition_key_header_is_400(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy, header: str
) -> None:
    for method, path, body in (
        ("POST", docs_path(container), {"id": "1", "pk": "a"}),
        ("GET", docs_path(container) + "/1", None),
        ("GET", docs_path(container), None),
    ):
        status, _, data = call(
            cosmos_emulator.url,
            cosmos_emulator.key,
            method,
            path,
            body,
            {"x-ms-documentdb-partitionkey": header},
        )
        assert status == 400, (method, path, data)
        assert data["code"] == "BadRequest" and data["message"]


def test_a_hostile_batch_partition_key_is_a_failed_operation(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    ops = [{"operationType": "Create", "resourceBody": {"id": "b", "pk": "a"}, "partitionKey": ""}]
    for key in ("[" * 5000 + "]" * 5000, ["a"], "[NaN]"):
        ops[0]["partitionKey"] = key
        status, data = post_raw(
            cosmos_emulator,
            container,
            json.dumps(ops).encode(),
            {"x-ms-cosmos-is-batch-request": "True", "x-ms-cosmos-batch-atomic": "True"},
        )
        assert status == 207, data
        assert data[0]["statusCode"] == 400


# -- the faults endpoint -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff",
        b"[]",
        b"[" * 5000 + b"]" * 5000,
        b'{"status": "429"}',
        b'{"count": 1.5}',
        b'{"method": 5}',
        b'{"delay_ms": 100000000}',
        b'{"status": NaN}',
    ],
)
def test_the_faults_endpoint_answers_bad_json_with_400(
    fresh_emulator: RunningCosmosEmulator, body: bytes
) -> None:
    headers = {
        "Authorization": f"Bearer {fresh_emulator.fault_token}",
        "Content-Type": "application/json",
    }
    request = urllib.request.Request(
        fresh_emulator.url + "_emulator/faults", body, headers, method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=5)
    assert err.value.code == 400
    payload = strict_json(err.value.read())
    assert payload["code"] == "BadRequest" and payload["message"]
    assert fresh_emulator.pending_faults() == []
