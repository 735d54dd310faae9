"""One claim or duplicate mechanism per concern, and it is the core's (issue 35).

Each concern that decides "done before?" or "who moved first?" names the `exactly_once`
primitive it runs on; the app keeps no mechanism of its own beside it: no loop of its own around
an If-Match write (the core's `update_fenced` is the one race loop), no create-or-read of its own
(the core's `create_or_find`), no two phases of its own (the core's `Effects.two_phase`).
`test_one_vocabulary.py` counts the exceptions, decisions and lease rules, and
`test_one_document_port.py` the document ports.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import orders

APP = Path(orders.__file__).resolve().parent

# concern -> (the app module that decides it, the core's primitive it runs on)
MECHANISMS = {
    "an order message (the order document is its own marker)": (
        "service/consumer.py",
        "exactly_once.store.create_or_find",
    ),
    "an event's effect in the inbox (shipping)": (
        "service/shipping.py",
        "exactly_once.store.create_or_find",
    ),
    "a versioned status update": ("service/status.py", "exactly_once.store.apply_version"),
    "a charge and a refund at the payment provider": (
        "service/billing.py",
        "exactly_once.Effects.two_phase",
    ),
    "the saga's moves on the order document (ship, cancel, charge)": (
        "service/saga.py",
        "exactly_once.store.update_fenced",
    ),
    "an Idempotency-Key of the HTTP API": (
        "entrypoints/http_api.py",
        "exactly_once.http.IdempotencyKeys",
    ),
    "the HTTP API's orderId, claimed once per order": (
        "adapters/cosmos_idempotency.py",
        "exactly_once.store.create_or_find",
    ),
    "the outbox's feed ranges (the dispatcher's leases)": (
        "service/dispatcher.py",
        "exactly_once.change_feed.ChangeFeedProcessor",
    ),
}


def core_object(dotted: str) -> object:
    """`exactly_once.Effects.two_phase` -> the object itself."""
    module, _, rest = dotted.partition(".")
    found: object = importlib.import_module(module)
    for part in rest.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            found = importlib.import_module(f"{found.__name__}.{part}")  # type: ignore[attr-defined]
    return found


def tree_of(relative: str) -> ast.Module:
    return ast.parse((APP / relative).read_text(encoding="utf-8"))


def names_used(tree: ast.AST) -> set[str]:
    """Every name and attribute a module uses (calls, references, annotations)."""
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
    return used


def imported_from_the_core(tree: ast.AST) -> set[str]:
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("exactly_once"):
            imported.update(alias.asname or alias.name for alias in node.names)
    return imported


@pytest.mark.parametrize(("module", "primitive"), MECHANISMS.values(), ids=list(MECHANISMS))
def test_each_concern_runs_on_the_cores_primitive(module: str, primitive: str) -> None:
    assert callable(core_object(primitive)), primitive
    tree = tree_of(module)
    # A method of the core's (`Effects.two_phase`) is reached through an instance of its class.
    *_, owner, name = primitive.split(".")
    imported = owner if owner[0].isupper() and owner != name else name
    assert imported in imported_from_the_core(tree), f"{module} does not import {imported}"
    assert name in names_used(tree), f"{module} never uses {name}"


def loops_writing_if_match(tree: ast.AST) -> list[int]:
    """Lines of loops whose body writes with an ETag (`etag=`): a race loop of one's own."""
    found: list[int] = []
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
            continue
        for node in ast.walk(loop):
            if isinstance(node, ast.Call) and any(kw.arg == "etag" for kw in node.keywords):
                found.append(loop.lineno)
                break
    return found


def test_the_app_runs_no_race_loop_of_its_own() -> None:
    offenders = {
        str(path.relative_to(APP)): lines
        for path in sorted(APP.rglob("*.py"))
        if (lines := loops_writing_if_match(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


def test_the_race_loop_check_sees_a_race_loop() -> None:
    """The saga's old loop, as it was before `update_fenced`: the check above must see it."""
    old_saga = ast.parse(
        "async def cancel(self, order_id):\n"
        "    for _ in range(MAX_RACES):\n"
        "        stored = await self.order(order_id)\n"
        "        try:\n"
        "            await self._orders.replace(stored.document, etag=stored.etag)\n"
        "        except LeaseLostError:\n"
        "            continue\n"
    )
    assert loops_writing_if_match(old_saga) == [2]


@pytest.mark.parametrize("name", ["MAX_RACES", "two_phase", "create_or_find", "update_fenced"])
def test_the_app_defines_none_of_the_cores_mechanisms(name: str) -> None:
    defined = [
        str(path.relative_to(APP))
        for path in sorted(APP.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name)
        or (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        )
    ]
    assert defined == []
