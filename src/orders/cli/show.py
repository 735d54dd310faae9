"""`orders show ORDER_ID`: one order as every view sees it, from the same reads as the console."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from orders.cli.shared import (
    BOTH_SERVICES,
    COSMOS_DB,
    SERVICE_BUS,
    UNREACHABLE_EXIT,
    configure_logging,
    connection_errors_exit,
    err,
    exit_unreachable,
    out,
    require_ready,
    settings_or_exit,
    unreachable_services,
)
from orders.domain.ids import ID_RULE, is_entity_id
from orders.settings import Settings

# Store bookkeeping a person does not read; `--json` keeps every other field.
_QUIET_FIELDS = ("id", "orderId", "type")


def show(
    order_id: Annotated[str, typer.Argument(help="The order's id")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document")] = False,
) -> None:
    """One order: the stored order, its history, payment and refund, shipment, outbox events,
    and the dead letters that name it (peeked, nothing changed)."""
    if not is_entity_id(order_id):
        err.print(
            f"[red]not an order id: {order_id!r}[/red] ({ID_RULE})",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(2)
    configure_logging()
    settings = settings_or_exit()
    # The documents are in Cosmos DB, the dead letters in Service Bus: with one of them down,
    # the other part is still shown, the missing one named, and the exit status is 2.
    down = unreachable_services(settings)
    if down.keys() == BOTH_SERVICES:
        exit_unreachable(down[COSMOS_DB])
    from orders.adapters.preflight import consumer_entities, containers

    require_ready(
        settings,
        cosmos=None
        if COSMOS_DB in down
        else containers(settings, "COSMOS_CONTAINER", "COSMOS_INBOX_CONTAINER"),
        servicebus=None if SERVICE_BUS in down else consumer_entities(settings),
    )
    with connection_errors_exit():
        found = without_store_fields(
            asyncio.run(
                _show(
                    settings,
                    order_id,
                    with_documents=COSMOS_DB not in down,
                    with_dead_letters=SERVICE_BUS not in down,
                )
            )
        )
    unavailable = {
        part: down[service]
        for part, service in (("documents", COSMOS_DB), ("deadLetters", SERVICE_BUS))
        if service in down
    }
    if unavailable:
        found["unavailable"] = unavailable
    if as_json:
        print(json.dumps(found, indent=2, default=str))
    else:
        print_order(found)
    for why in unavailable.values():
        err.print(f"[yellow]partial: {why}[/yellow]", highlight=False, soft_wrap=True)
    if unavailable:
        raise typer.Exit(UNREACHABLE_EXIT)


async def _show(
    settings: Settings, order_id: str, *, with_documents: bool, with_dead_letters: bool
) -> dict[str, Any]:
    from orders.bootstrap import build_console_runtime

    runtime = await build_console_runtime(settings)
    try:
        return await runtime.console.show_order(
            order_id, with_documents=with_documents, with_dead_letters=with_dead_letters
        )
    finally:
        await runtime.close()


def without_store_fields(found: dict[str, Any]) -> dict[str, Any]:
    """The documents without what the database adds to each (`_etag`, `_ts`, `_rid`, ...):
    an operator reads the order here, not the store's bookkeeping (the console shows it)."""
    return {
        section: [
            {key: value for key, value in document.items() if not key.startswith("_")}
            if isinstance(document, dict)
            else document
            for document in value
        ]
        if isinstance(value, list)
        else value
        for section, value in found.items()
    }


def print_order(found: dict[str, Any]) -> None:
    order = found.get("order")
    unavailable = found.get("unavailable") or {}
    if "documents" in unavailable:
        out.print(
            f"order {found['orderId']}: its documents are unavailable ({unavailable['documents']})",
            highlight=False,
            soft_wrap=True,
        )
    elif found.get("unreadable"):
        out.print(f"order {found['orderId']}: its documents cannot be read ({found['unreadable']})")
    elif order is None:
        out.print(f"order {found['orderId']}: not stored", highlight=False)
    else:
        out.print(
            f"order {order['orderId']}: {order['status']} (version {order['statusVersion']}), "
            f"customer {order['customerId']}, {order['totalAmount']} {order['currency']}, "
            f"{len(order['lines'])} line(s), stored {order['processedAt']}",
            highlight=False,
        )
    if "documents" not in unavailable:
        print_documents(found)
    if "deadLetters" in unavailable:
        out.print(
            f"dead letters naming it: unavailable ({unavailable['deadLetters']})",
            highlight=False,
            soft_wrap=True,
        )
        return
    dead_letters = found.get("deadLetters") or []
    out.print(f"dead letters naming it ({len(dead_letters)}, peeked):", highlight=False)
    for dead in dead_letters:
        out.print(
            f"  {dead['source']} #{dead['sequenceNumber']} {dead['messageId']}: {dead['reason']}"
            f" ({dead['description']})",
            highlight=False,
            soft_wrap=True,
        )


def print_documents(found: dict[str, Any]) -> None:
    """The order's history and every section of its documents."""
    history = found.get("statusHistory") or []
    out.print(f"history ({len(history)}):", highlight=False)
    for change in history:
        out.print(
            f"  {change['status']:<10} version {change['version']}  {change['at']}",
            highlight=False,
        )
    for section in ("payment", "refund", "shipment", "outbox", "inboxRecords", "rejections"):
        documents = found.get(section) or []
        out.print(f"{section} ({len(documents)}):", highlight=False)
        for document in documents:
            fields = ", ".join(
                f"{key}={value}" for key, value in document.items() if key not in _QUIET_FIELDS
            )
            out.print(
                f"  {document.get('type')} {document.get('id', '')}: {fields}",
                highlight=False,
                soft_wrap=True,
            )
