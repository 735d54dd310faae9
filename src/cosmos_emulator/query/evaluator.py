"""Evaluate a parsed query over an iterable of JSON documents."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import bad_request, unsupported
from .ast import (
    AGGREGATES,
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
    children,
)
from .functions import FUNCTIONS, check_arity
from .values import (
    MAX_STRING_CHARS,
    UNDEFINED,
    compare,
    equals,
    is_number,
    order_key,
    to_double,
)

Params = Mapping[str, Any]


def bind_params(raw: object) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise bad_request("'parameters' must be a list of {name, value}.")
    bound: dict[str, Any] = {}
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise bad_request("Each query parameter needs a 'name' starting with '@'.")
        bound[entry["name"]] = entry.get("value", UNDEFINED)
    return bound


def resolve_count(expr: Expr | None, params: Params, clause: str) -> int | None:
    if expr is None:
        return None
    value = (
        expr.value
        if isinstance(expr, Literal)
        else params.get(expr.name if isinstance(expr, Param) else "", UNDEFINED)
    )
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad_request(f"{clause} requires a non-negative integer.")
    return value


def aggregate_calls(expr: Expr) -> list[Call]:
    """Aggregate calls in an expression (outermost only)."""
    found: list[Call] = []

    def walk(node: Expr) -> None:
        if isinstance(node, Call) and node.name in AGGREGATES:
            found.append(node)
            return
        for child in children(node):
            walk(child)

    walk(expr)
    return found


def selection_exprs(query: Query) -> list[Expr]:
    if isinstance(query.select, SelectValue):
        return [query.select.expr]
    if isinstance(query.select, SelectList):
        return [item.expr for item in query.select.items]
    return []


def has_aggregates(query: Query) -> bool:
    return any(aggregate_calls(e) for e in selection_exprs(query))


def validate(query: Query) -> None:
    """Reject what Cosmos rejects before running anything (names, misplaced aggregates)."""
    exprs: list[Expr] = list(selection_exprs(query))
    if query.where is not None:
        exprs.append(query.where)
        if aggregate_calls(query.where):
            raise bad_request("Aggregates are not allowed in the WHERE clause.")
    exprs.extend(item.expr for item in query.order_by)
    for item in query.order_by:
        if property_path(item.expr, query.alias) is None:
            raise bad_request(
                "Unsupported ORDER BY clause: ORDER BY item expression could not be mapped to "
                "a document path."
            )
    for expr in exprs:
        _check_names(expr, query.alias)
    if has_aggregates(query):
        if query.order_by:
            raise unsupported("ORDER BY together with aggregates")
        if query.distinct:
            raise unsupported("DISTINCT together with aggregates")
        for expr in selection_exprs(query):
            _check_no_bare_refs(expr)


def property_path(expr: Expr, alias: str) -> str | None:
    """`c.a.b` -> "/a/b" (the index path an ORDER BY needs), or None for other expressions."""
    parts: list[str] = []
    node = expr
    while isinstance(node, Member):
        parts.append(str(node.key))
        node = node.obj
    if not (isinstance(node, Ref) and node.name == alias) or not parts:
        return None
    return "/" + "/".join(reversed(parts))


def check_order_by_index(query: Query, indexing_policy: dict[str, Any]) -> None:
    """Several ORDER BY items need a matching composite index, as in Cosmos."""
    if len(query.order_by) < 2:
        return
    wanted = [
        (property_path(o.expr, query.alias), "descending" if o.descending else "ascending")
        for o in query.order_by
    ]
    flipped = [(p, "ascending" if d == "descending" else "descending") for p, d in wanted]
    for composite in indexing_policy.get("compositeIndexes") or []:
        have = [(c.get("path"), str(c.get("order", "ascending")).lower()) for c in composite]
        if have in (wanted, flipped):
            return
    raise bad_request(
        "The order by query does not have a corresponding composite index that it can be "
        "served from (add one to the container's indexingPolicy.compositeIndexes)."
    )


def _check_names(expr: Expr, alias: str) -> None:
    if isinstance(expr, Ref) and expr.name != alias:
        raise bad_request(f"Identifier '{expr.name}' could not be resolved.")
    if isinstance(expr, Call) and expr.name not in AGGREGATES:
        if expr.name not in FUNCTIONS:
            raise unsupported(f"the function {expr.name}")
        check_arity(expr.name, len(expr.args))
    for child in children(expr):
        _check_names(child, alias)


def _check_no_bare_refs(expr: Expr) -> None:
    if isinstance(expr, Call) and expr.name in AGGREGATES:
        return
    if isinstance(expr, Ref):
        raise bad_request(
            f"Property reference '{expr.name}' is invalid in the select list: "
            "it is neither aggregated nor in a GROUP BY clause."
        )
    for child in children(expr):
        _check_no_bare_refs(child)


class Evaluator:
    def __init__(
        self, query: Query, params: Params, computed: Mapping[str, Expr] | None = None
    ) -> None:
        self.query = query
        self.params = params
        # The container's computed properties: name -> expression over the persisted item,
        # evaluated without computed properties (so one never reads another, or itself).
        self.computed = computed or {}
        self.persisted = Evaluator(query, params) if computed else self
        self.aggregate_values: dict[int, Any] = {}

    def eval(self, expr: Expr, doc: Any) -> Any:
        if isinstance(expr, Literal):
            return expr.value
        if isinstance(expr, Ref):
            return doc
        if isinstance(expr, Member):
            if isinstance(expr.obj, Ref) and expr.key in self.computed:
                # A top-level name of the alias: the computed property shadows a persisted one.
                return self.persisted.eval(self.computed[str(expr.key)], doc)
            return _member(self.eval(expr.obj, doc), expr.key)
        if isinstance(expr, Param):
            if expr.name not in self.params:
                raise bad_request(f"Parameter {expr.name} is not defined.")
            return self.params[expr.name]
        if isinstance(expr, Binary):
            return self._binary(expr, doc)
        if isinstance(expr, Conditional):
            # Only a true boolean picks the first branch; false, undefined or any other value
            # picks the second.
            chosen = expr.then if self.eval(expr.condition, doc) is True else expr.otherwise
            return self.eval(chosen, doc)
        if isinstance(expr, Unary):
            value = self.eval(expr.operand, doc)
            if expr.op == "NOT":
                return (not value) if isinstance(value, bool) else UNDEFINED
            return -value if is_number(value) else UNDEFINED
        if isinstance(expr, In):
            value = self.eval(expr.expr, doc)
            if value is UNDEFINED:
                return UNDEFINED
            found = any(equals(value, self.eval(item, doc)) is True for item in expr.items)
            return found != expr.negated
        if isinstance(expr, Between):
            value = self.eval(expr.expr, doc)
            low, high = (
                compare(value, self.eval(expr.low, doc)),
                compare(value, self.eval(expr.high, doc)),
            )
            if low is None or high is None:
                return UNDEFINED
            return (low >= 0 and high <= 0) != expr.negated
        if isinstance(expr, ArrayLit):
            return [v for v in (self.eval(i, doc) for i in expr.items) if v is not UNDEFINED]
        if isinstance(expr, ObjectLit):
            return {
                k: v
                for k, v in ((k, self.eval(e, doc)) for k, e in expr.pairs)
                if v is not UNDEFINED
            }
        if expr.name in AGGREGATES:
            if id(expr) not in self.aggregate_values:
                raise bad_request(f"Aggregate {expr.name} is not allowed here.")
            return self.aggregate_values[id(expr)]
        args = [self.eval(a, doc) for a in expr.args]
        return FUNCTIONS[expr.name].fn(args)

    def _binary(self, expr: Binary, doc: Any) -> Any:
        op = expr.op
        left = self.eval(expr.left, doc)
        if op == "AND":
            if left is False:
                return False
            right = self.eval(expr.right, doc)
            if right is False:
                return False
            return True if left is True and right is True else UNDEFINED
        if op == "??":
            # The left side unless it is undefined (null is a value and is kept).
            return left if left is not UNDEFINED else self.eval(expr.right, doc)
        if op == "OR":
            if left is True:
                return True
            right = self.eval(expr.right, doc)
            if right is True:
                return True
            return False if left is False and right is False else UNDEFINED
        right = self.eval(expr.right, doc)
        if op == "=":
            return equals(left, right)
        if op == "!=":
            result = equals(left, right)
            return UNDEFINED if result is UNDEFINED else not result
        if op in ("<", "<=", ">", ">="):
            cmp = compare(left, right)
            if cmp is None:
                return UNDEFINED
            return {"<": cmp < 0, "<=": cmp <= 0, ">": cmp > 0, ">=": cmp >= 0}[op]
        if op == "||":
            if isinstance(left, str) and isinstance(right, str):
                if len(left) + len(right) > MAX_STRING_CHARS:
                    raise bad_request(
                        f"A string built by the query exceeds {MAX_STRING_CHARS} characters."
                    )
                return left + right
            return UNDEFINED
        if not (is_number(left) and is_number(right)):
            return UNDEFINED
        return _arithmetic(op, left, right)

    def compute_aggregates(self, rows: list[Any]) -> None:
        for expr in selection_exprs(self.query):
            for call in aggregate_calls(expr):
                self.aggregate_values[id(call)] = self._aggregate(call, rows)

    def _aggregate(self, call: Call, rows: list[Any]) -> Any:
        if len(call.args) != 1:
            raise bad_request(f"{call.name} takes exactly one argument.")
        values = [v for v in (self.eval(call.args[0], row) for row in rows) if v is not UNDEFINED]
        if call.name == "COUNT":
            return len(values)
        if call.name in ("SUM", "AVG"):
            if any(not is_number(v) for v in values):
                return UNDEFINED
            try:
                if call.name == "SUM":
                    return to_double(sum(values)) if values else 0
                return to_double(sum(values) / len(values)) if values else UNDEFINED
            except OverflowError:
                return UNDEFINED
        if not values:
            return UNDEFINED
        key: Callable[[Any], tuple[int, Any]] = order_key
        return min(values, key=key) if call.name == "MIN" else max(values, key=key)


def run(
    query: Query,
    docs: Iterable[Any],
    params: Params,
    needed: int | None = None,
    computed: Mapping[str, Expr] | None = None,
) -> list[Any]:
    """Results of `query` over `docs`, in order; at least the first `needed` when given."""
    ev = Evaluator(query, params, computed)
    if not query.alias:
        docs = [{}]  # no FROM clause: one row, whatever the container holds
    top = resolve_count(query.top, params, "TOP")
    offset = resolve_count(query.offset, params, "OFFSET")
    limit = resolve_count(query.limit, params, "LIMIT")
    streaming = not (query.order_by or query.distinct or has_aggregates(query))
    if streaming and needed is not None:
        return _run_streaming(ev, query, docs, offset or 0, _cap(needed, limit, top))
    rows = [d for d in docs if query.where is None or ev.eval(query.where, d) is True]
    if has_aggregates(query):
        ev.compute_aggregates(rows)
        rows = [None]
    elif query.order_by:
        for item in reversed(query.order_by):
            expr = item.expr
            rows.sort(key=lambda d: order_key(ev.eval(expr, d)), reverse=item.descending)
    results = [r for r in (_project(ev, query, row) for row in rows) if r is not UNDEFINED]
    if query.distinct:
        seen: set[str] = set()
        unique = []
        for r in results:
            key = json.dumps(r, sort_keys=True)
            if key not in seen:
                seen.add(key)
                unique.append(r)
        results = unique
    if offset is not None:
        results = results[offset:]
    if limit is not None:
        results = results[:limit]
    if top is not None:
        results = results[:top]
    return results


def _cap(*bounds: int | None) -> int:
    return min(b for b in bounds if b is not None)


def _run_streaming(
    ev: Evaluator, query: Query, docs: Iterable[Any], skip: int, cap: int
) -> list[Any]:
    """Stops evaluating once enough results exist: each page no longer costs the whole scan."""
    results: list[Any] = []
    for doc in docs:
        if len(results) >= cap:
            break
        if query.where is not None and ev.eval(query.where, doc) is not True:
            continue
        value = _project(ev, query, doc)
        if value is UNDEFINED:
            continue
        if skip:
            skip -= 1
            continue
        results.append(value)
    return results


def _project(ev: Evaluator, query: Query, doc: Any) -> Any:
    select = query.select
    if isinstance(select, SelectStar):
        return doc
    if isinstance(select, SelectValue):
        return ev.eval(select.expr, doc)
    out: dict[str, Any] = {}
    unnamed = 0
    for item in select.items:
        name = item.alias
        if name is None:
            if isinstance(item.expr, Member) and isinstance(item.expr.key, str):
                name = item.expr.key
            elif isinstance(item.expr, Ref):
                name = item.expr.name
            else:
                unnamed += 1
                name = f"${unnamed}"
        value = ev.eval(item.expr, doc)
        if value is not UNDEFINED:
            out[name] = value
    return out


def _member(obj: Any, key: str | int) -> Any:
    if isinstance(key, int):
        if isinstance(obj, list) and 0 <= key < len(obj):
            return obj[key]
        return UNDEFINED
    if isinstance(obj, dict):
        return obj.get(key, UNDEFINED)
    return UNDEFINED


def _arithmetic(op: str, left: int | float, right: int | float) -> Any:
    """Cosmos arithmetic on doubles: a result no double can hold is undefined, like `x / 0`."""
    try:
        if op == "+":
            result: int | float = left + right
        elif op == "-":
            result = left - right
        elif op == "*":
            result = left * right
        elif right == 0:
            return UNDEFINED
        elif op == "/":
            result = left / right
        else:
            result = math.fmod(left, right)
        return to_double(result)
    except OverflowError:
        return UNDEFINED
