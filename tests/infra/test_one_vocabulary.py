"""One persistence vocabulary (issue 35): what the `exactly_once` core names, the app does not
name again. The app's modules are read as source (ast), never imported, so a twin fails here
even where no other test reaches it.

To add an item: put the name in the table it belongs to, with what to use instead; the test
names the table's reason in its failure.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly_once.decisions import Outcome, Settlement

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "src" / "orders"
CORE = ROOT / "packages" / "exactly-once" / "src" / "exactly_once"

# Classes the app must not define: the core's, under the same name or the name of the app's
# old twin.
CORE_CLASSES = {
    "ExactlyOnceError": "the core's root exception; the app's own root is OrdersError",
    "StoreError": "exactly_once.exceptions.StoreError",
    "StoreRefusedError": "exactly_once.exceptions.StoreRefusedError",
    "TransientStoreError": "exactly_once.exceptions.TransientStoreError",
    "CorruptRecordError": "exactly_once.exceptions.CorruptRecordError",
    "RecordChangedError": "exactly_once.exceptions.RecordChangedError",
    "RecordExistsError": "exactly_once.exceptions.RecordExistsError",
    "DocumentExistsError": "exactly_once.exceptions.DocumentExistsError",
    "LeaseLostError": "exactly_once.exceptions.RecordChangedError (an ETag moved on)",
    "ConflictSignal": "the core's conflict exceptions, which no StoreError catches",
    "Decision": "exactly_once.decisions.Decision (key and request_hash name the order)",
    "Outcome": "exactly_once.decisions.Outcome; the app's own are OrderOutcome's",
    "Settlement": "exactly_once.decisions.Settlement",
    "Settler": "exactly_once.decisions.Settler",
    "MessageSettler": "exactly_once.decisions.Settler",
    "WorkerOptions": "exactly_once.worker.WorkerOptions",
    "WorkerStats": "exactly_once.worker.WorkerStats",
}
# Functions the app must not define (at any depth): the core's one mechanism for each.
CORE_FUNCTIONS = {
    "lease_is_live": "exactly_once.store.lease_is_live",
    "lease_seconds_left": "exactly_once.store.lease_seconds_left",
    "settle": "exactly_once.decisions.settle",
    "decision_for_error": "exactly_once.decisions.decision_for_error",
    "from_core": "the core's Decision is the app's: there is nothing to bridge",
}
# Module-level names the app must not bind: the core's constants.
CORE_CONSTANTS = {
    "DEFAULT_LEASE_SECONDS": "exactly_once.options.DEFAULT_LEASE_SECONDS",
}
# Names defined exactly once across the core and the app together (`module:name`).
DEFINED_ONCE = {
    "DEFAULT_LEASE_SECONDS": "_records.py",
    "lease_is_live": "_records.py",
}


def python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def parsed(root: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in python_files(root):
        yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), filename=str(path))


def module_bindings(tree: ast.Module) -> Iterator[str]:
    """Names a module binds at its top level by assignment."""
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        yield from (target.id for target in targets if isinstance(target, ast.Name))


def definitions(root: Path) -> list[tuple[str, str, str]]:
    """Every (file, kind, name) a folder defines: classes and functions at any depth,
    module-level constants, and names re-exported under themselves (`import X as X`)."""
    found = []
    for where, tree in parsed(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found.append((where, "class", node.name))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((where, "function", node.name))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "exactly_once"
            ):
                found.extend(
                    (where, "re-export", alias.name)
                    for alias in node.names
                    if alias.asname == alias.name
                )
        found.extend((where, "constant", name) for name in module_bindings(tree))
    return found


def test_the_app_defines_none_of_the_cores_names() -> None:
    twins = []
    for where, kind, name in definitions(APP):
        if kind == "class" and name in CORE_CLASSES:
            twins.append(f"{where}: class {name}; use {CORE_CLASSES[name]}")
        elif kind == "function" and name in CORE_FUNCTIONS:
            twins.append(f"{where}: def {name}; use {CORE_FUNCTIONS[name]}")
        elif kind == "constant" and name in CORE_CONSTANTS:
            twins.append(f"{where}: {name} = ...; use {CORE_CONSTANTS[name]}")

    assert twins == []


def test_the_app_forwards_none_of_the_cores_names_under_its_own_modules() -> None:
    """A shim (`from exactly_once.x import Y as Y`, as `worker_options.py` was) is a second
    home for one of the names above: callers import the core's module themselves."""
    vocabulary = CORE_CLASSES.keys() | CORE_FUNCTIONS.keys() | CORE_CONSTANTS.keys()
    shims = [
        f"{where}: {name}"
        for where, kind, name in definitions(APP)
        if kind == "re-export" and name in vocabulary
    ]

    assert shims == []


@pytest.mark.parametrize(("name", "home"), sorted(DEFINED_ONCE.items()))
def test_each_lease_name_is_defined_once_in_the_core_and_the_app(name: str, home: str) -> None:
    homes = [
        where
        for root in (CORE, APP)
        for where, kind, defined in definitions(root)
        if defined == name and kind in ("function", "constant")
    ]

    assert homes == [str((CORE / home).relative_to(ROOT))]


def test_one_lease_formula_reads_a_writes_time() -> None:
    """A lease ends `lease_seconds` after the end of its write's second: one function says
    so (`exactly_once._records.lease_end_s`); everything else asks it."""
    readers = []
    for root in (CORE, APP):
        for where, tree in parsed(root):
            for function in ast.walk(tree):
                if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                reads = any(
                    isinstance(node, ast.Attribute)
                    and node.attr == "written_at_s"
                    and isinstance(node.ctx, ast.Load)
                    for node in ast.walk(function)
                )
                if reads:
                    readers.append(f"{where}:{function.name}")

    assert readers == [f"{(CORE / '_records.py').relative_to(ROOT)}:lease_end_s"]


def app_enums() -> Iterator[tuple[str, str, list[str]]]:
    """Every enum class the app defines: (file, name, its members' string values)."""
    for where, tree in parsed(APP):
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(base) for base in node.bases}
            if not bases & {"StrEnum", "enum.StrEnum", "Enum", "str, Enum"}:
                continue
            values = [
                statement.value.value
                for statement in node.body
                if isinstance(statement, ast.Assign)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            ]
            yield where, node.name, values


def test_the_apps_own_outcomes_name_none_of_the_cores() -> None:
    """The app adds outcomes only the orders app decides (`OrderOutcome`); one the core has a
    name for is the core's, so the same decision never reads two ways. (Other enums, such as
    a billing record's status `refused`, are not outcomes and may share a word.)"""
    core_values = {member.value for member in (*Outcome, *Settlement)}
    twins = [
        f"{where}: {name}.{value}"
        for where, name, values in app_enums()
        if name.endswith(("Outcome", "Settlement"))
        for value in values
        if value in core_values
    ]

    assert twins == []


def test_the_enum_check_reads_the_apps_own_outcomes() -> None:
    """The check above reads real enums: the app's own outcomes are among them, and none of
    the core's."""
    found = {name: values for _, name, values in app_enums()}

    assert "skipped_cancelled" in found["OrderOutcome"]
    assert "processed" not in found["OrderOutcome"]
    assert issubclass(Outcome, enum.StrEnum)
