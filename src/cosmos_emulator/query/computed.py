"""Computed properties: `{"name": "cp_x", "query": "SELECT VALUE <expr> FROM c"}` on a container.

A computed property is evaluated per item, on the persisted item, wherever a query names it
as a top-level property of its alias (`c.cp_x`, `c["cp_x"]`): in WHERE, ORDER BY and the
projection. `SELECT *` (and `SELECT VALUE c`) return the persisted item without it. A
persisted property of the same name is shadowed in queries, as Cosmos documents.
"""

from __future__ import annotations

import functools

from ..errors import CosmosError, bad_request
from .ast import AGGREGATES, Call, Expr, Member, Param, Query, Ref, SelectValue, children
from .evaluator import validate
from .parser import parse_query

MAX_COMPUTED_PROPERTIES = 20  # Cosmos: "a maximum of 20 computed properties" per container
_SYSTEM_NAMES = frozenset({"id", "_rid", "_ts", "_etag", "_self", "_attachments", "_lsn"})
# Not deterministic, so Cosmos refuses them in a computed property.
_NONDETERMINISTIC = frozenset(
    {
        "GETCURRENTDATETIME",
        "GETCURRENTDATETIMESTATIC",
        "GETCURRENTTICKS",
        "GETCURRENTTICKSSTATIC",
        "GETCURRENTTIMESTAMP",
        "GETCURRENTTIMESTAMPSTATIC",
        "RAND",
    }
)


# Cosmos's words for a container definition it refuses; clients (the azure-cosmos SDK's own
# computed-property tests among them) match on them, so every refusal here opens with them.
INVALID_INPUT_TEXT = "One of the specified inputs is invalid"


def check_definitions(raw: object) -> list[dict[str, str]]:
    """The container's `computedProperties`, checked as Cosmos checks them at create/replace;
    a refusal is a 400 whose message opens with Cosmos's "One of the specified inputs is
    invalid" and then says which property and why."""
    try:
        return _checked_definitions(raw)
    except CosmosError as err:
        raise bad_request(f"{INVALID_INPUT_TEXT}: {err.message}") from None


def _checked_definitions(raw: object) -> list[dict[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request("computedProperties must be a list of {name, query}.")
    if len(raw) > MAX_COMPUTED_PROPERTIES:
        raise bad_request(
            f"A container has at most {MAX_COMPUTED_PROPERTIES} computed properties "
            f"({len(raw)} given)."
        )
    names = [_name(entry) for entry in raw]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise bad_request(f"Computed property names must be unique: {duplicates} repeat.")
    checked = []
    for name, entry in zip(names, raw, strict=True):
        query = entry.get("query")
        if not isinstance(query, str) or not query.strip():
            raise bad_request(f"Computed property '{name}' needs a 'query' string.")
        _check_query(name, query, set(names) - {name})
        checked.append({"name": name, "query": query})
    return checked


def compile_definitions(definitions: object) -> dict[str, Expr]:
    """Name -> the expression to evaluate on an item (definitions already checked)."""
    if not isinstance(definitions, list):
        return {}
    return {entry["name"]: _expression(entry["query"]) for entry in definitions}


@functools.lru_cache(maxsize=512)
def _expression(text: str) -> Expr:
    # Every query on the container needs them: parse each definition once, not per request.
    query = parse_query(text)
    assert isinstance(query.select, SelectValue)
    return query.select.expr


def _name(entry: object) -> str:
    if not isinstance(entry, dict):
        raise bad_request("Each computed property must be an object {name, query}.")
    name = entry.get("name")
    if not isinstance(name, str) or not name or len(name) > 255:
        raise bad_request("A computed property needs a 'name' of 1 to 255 characters.")
    if "/" in name or any(ch.isspace() or ord(ch) < 0x20 for ch in name):
        raise bad_request(
            f"Computed property name {name!r} must be a top-level property name "
            "(no '/', spaces or control characters)."
        )
    if name in _SYSTEM_NAMES:
        raise bad_request(f"Computed property name '{name}' is a reserved system property.")
    return name


def _check_query(name: str, text: str, other_names: set[str]) -> None:
    try:
        query = parse_query(text)
        validate(query)
    except CosmosError as err:
        raise bad_request(f"Computed property '{name}': {err.message}") from None
    clauses = {
        "WHERE": query.where,
        "ORDER BY": query.order_by or None,
        "TOP": query.top,
        "OFFSET LIMIT": query.offset,
        "DISTINCT": query.distinct or None,
    }
    used = [clause for clause, value in clauses.items() if value is not None]
    if used:
        raise bad_request(
            f"Computed property '{name}': its query cannot use {', '.join(used)} "
            "(only SELECT VALUE <expression> FROM <alias>)."
        )
    if not isinstance(query.select, SelectValue):
        raise bad_request(
            f"Computed property '{name}': its query must project with SELECT VALUE "
            "(like 'SELECT VALUE LOWER(c.name) FROM c')."
        )
    _check_expression(name, query, query.select.expr, other_names)


def _check_expression(name: str, query: Query, expr: Expr, other_names: set[str]) -> None:
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Param):
            raise bad_request(f"Computed property '{name}': its query cannot use parameters.")
        if isinstance(node, Call) and node.name in AGGREGATES:
            raise bad_request(f"Computed property '{name}': aggregates are not allowed.")
        if isinstance(node, Call) and node.name in _NONDETERMINISTIC:
            raise bad_request(
                f"Computed property '{name}': {node.name} is not deterministic, so it is not "
                "allowed."
            )
        if (
            isinstance(node, Member)
            and isinstance(node.obj, Ref)
            and node.obj.name == query.alias
            and node.key in other_names
        ):
            raise bad_request(
                f"Computed property '{name}' cannot use another computed property ('{node.key}')."
            )
        stack.extend(children(node))
