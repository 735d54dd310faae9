"""The composition root holds wiring only (issue 35): `bootstrap.py` stays under 300 lines, it
defines the runtime builders and the wiring they share and nothing else (no recipe, audit,
runner, cache or policy), and every runtime a builder returns closes by the one mechanism."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, get_type_hints

import orders.bootstrap as bootstrap
from orders.service.runtimes import Runtime

BOOTSTRAP = Path(bootstrap.__file__)
BUILDERS = {
    "build_console_runtime",
    "build_dispatcher_runtime",
    "build_http_runtime",
    "build_subscriber_runtime",
}


def defined_names() -> set[str]:
    tree = ast.parse(BOOTSTRAP.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def test_the_composition_root_is_under_300_lines() -> None:
    assert len(BOOTSTRAP.read_text(encoding="utf-8").splitlines()) < 300


def test_it_defines_the_runtime_builders_and_private_wiring_only() -> None:
    public = {name for name in defined_names() if not name.startswith("_")}

    assert public == BUILDERS


def test_every_builder_returns_a_runtime_that_closes_by_its_stack() -> None:
    for name in BUILDERS:
        builder: Callable[..., Any] = getattr(bootstrap, name)
        assert inspect.iscoroutinefunction(builder), name
        returned = get_type_hints(builder)["return"]
        assert issubclass(returned, Runtime), name


async def test_closing_a_runtime_runs_what_its_build_registered_last_first_and_once() -> None:
    closed: list[str] = []
    async with AsyncExitStack() as stack:
        stack.callback(closed.append, "client")
        stack.callback(closed.append, "sender")
        runtime = Runtime(resources=stack.pop_all())

    assert closed == []  # handed over: leaving the build's block closes nothing
    await runtime.close()
    await runtime.close()
    assert closed == ["sender", "client"]
