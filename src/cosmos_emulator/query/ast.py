"""Syntax tree of the supported Cosmos SQL subset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, eq=False)
class Literal:
    value: Any


@dataclass(frozen=True, eq=False)
class Param:
    name: str


@dataclass(frozen=True, eq=False)
class Ref:
    """The FROM alias (or the container name when there is no alias)."""

    name: str


@dataclass(frozen=True, eq=False)
class Member:
    """`obj.name`, `obj["name"]` or `obj[0]`."""

    obj: Expr
    key: str | int


@dataclass(frozen=True, eq=False)
class Unary:
    op: str  # "NOT" or "-"
    operand: Expr


@dataclass(frozen=True, eq=False)
class Binary:
    op: str  # AND OR = != < <= > >= + - * / % || ??
    left: Expr
    right: Expr


@dataclass(frozen=True, eq=False)
class Conditional:
    """`condition ? then : otherwise`."""

    condition: Expr
    then: Expr
    otherwise: Expr


@dataclass(frozen=True, eq=False)
class In:
    expr: Expr
    items: tuple[Expr, ...]
    negated: bool


@dataclass(frozen=True, eq=False)
class Between:
    expr: Expr
    low: Expr
    high: Expr
    negated: bool


@dataclass(frozen=True, eq=False)
class Call:
    name: str  # upper case
    args: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class ArrayLit:
    items: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class ObjectLit:
    pairs: tuple[tuple[str, Expr], ...]


Expr = (
    Literal
    | Param
    | Ref
    | Member
    | Unary
    | Binary
    | Conditional
    | In
    | Between
    | Call
    | ArrayLit
    | ObjectLit
)


@dataclass(frozen=True)
class SelectStar:
    pass


@dataclass(frozen=True)
class SelectValue:
    expr: Expr


@dataclass(frozen=True)
class SelectItem:
    expr: Expr
    alias: str | None


@dataclass(frozen=True)
class SelectList:
    items: tuple[SelectItem, ...]


Selection = SelectStar | SelectValue | SelectList


@dataclass(frozen=True)
class OrderItem:
    expr: Expr
    descending: bool


@dataclass(frozen=True)
class Query:
    select: Selection
    alias: str  # "" when the query has no FROM clause
    distinct: bool = False
    top: Expr | None = None
    where: Expr | None = None
    order_by: tuple[OrderItem, ...] = field(default_factory=tuple)
    offset: Expr | None = None
    limit: Expr | None = None


AGGREGATES = frozenset({"COUNT", "SUM", "MIN", "MAX", "AVG"})


def children(node: Expr) -> tuple[Expr, ...]:
    """The direct subexpressions of `node`."""
    if isinstance(node, Member):
        return (node.obj,)
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Conditional):
        return (node.condition, node.then, node.otherwise)
    if isinstance(node, In):
        return (node.expr, *node.items)
    if isinstance(node, Between):
        return (node.expr, node.low, node.high)
    if isinstance(node, Call | ArrayLit):
        return node.args if isinstance(node, Call) else node.items
    if isinstance(node, ObjectLit):
        return tuple(v for _, v in node.pairs)
    return ()
