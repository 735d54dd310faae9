"""The core's public surface (issue 45): a small top level, public submodules by task, the
guide's "Layout" table equal to them, and every name the orders app imports from the core
public, as a user would find it.

A name is public when it is in `exactly_once.__all__` or in the `__all__` of a public
submodule (a row of the guide's table); every other module is the implementation.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import exactly_once

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(exactly_once.__file__).resolve().parent
GUIDE = PACKAGE / "README.md"
# Where the orders app imports the core: the app, its Functions entry and its scripts.
APP_SOURCES = [ROOT / "function_app.py", *sorted((ROOT / "src" / "orders").rglob("*.py"))]
APP_SOURCES += sorted((ROOT / "scripts").rglob("*.py"))


def layout_rows() -> dict[str, set[str]]:
    """The guide's "Layout" table: module -> the names its row lists."""
    section = GUIDE.read_text(encoding="utf-8").split("## Layout: what is public", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`exactly_once"):
            rows[cells[0].strip("`")] = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[2]))
    return rows


PUBLIC = layout_rows()


def implementation_modules() -> set[str]:
    """The modules the guide names as the implementation, after the table."""
    section = GUIDE.read_text(encoding="utf-8").split("## Layout: what is public", 1)[1]
    prose = section.split("Every other module of the package is the implementation", 1)[1]
    prose = prose.split("`tests/infra/", 1)[0]
    return {f"exactly_once.{name}" for name in re.findall(r"`([a-z_]+)`", prose)}


def public_names(module: str) -> set[str]:
    return set(PUBLIC.get(module, ()))


def core_imports(source: str, filename: str) -> list[tuple[str, int, str, str]]:
    """Every import of the core in `source`: (file, line, module, name); a plain
    `import exactly_once.x` is the module itself (name "")."""
    found: list[tuple[str, int, str, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "exactly_once" or node.module.startswith("exactly_once."):
                found.extend((filename, node.lineno, node.module, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend(
                (filename, node.lineno, a.name, "")
                for a in node.names
                if a.name == "exactly_once" or a.name.startswith("exactly_once.")
            )
    return found


def not_public(imports: list[tuple[str, int, str, str]]) -> list[str]:
    """The imports that reach past the public surface, one line each."""
    refused = []
    for filename, line, module, name in imports:
        if module not in PUBLIC:
            refused.append(f"{filename}:{line}: {module} is not a public module")
        elif name and name not in public_names(module) and f"{module}.{name}" not in PUBLIC:
            refused.append(f"{filename}:{line}: {module}.{name} is not in its __all__")
    return refused


def app_imports() -> list[tuple[str, int, str, str]]:
    return [
        found
        for path in APP_SOURCES
        for found in core_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]


def test_the_top_level_is_about_thirty_names() -> None:
    assert 25 <= len(exactly_once.__all__) <= 35, sorted(exactly_once.__all__)


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_guides_layout_lists_each_public_modules_all(module: str) -> None:
    names = importlib.import_module(module).__all__
    assert len(names) == len(set(names)), module
    assert PUBLIC[module] == set(names)


def test_every_module_of_the_package_is_public_or_named_the_implementation() -> None:
    """The layout shows the groups: a public module's name is plain, the implementation's
    starts with an underscore, and the guide lists each."""
    modules = {
        f"exactly_once.{path.stem}" for path in PACKAGE.glob("*.py") if path.stem != "__init__"
    }
    public, implementation = set(PUBLIC) - {"exactly_once"}, implementation_modules()
    assert not public & implementation
    assert modules == public | implementation
    assert all(module.split(".")[1].startswith("_") for module in implementation)
    assert not any(module.split(".")[1].startswith("_") for module in public)


def test_what_the_app_imports_from_the_core_is_all_public() -> None:
    imports = app_imports()
    # The app stands on the core: dozens of names, from the top level and several submodules.
    assert len({(module, name) for _, _, module, name in imports}) > 50
    assert len({module for _, _, module, _ in imports}) > 5
    assert not_public(imports) == []


def test_what_the_app_imports_is_named_in_the_guide() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    unnamed = sorted({name for _, _, _, name in app_imports() if name and f"`{name}`" not in guide})
    assert unnamed == []


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("from exactly_once._claims import Claims", "exactly_once._claims is not a public module"),
        ("from exactly_once.store import Effects", "exactly_once.store.Effects is not in"),
        ("from exactly_once import Retrier", "exactly_once.Retrier is not in"),
        ("import exactly_once._orchestrator", "exactly_once._orchestrator is not a public"),
    ],
)
def test_the_check_refuses_an_import_past_the_surface(source: str, why: str) -> None:
    (refused,) = not_public(core_imports(source, "app.py"))
    assert why in refused


def test_a_public_import_passes_the_check() -> None:
    source = (
        "from exactly_once import ConsumerOptions, exactly_once\n"
        "from exactly_once.store import create_or_find\n"
        "from exactly_once import store\n"
    )
    assert not_public(core_imports(source, "app.py")) == []


def test_a_name_moved_off_the_top_level_still_imports_with_a_warning() -> None:
    from exactly_once.retries import Retrier

    with pytest.warns(DeprecationWarning, match=r"exactly_once\.retries\.Retrier"):
        assert exactly_once.Retrier is Retrier
    with pytest.raises(AttributeError, match="create_or_find"):
        exactly_once.inbox_batch  # noqa: B018  (the attribute access is what is tested)


def test_the_consumers_settings_are_written_once_in_consumer_options() -> None:
    """`exactly_once(...)`, `ExactlyOnceConsumer(...)` and the decorator's `wrap` take the
    settings as one `ConsumerOptions`, not a copy of its fields each (issue 45, item 5)."""
    import dataclasses
    import inspect

    from exactly_once import ConsumerOptions, ExactlyOnceConsumer

    settings = {field.name for field in dataclasses.fields(ConsumerOptions)}
    assert len(settings) >= 15
    for function in (exactly_once.exactly_once, ExactlyOnceConsumer.__init__):
        parameters = set(inspect.signature(function).parameters)
        assert "options" in parameters
        assert not parameters & settings, function
