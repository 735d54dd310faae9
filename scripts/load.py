"""Thin wrapper: `python scripts/load.py ...` is `orders load ...` (orders with duplicates)."""

from __future__ import annotations

import typer

from orders.cli import load

# A one-command app: its help says `scripts/load.py [OPTIONS]`, as it is run.
script = typer.Typer(add_completion=False, rich_markup_mode=None)
script.command()(load)

if __name__ == "__main__":
    script(prog_name="scripts/load.py")
