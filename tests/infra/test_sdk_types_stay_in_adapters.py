"""App code outside `orders.adapters` names no Cosmos DB or Service Bus SDK type.

The `sdks-in-adapters` import contract forbids importing `azure` outside the adapters, but it
allows indirect imports, so a module could still name `ContainerProxy` re-exported by an adapter
(`from orders.adapters.cosmos_client import ContainerProxy`). This test closes that door: every
name any other module of the app imports from an adapter is resolved, and neither it nor any
type it is built from (a `Callable[[ContainerProxy], ...]` alias) may come from the SDKs.
Imports under `if TYPE_CHECKING:` count too.
"""

from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path

import orders

SOURCE = Path(orders.__file__).resolve().parent
SDK_PACKAGES = ("azure.cosmos", "azure.servicebus")


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def names_imported_from_adapters(path: Path) -> list[tuple[str, str]]:
    """(adapter module, name) for each `from orders.adapters... import name` in the file."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orders.adapters"):
            found.extend((str(node.module), alias.name) for alias in node.names)
    return found


def sdk_types_in(value: object, seen: set[int] | None = None) -> list[str]:
    """The SDK types `value` is, or is built from (generic aliases' arguments, recursively)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    found: list[str] = []
    module = getattr(value, "__module__", None)
    if isinstance(value, type) and isinstance(module, str) and module.startswith(SDK_PACKAGES):
        found.append(f"{module}.{value.__qualname__}")
    for argument in typing.get_args(value):
        if isinstance(argument, list):  # Callable's parameter list
            for parameter in argument:
                found.extend(sdk_types_in(parameter, seen))
        else:
            found.extend(sdk_types_in(argument, seen))
    return found


def app_modules_outside_adapters() -> list[Path]:
    adapters = SOURCE / "adapters"
    return sorted(path for path in SOURCE.rglob("*.py") if adapters not in path.parents)


def test_no_module_outside_the_adapters_names_an_sdk_type() -> None:
    offenders: list[str] = []
    for path in app_modules_outside_adapters():
        for adapter, name in names_imported_from_adapters(path):
            value = getattr(importlib.import_module(adapter), name, None)
            offenders.extend(
                f"{module_name(path)} imports {name} from {adapter}: {sdk_type}"
                for sdk_type in sdk_types_in(value)
            )
    assert offenders == []


def test_the_check_sees_an_sdk_type_and_an_alias_built_from_one(tmp_path: Path) -> None:
    """The test above could pass by seeing nothing: show that it sees what it looks for."""
    from azure.cosmos.aio import ContainerProxy
    from azure.servicebus import ServiceBusReceivedMessage

    alias = typing.Callable[[ContainerProxy], int]
    assert sdk_types_in(ServiceBusReceivedMessage) == [
        "azure.servicebus._common.message.ServiceBusReceivedMessage"
    ]
    assert sdk_types_in(alias) == [f"{ContainerProxy.__module__}.ContainerProxy"]
    assert sdk_types_in(typing.Callable[[str], int]) == []
    source = tmp_path / "sample.py"
    source.write_text("from orders.adapters.cosmos_client import ContainerProxy\n")
    assert names_imported_from_adapters(source) == [
        ("orders.adapters.cosmos_client", "ContainerProxy")
    ]
