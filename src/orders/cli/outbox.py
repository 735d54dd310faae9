"""`orders outbox`: the outbox documents the dispatcher parked (the outbox's dead letters).

A document is parked when it can never be published (docs/fanout.md, "Poison outbox
documents"): the dispatcher logs an ERROR and counts `orders.dispatcher.parked`. An operator
lists them here, fixes the cause (a topic's size limit, a dispatcher that cannot read a newer
document), and re-drives them: the change feed brings each to a dispatcher again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.table import Table

from orders.cli.operations import AsJson, run_with
from orders.cli.shared import configure_logging, err, out, settings_or_exit

if TYPE_CHECKING:
    from orders.adapters.cosmos_outbox import CosmosOutboxFeed

T = TypeVar("T")

outbox_app = typer.Typer(
    help="List and re-drive the outbox documents the dispatcher parked.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _with_outbox(action: Callable[[CosmosOutboxFeed], Awaitable[T]]) -> T:
    """`action` over the orders container: Cosmos DB only."""
    from orders.adapters.cosmos_outbox import outbox_tools
    from orders.adapters.preflight import containers

    configure_logging()
    settings = settings_or_exit(needs_servicebus=False)
    return run_with(
        lambda: outbox_tools(settings),
        settings,
        action,
        cosmos=containers(settings, "COSMOS_CONTAINER"),
    )


@outbox_app.command("parked")
def list_parked(as_json: AsJson = False) -> None:
    """Every parked outbox document: order, id, reason, attempts, when, and why."""

    async def read(feed: CosmosOutboxFeed) -> list[dict[str, Any]]:
        return await feed.parked()

    parked = _with_outbox(read)
    if as_json:
        out.print_json(json.dumps(parked))
        return
    table = Table("orderId", "id", "reason", "attempts", "parkedAt", "description")
    for document in parked:
        why = document["parked"]
        table.add_row(
            str(document.get("orderId")),
            str(document["id"]),
            str(why.get("reason")),
            str(why.get("attempts")),
            str(why.get("parkedAt")),
            str(why.get("description")),
        )
    out.print(table)
    err.print(f"{len(parked)} parked outbox document(s)")


@outbox_app.command("redrive")
def redrive(
    order_id: Annotated[
        str | None, typer.Argument(help="The document's orderId (its partition)")
    ] = None,
    document_id: Annotated[str | None, typer.Argument(help="The outbox document's id")] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Every parked document (after fixing a common cause)")
    ] = False,
) -> None:
    """Send a parked outbox document (or `--all`) again: its `parked` mark is removed, so the
    change feed brings it to a dispatcher, which publishes it (or parks it again)."""
    named = (order_id, document_id)
    if (everything and named != (None, None)) or (not everything and None in named):
        err.print("[red]name one document (ORDER_ID ID), or pass --all[/red]")
        raise typer.Exit(2)

    async def take_off(feed: CosmosOutboxFeed) -> list[str]:
        chosen = (
            [(str(d.get("orderId")), str(d["id"])) for d in await feed.parked()]
            if everything
            else [(str(order_id), str(document_id))]
        )
        return [identifier for order, identifier in chosen if await feed.redrive(order, identifier)]

    redriven = _with_outbox(take_off)
    if not everything and not redriven:
        err.print("[red]no parked outbox document with this orderId and id[/red]")
        raise typer.Exit(1)
    out.print(f"re-driven {len(redriven)}: {redriven}")
