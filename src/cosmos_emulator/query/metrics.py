"""Query and index metrics, the response headers a query gets when it asks for them.

`x-ms-documentdb-populatequerymetrics: true` -> `x-ms-documentdb-query-metrics`: Cosmos's
`name=value;name=value` list (the SDKs split it on `;` and `=`). Counts and sizes are this
emulator's own (the documents in the query's scope and those on the page, and their compact
JSON bytes); times are wall-clock
milliseconds of the evaluation, with the phases Cosmos times apart (compile, plan, index lookup)
reported as 0.00 because nothing here does them separately.

`x-ms-cosmos-populateindexmetrics: true` -> `x-ms-cosmos-index-utilization`: base64 of the JSON
object Cosmos sends (the Python SDK decodes it into a dict). No index is modelled, and the
default policy indexes every path (`/*`), so the "utilized" single indexes are the partition key
paths of a query scoped to a key, the property paths the WHERE clause reads (and a single ORDER
BY path), and the composite index an ORDER BY of several paths needs; no "potential" indexes
are suggested. A filterless `SELECT VALUE COUNT(...)` is answered from the index as Cosmos
answers it: no document retrieved.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from .ast import Call, Expr, Member, Query, SelectValue, children
from .evaluator import property_path

HEADER_QUERY_METRICS = "x-ms-documentdb-query-metrics"
HEADER_INDEX_UTILIZATION = "x-ms-cosmos-index-utilization"
ASK_QUERY_METRICS = "x-ms-documentdb-populatequerymetrics"
ASK_INDEX_METRICS = "x-ms-cosmos-populateindexmetrics"


def answered_from_the_index(query: Query) -> bool:
    """A `SELECT VALUE COUNT(...)` with no filter: Cosmos counts the index's entries and
    loads no document, so its metrics report nothing retrieved."""
    select = query.select
    return (
        query.where is None
        and not query.order_by
        and not query.distinct
        and isinstance(select, SelectValue)
        and isinstance(select.expr, Call)
        and select.expr.name == "COUNT"
    )


def query_metrics(
    *, retrieved: list[Any], output: list[Any], elapsed_ms: float, write_ms: float
) -> str:
    """The `x-ms-documentdb-query-metrics` value, in the order and format Cosmos uses."""
    fields: list[tuple[str, str]] = [
        ("totalExecutionTimeInMs", f"{elapsed_ms + write_ms:.2f}"),
        ("queryCompileTimeInMs", "0.00"),
        ("queryLogicalPlanBuildTimeInMs", "0.00"),
        ("queryPhysicalPlanBuildTimeInMs", "0.00"),
        ("queryOptimizationTimeInMs", "0.00"),
        ("VMExecutionTimeInMs", f"{elapsed_ms:.2f}"),
        ("indexLookupTimeInMs", "0.00"),
        ("documentLoadTimeInMs", "0.00"),
        ("systemFunctionExecuteTimeInMs", "0.00"),
        ("userFunctionExecuteTimeInMs", "0.00"),
        ("retrievedDocumentCount", str(len(retrieved))),
        ("retrievedDocumentSize", str(_json_bytes(retrieved))),
        ("outputDocumentCount", str(len(output))),
        ("outputDocumentSize", str(_json_bytes(output))),
        ("writeOutputTimeInMs", f"{write_ms:.2f}"),
        ("indexUtilizationRatio", f"{_ratio(len(output), len(retrieved)):.2f}"),
    ]
    return ";".join(f"{name}={value}" for name, value in fields)


def index_utilization(query: Query, key_paths: Sequence[str] = ()) -> str:
    """The `x-ms-cosmos-index-utilization` value: base64 of Cosmos's JSON shape.

    `key_paths` are the container's partition key paths when the query is scoped to a key:
    Cosmos applies that scope through the key's index, so it lists them first (the
    azure-cosmos SDK's own `test_populate_index_metrics` expects `/pk/?` for a plain
    `SELECT * FROM c` in a partition)."""
    paths = list(key_paths)
    for path in filtered_paths(query.where, query.alias) if query.where is not None else []:
        if path not in paths:
            paths.append(path)
    if len(query.order_by) == 1:
        # One ORDER BY path is served by its range index, a single index like a filter's.
        ordered = property_path(query.order_by[0].expr, query.alias)
        if ordered is not None and ordered not in paths:
            paths.append(ordered)
    single = [
        {
            "FilterExpression": "",
            "IndexSpec": f"{path}/?",
            "FilterPreciseSet": True,
            "IndexPreciseSet": True,
            "IndexImpactScore": "High",
        }
        for path in paths
    ]
    composite = []
    if len(query.order_by) > 1:
        specs = [
            f"{property_path(o.expr, query.alias)} {'DESC' if o.descending else 'ASC'}"
            for o in query.order_by
        ]
        composite.append(
            {
                "IndexSpecs": specs,
                "IndexPreciseSet": True,
                "IndexImpactScore": "High",
            }
        )
    document = {
        "UtilizedSingleIndexes": single,
        "PotentialSingleIndexes": [],
        "UtilizedCompositeIndexes": composite,
        "PotentialCompositeIndexes": [],
    }
    return base64.b64encode(json.dumps(document).encode("utf-8")).decode("ascii")


def filtered_paths(where: Expr, alias: str) -> list[str]:
    """The property paths (`/a/b`) a WHERE clause reads, each once, in reading order."""
    found: list[str] = []
    stack = [where]
    while stack:
        node = stack.pop()
        path = property_path(node, alias) if isinstance(node, Member) else None
        if path is not None:
            if path not in found:
                found.append(path)
            continue
        stack.extend(reversed(children(node)))
    return found


def _json_bytes(values: list[Any]) -> int:
    return sum(len(json.dumps(v, separators=(",", ":")).encode("utf-8")) for v in values)


def _ratio(part: int, whole: int) -> float:
    return 1.0 if whole == 0 else min(1.0, part / whole)
