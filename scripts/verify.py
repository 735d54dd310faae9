"""Thin wrapper: `python scripts/verify.py ...` is `orders verify ...` (audits a load run)."""

from __future__ import annotations

import typer

from orders.cli import verify

# A one-command app: its help says `scripts/verify.py [OPTIONS]`, as it is run.
script = typer.Typer(add_completion=False, rich_markup_mode=None)
script.command()(verify)

if __name__ == "__main__":
    script(prog_name="scripts/verify.py")
