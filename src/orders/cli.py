"""`orders` command line: thin commands over the composition root."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="orders",
    help="Exactly-once order processing on Azure Service Bus + Cosmos DB.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Commands: worker, load, verify, demo, serve."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
