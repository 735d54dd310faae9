"""The query plan a Cosmos gateway hands the SDK for cross-partition queries.

The SDK first sends a cross-partition query as is. When the query needs merging across
partitions (ORDER BY, aggregates, TOP, OFFSET/LIMIT, DISTINCT) the gateway refuses it with
400 / substatus 1004; the SDK then asks for this plan and runs `rewrittenQuery` per partition
key range, merging the results itself. The rewritten queries use the same SQL shapes as Cosmos
(`orderByItems` / `payload`, `[{"item": COUNT(1)}]`), so they run through our own evaluator.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import unsupported
from .ast import (
    ArrayLit,
    Between,
    Binary,
    Call,
    Conditional,
    Expr,
    In,
    Literal,
    Member,
    ObjectLit,
    Param,
    Query,
    Ref,
    SelectList,
    SelectStar,
    SelectValue,
    Unary,
)
from .evaluator import Params, aggregate_calls, has_aggregates, resolve_count
from .values import UNDEFINED

FULL_RANGE = {"min": "", "max": "FF", "isMinInclusive": True, "isMaxInclusive": False}
_AGGREGATE_NAMES = {"COUNT": "Count", "SUM": "Sum", "MIN": "Min", "MAX": "Max", "AVG": "Average"}


def _equal_rows_are_adjacent(query: Query) -> bool:
    """Whether the merged ORDER BY puts equal DISTINCT rows next to each other: every
    projected expression is one the query orders by. Only then may the plan say "Ordered",
    for which the SDKs drop a row equal to the one before it and nothing else; otherwise
    (`SELECT DISTINCT c.v, c.w ... ORDER BY c.v`, whose equal rows interleave across
    ranges) it says "Unordered", and the SDKs remember every row they have returned."""
    ordered = {print_expr(o.expr) for o in query.order_by}
    if not ordered:
        return False
    select = query.select
    if isinstance(select, SelectValue):
        return print_expr(select.expr) in ordered
    if isinstance(select, SelectList):
        return all(print_expr(item.expr) in ordered for item in select.items)
    return False


def needs_plan(query: Query) -> bool:
    return bool(
        query.order_by
        or query.top is not None
        or query.offset is not None
        or query.distinct
        or has_aggregates(query)
    )


def query_plan(query: Query, params: Params) -> dict[str, Any]:
    aggregates: list[str] = []
    rewritten = ""
    offset = resolve_count(query.offset, params, "OFFSET")
    limit = resolve_count(query.limit, params, "LIMIT")
    top = resolve_count(query.top, params, "TOP")
    if has_aggregates(query):
        rewritten, aggregates = _rewrite_aggregate(query)
    elif query.order_by:
        rewritten = _rewrite_order_by(query, offset, limit)
    elif offset is not None:
        rewritten = print_query(query, offset_limit=(0, (offset or 0) + (limit or 0)))
    distinct = "None"
    if query.distinct:
        distinct = "Ordered" if _equal_rows_are_adjacent(query) else "Unordered"
    return {
        "partitionedQueryExecutionInfoVersion": 2,
        "queryInfo": {
            "distinctType": distinct,
            "top": top,
            "offset": offset,
            "limit": limit,
            "orderBy": ["Descending" if o.descending else "Ascending" for o in query.order_by],
            "orderByExpressions": [print_expr(o.expr) for o in query.order_by],
            "groupByExpressions": [],
            "groupByAliases": [],
            "aggregates": aggregates,
            "groupByAliasToAggregateType": {},
            "rewrittenQuery": rewritten,
            "hasSelectValue": isinstance(query.select, SelectValue),
            "dCountInfo": None,
            "hasNonStreamingOrderBy": False,
        },
        "queryRanges": [dict(FULL_RANGE)],
    }


def _rewrite_aggregate(query: Query) -> tuple[str, list[str]]:
    if not isinstance(query.select, SelectValue):
        # Cosmos answers with a plan here too; the SDK itself then refuses non-VALUE aggregates.
        calls = (
            [c for item in query.select.items for c in aggregate_calls(item.expr)]
            if (isinstance(query.select, SelectList))
            else []
        )
        return print_query(query), [_AGGREGATE_NAMES[c.name] for c in calls]
    expr = query.select.expr
    if not (isinstance(expr, Call) and expr.name in _AGGREGATE_NAMES):
        raise unsupported("cross-partition aggregates other than SELECT VALUE <aggregate>(...)")
    if expr.name == "AVG":
        item: Expr = ObjectLit(
            (("sum", Call("SUM", expr.args)), ("count", Call("COUNT", expr.args)))
        )
    else:
        item = expr
    wrapped = ArrayLit((ObjectLit((("item", item),)),))
    return print_query(query, select=SelectValue(wrapped)), [_AGGREGATE_NAMES[expr.name]]


def _rewrite_order_by(query: Query, offset: int | None, limit: int | None) -> str:
    alias = query.alias
    if isinstance(query.select, SelectStar):
        payload: Expr = Ref(alias)
    elif isinstance(query.select, SelectValue):
        payload = query.select.expr
    else:
        pairs = []
        unnamed = 0
        for item in query.select.items:
            name = item.alias
            if name is None:
                if isinstance(item.expr, Member) and isinstance(item.expr.key, str):
                    name = item.expr.key
                else:
                    unnamed += 1
                    name = f"${unnamed}"
            pairs.append((name, item.expr))
        payload = ObjectLit(tuple(pairs))
    items = ArrayLit(tuple(ObjectLit((("item", o.expr),)) for o in query.order_by))
    # Each range must de-duplicate before its TOP / OFFSET-LIMIT window cuts rows, so under
    # DISTINCT the row carries no `_rid` (unique per item, it would make every row distinct and
    # the window would keep duplicates of a few values). The SDK merges on orderByItems alone.
    rid = "" if query.distinct else f"{alias}._rid, "
    select = (
        f"SELECT {'DISTINCT ' if query.distinct else ''}"
        f"{_print_top(query)}{rid}{print_expr(items)} AS orderByItems, "
        f"{print_expr(payload)} AS payload"
    )
    where = "({documentdb-formattableorderbyquery-filter})"
    if query.where is not None:
        where += f" AND ({print_expr(query.where)})"
    order = ", ".join(
        f"{print_expr(o.expr)} {'DESC' if o.descending else 'ASC'}" for o in query.order_by
    )
    text = f"{select} FROM {alias} WHERE {where} ORDER BY {order}"
    if offset is not None:
        text += f" OFFSET 0 LIMIT {offset + (limit or 0)}"
    return text


def _print_top(query: Query) -> str:
    return f"TOP {print_expr(query.top)} " if query.top is not None else ""


def print_query(
    query: Query,
    *,
    select: SelectStar | SelectValue | SelectList | None = None,
    offset_limit: tuple[int, int] | None = None,
) -> str:
    select = select or query.select
    parts = ["SELECT"]
    if query.distinct:
        parts.append("DISTINCT")
    if query.top is not None:
        parts.append(f"TOP {print_expr(query.top)}")
    if isinstance(select, SelectStar):
        parts.append("*")
    elif isinstance(select, SelectValue):
        parts.append(f"VALUE {print_expr(select.expr)}")
    else:
        parts.append(
            ", ".join(
                print_expr(i.expr) + (f" AS {i.alias}" if i.alias else "") for i in select.items
            )
        )
    if query.alias:
        parts.append(f"FROM {query.alias}")
    if query.where is not None:
        parts.append(f"WHERE {print_expr(query.where)}")
    if query.order_by:
        parts.append(
            "ORDER BY "
            + ", ".join(
                f"{print_expr(o.expr)} {'DESC' if o.descending else 'ASC'}" for o in query.order_by
            )
        )
    if offset_limit is not None:
        parts.append(f"OFFSET {offset_limit[0]} LIMIT {offset_limit[1]}")
    elif query.offset is not None and query.limit is not None:
        parts.append(f"OFFSET {print_expr(query.offset)} LIMIT {print_expr(query.limit)}")
    return " ".join(parts)


def print_expr(expr: Expr) -> str:
    if isinstance(expr, Literal):
        if expr.value is UNDEFINED:
            return "undefined"
        return json.dumps(expr.value)
    if isinstance(expr, Param):
        return expr.name
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Member):
        base = print_expr(expr.obj)
        if isinstance(expr.key, int):
            return f"{base}[{expr.key}]"
        if expr.key.isidentifier():
            return f"{base}.{expr.key}"
        return f"{base}[{json.dumps(expr.key)}]"
    if isinstance(expr, Unary):
        return f"({expr.op} {print_expr(expr.operand)})"
    if isinstance(expr, Binary):
        return f"({print_expr(expr.left)} {expr.op} {print_expr(expr.right)})"
    if isinstance(expr, Conditional):
        return (
            f"({print_expr(expr.condition)} ? {print_expr(expr.then)} : "
            f"{print_expr(expr.otherwise)})"
        )
    if isinstance(expr, In):
        items = ", ".join(print_expr(i) for i in expr.items)
        return f"({print_expr(expr.expr)} {'NOT ' if expr.negated else ''}IN ({items}))"
    if isinstance(expr, Between):
        return (
            f"({print_expr(expr.expr)} {'NOT ' if expr.negated else ''}BETWEEN "
            f"{print_expr(expr.low)} AND {print_expr(expr.high)})"
        )
    if isinstance(expr, Call):
        return f"{expr.name}({', '.join(print_expr(a) for a in expr.args)})"
    if isinstance(expr, ArrayLit):
        return f"[{', '.join(print_expr(i) for i in expr.items)}]"
    pairs = ", ".join(f"{json.dumps(k)}: {print_expr(v)}" for k, v in expr.pairs)
    return "{" + pairs + "}"
