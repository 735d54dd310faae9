"""What the CLI tests share: the CLI's own list of commands."""

from __future__ import annotations

from typing import Any

import typer

from orders.cli import app


def commands(group: Any = None, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's path (`("dlq", "list")`), from the CLI itself: typer's groups (its own
    click) are what has `commands`."""
    group = typer.main.get_command(app) if group is None else group
    found: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        path = (*prefix, name)
        found += commands(command, path) if hasattr(command, "commands") else [path]
    return found
