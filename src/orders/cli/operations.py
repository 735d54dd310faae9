"""`orders dlq` and `orders keys`: what an operator does when the dead-letter alert fires.

Against our emulators, the official ones and Azure alike (Entra ID when no key or connection
string is set). The runbook per dead-letter reason is docs/operations.md.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.table import Table
from rich.text import Text

from exactly_once.store import lease_end_s
from orders.cli.shared import (
    configure_logging,
    connection_errors_exit,
    err,
    iso_time,
    out,
    require_ready,
    settings_or_exit,
)
from orders.domain.dead_letters import (
    DELIVERY_COUNT_CAPTION,
    DeadLetter,
    DeadLetterOutcome,
    DeadLetterPlan,
    Selection,
    delivery_count_meaning,
    printable,
    resubmit_refusal,
)
from orders.domain.idempotency import eviction_refusal, record_id
from orders.exceptions import ResubmitUnsupportedError
from orders.service.subscribers import Source

if TYPE_CHECKING:
    from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore as KeyTools
    from orders.adapters.preflight import Needed
    from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters as DeadLetterTools
    from orders.settings import Settings

T = TypeVar("T")
Tools = TypeVar("Tools")

# Plain help (no rich markup mode): typer's rich help prints `<bool>` beside every flag.
dead_letters_app = typer.Typer(
    help="Inspect, resubmit and purge the orders queue's dead letters.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
keys_app = typer.Typer(
    help="Inspect and evict HTTP Idempotency-Key records.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

Numbers = Annotated[list[int] | None, typer.Argument(help="Sequence numbers", show_default=False)]
Reason = Annotated[str | None, typer.Option(help="Only dead letters with this reason")]
All = Annotated[bool, typer.Option("--all", help="Every dead letter")]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout")]
Scope = Annotated[
    str | None,
    typer.Option(help="The key's scope: app:<IDEMPOTENCY_SCOPE> (default) or principal:<id>"),
]


Queue = Annotated[str | None, typer.Option(help="The queue (default: ORDERS_QUEUE)")]
Topic = Annotated[str | None, typer.Option(help="A topic, with --subscription")]
Subscription = Annotated[str | None, typer.Option(help="A subscription of --topic")]


def source_or_exit(queue: str | None, topic: str | None, subscription: str | None) -> Source | None:
    """The dead-letter queue meant: a queue, a topic's subscription, or (None) the orders queue."""
    if queue is None and topic is None and subscription is None:
        return None
    try:
        return Source(queue=queue, topic=topic, subscription=subscription)
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc


def run_with(
    tools: Callable[[], AbstractAsyncContextManager[Tools]],
    settings: Settings,
    action: Callable[[Tools], Awaitable[T]],
    *,
    cosmos: Sequence[Needed] | None = None,
    servicebus: Sequence[Needed] | None = None,
) -> T:
    """Run `action` over the tools that `tools` opens. What they need (`cosmos`, `servicebus`:
    `require_ready`) is checked first, so a stopped stack, a wrong endpoint or a missing
    entity is one line on stderr and exit 2, not the SDKs' retries and traceback; the service
    they do not need is neither checked nor touched. Both None: checked already."""
    if cosmos is not None or servicebus is not None:
        require_ready(settings, cosmos=cosmos, servicebus=servicebus)

    async def run() -> T:
        async with tools() as opened:
            return await action(opened)

    with connection_errors_exit():
        return asyncio.run(run())


def dead_letter_source(source: Source | None, settings: Settings) -> Needed:
    """The entity whose dead letters a command reads, with what names it."""
    from orders.adapters.preflight import entity, queue

    if source is None:
        return queue("ORDERS_QUEUE", settings.orders_queue)
    return entity(source, "--queue" if source.queue else "--topic/--subscription")


def with_dead_letters(
    action: Callable[[DeadLetterTools], Awaitable[T]],
    source: Source | None = None,
    settings: Settings | None = None,
    *,
    checked: bool = False,
) -> T:
    """`action` over one dead-letter queue (`source`, default the orders queue): Service Bus
    only, so the DLQ commands work while Cosmos DB is down. `checked`: a command's second
    call, after its first checked the entity."""
    from orders.adapters.servicebus_dead_letters import dead_letter_tools

    configure_logging()
    chosen = settings or settings_or_exit()
    needed = None if checked else [dead_letter_source(source, chosen)]
    return run_with(lambda: dead_letter_tools(chosen, source), chosen, action, servicebus=needed)


def with_keys(action: Callable[[KeyTools], Awaitable[T]], settings: Settings) -> T:
    """`action` over the idempotency-key records: Cosmos DB only, so the key commands work
    while Service Bus is down (or not configured)."""
    from orders.adapters.cosmos_idempotency import idempotency_key_tools
    from orders.adapters.preflight import containers

    return run_with(
        lambda: idempotency_key_tools(settings),
        settings,
        action,
        cosmos=containers(settings, "COSMOS_IDEMPOTENCY_CONTAINER"),
    )


def keys_settings() -> Settings:
    configure_logging()
    return settings_or_exit(needs_servicebus=False)


def selection_or_exit(numbers: list[int] | None, reason: str | None, everything: bool) -> Selection:
    try:
        return Selection(frozenset(numbers or ()), reason, everything)
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc


def confirm_plan(plan: DeadLetterPlan, *, confirmed: bool) -> None:
    """Say, before anything is locked, what the command will do to the dead letters it does
    not act on, and go on only when that is confirmed: `--yes`, or yes at a terminal's prompt."""
    if not plan.passed_over:
        return
    err.print(
        f"{len(plan.passed_over)} dead letter(s) that this command does not act on lie before "
        f"the ones it does: {list(plan.passed_over)}. Service Bus reaches a dead letter only by "
        "locking every one before it, so these will be locked and given back: each one's "
        "delivery count goes up by 1, nothing else about them changes.",
        highlight=False,
    )
    if confirmed:
        return
    if sys.stdin.isatty():
        if typer.confirm("Go on?", default=False, err=True):
            return
        raise typer.Exit(1)
    err.print("[red]not confirmed: add --yes to go on[/red]")
    raise typer.Exit(2)


def report_passed_over(outcome: DeadLetterOutcome) -> None:
    if outcome.passed_over:
        out.print(
            f"passed over {len(outcome.passed_over)}: {sorted(outcome.passed_over)} "
            "(locked and given back: delivery count +1)",
            highlight=False,
        )


def dead_letter_table(dead_letters: list[DeadLetter]) -> Table:
    table = Table(title=f"{len(dead_letters)} dead letter(s)", caption=DELIVERY_COUNT_CAPTION)
    for column in ("seq", "reason", "description", "deliveries", "enqueued", "MessageId", "body"):
        table.add_column(column, overflow="fold")
    for dead in dead_letters:
        table.add_row(
            str(dead.sequence_number),
            # Text, not str: a broker's or producer's "[...]" is not rich markup.
            Text(dead.reason or ""),
            Text((dead.description or "")[:80]),
            str(dead.delivery_count),
            dead.enqueued_at.isoformat(timespec="seconds") if dead.enqueued_at else "",
            Text(printable(dead.message_id or "")),
            Text(dead.preview[:60]),
        )
    return table


def print_fields(fields: dict[str, object]) -> None:
    """`name: value` lines; structured values as JSON, never as Python reprs."""
    for name, value in fields.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        out.print(f"[bold]{name}[/bold]: ", end="")
        out.print(shown, markup=False, highlight=False, soft_wrap=True)  # a value, unbroken


@dead_letters_app.command("list")
def list_dead_letters(
    limit: Annotated[int, typer.Option(min=1, help="At most this many, oldest first")] = 100,
    as_json: AsJson = False,
    queue: Queue = None,
    topic: Topic = None,
    subscription: Subscription = None,
) -> None:
    """Reason, description, delivery count, enqueued time, MessageId and a body preview."""
    source = source_or_exit(queue, topic, subscription)
    found = with_dead_letters(lambda queue: queue.browse(limit), source)
    if as_json:
        out.print_json(json.dumps([dead.to_json() for dead in found]))
    else:
        out.print(dead_letter_table(found))


@dead_letters_app.command("show")
def show_dead_letter(
    sequence: int,
    as_json: AsJson = False,
    queue: Queue = None,
    topic: Topic = None,
    subscription: Subscription = None,
) -> None:
    """One dead letter with its whole body and application properties."""
    source = source_or_exit(queue, topic, subscription)
    found = with_dead_letters(lambda queue: queue.browse(1, from_sequence=sequence), source)
    if not found or found[0].sequence_number != sequence:
        err.print(f"[red]no dead letter with sequence number {sequence}[/red]")
        raise typer.Exit(1)
    view = found[0].to_json(with_body=True)
    if as_json:
        out.print_json(json.dumps(view))
    else:
        print_fields(view | {"deliveryCount": delivery_count_meaning(found[0].delivery_count)})


@dead_letters_app.command("resubmit")
def resubmit_dead_letters(
    numbers: Numbers = None,
    reason: Reason = None,
    everything: All = False,
    force: Annotated[
        bool, typer.Option(help="Resubmit RequestHashMismatch dead letters too")
    ] = False,
    duplicate_window: Annotated[
        float | None,
        typer.Option(
            help="The queue's duplicate-detection window in seconds "
            "(default: ORDERS_DUPLICATE_WINDOW_SECONDS, which `orders env` sets)"
        ),
    ] = None,
    by: Annotated[str | None, typer.Option(help="Who resubmits (default: user@host)")] = None,
    queue: Queue = None,
    topic: Topic = None,
    subscription: Subscription = None,
    to_topic: Annotated[
        bool,
        typer.Option(
            "--to-topic",
            help="A subscription's dead letters: send the copies to the topic, which delivers "
            "them to every subscription (each must drop a MessageId it already handled)",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="Confirm what the command says it will do to the dead letters before the "
            "selected ones (locked and given back: delivery count +1)",
        ),
    ] = False,
) -> None:
    """Send selected dead letters back whole (MessageId, SessionId, ReplyTo, To, TTL, every
    property) so the idempotent consumer still recognises them, recording when and by whom."""
    selection = selection_or_exit(numbers, reason, everything)
    source = source_or_exit(queue, topic, subscription)
    settings = settings_or_exit()
    now = datetime.now(UTC)
    who = by or f"{getpass.getuser()}@{socket.gethostname()}"
    window = timedelta(
        seconds=settings.duplicate_window_seconds if duplicate_window is None else duplicate_window
    )

    def refusal(dead: DeadLetter) -> str | None:
        return resubmit_refusal(dead, force=force, now=now, duplicate_window=window)

    confirm_plan(
        with_dead_letters(lambda queue: queue.plan(selection, refusal), source, settings),
        confirmed=yes,
    )
    try:
        outcome = with_dead_letters(
            lambda queue: queue.resubmit(selection, refusal, by=who, now=now, to_topic=to_topic),
            source,
            settings,
            checked=True,
        )
    except ResubmitUnsupportedError as exc:
        err.print(f"[red]not resubmitted:[/red] {exc}")
        raise typer.Exit(2) from exc
    out.print(f"resubmitted {len(outcome.done)}: {sorted(outcome.done)}")
    for sequence, why in sorted(outcome.refused.items()):
        out.print(f"[yellow]kept {sequence}:[/yellow] {why}", highlight=False)
    report_passed_over(outcome)
    raise typer.Exit(1 if outcome.refused else 0)


@dead_letters_app.command("purge")
def purge_dead_letters(
    numbers: Numbers = None,
    reason: Reason = None,
    everything: All = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="Confirm: they are gone for good (and the dead letters before them are "
            "locked and given back: delivery count +1)",
        ),
    ] = False,
    queue: Queue = None,
    topic: Topic = None,
    subscription: Subscription = None,
) -> None:
    """Remove selected dead letters for good (after they were handled elsewhere)."""
    selection = selection_or_exit(numbers, reason, everything)
    source = source_or_exit(queue, topic, subscription)
    if not yes:
        err.print("[red]purge deletes dead letters for good: add --yes to confirm[/red]")
        raise typer.Exit(2)
    settings = settings_or_exit()
    confirm_plan(
        with_dead_letters(lambda queue: queue.plan(selection, lambda dead: None), source, settings),
        confirmed=yes,
    )
    outcome = with_dead_letters(
        lambda queue: queue.purge(selection), source, settings, checked=True
    )
    out.print(f"purged {len(outcome.done)}: {sorted(outcome.done)}")
    report_passed_over(outcome)


def scope_of(scope: str | None, settings: Settings) -> str:
    return scope or f"app:{settings.idempotency_scope}"


@keys_app.command("show")
def show_key(key: str, scope: Scope = None, as_json: AsJson = False) -> None:
    """A key's record: state, request hash, orderId, lease and the stored response."""

    settings = keys_settings()

    async def read(keys: KeyTools) -> dict[str, object] | None:
        record = (await keys.read_key(record_id(scope_of(scope, settings), key))).record
        if record is None:
            return None
        document: dict[str, object] = keys.document(record)
        ends = lease_end_s(record)  # by the database's clock
        if ends is not None:
            document["leaseExpiresAt"] = iso_time(ends)
        return document

    found = with_keys(read, settings)
    if found is None:
        err.print("[red]no record for this key in this scope[/red]")
        raise typer.Exit(1)
    if as_json:
        out.print_json(json.dumps(found))
    else:
        print_fields(found)


@keys_app.command("evict")
def evict_key(
    key: str,
    scope: Scope = None,
    force: Annotated[bool, typer.Option(help="Evict even a request still in progress")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the eviction")] = False,
) -> None:
    """Forget a key: its next request is treated as new (see docs/operations.md first)."""
    if not yes:
        err.print("[red]a retry with an evicted key is accepted again: add --yes to confirm[/red]")
        raise typer.Exit(2)

    settings = keys_settings()

    async def evict(keys: KeyTools) -> str | None:
        identifier = record_id(scope_of(scope, settings), key)
        found = await keys.read_key(identifier)
        if found.record is None:
            return "no record for this key in this scope"
        refusal = eviction_refusal(found.record, found.database_now_ms, force=force)
        if refusal is not None:
            return refusal
        await keys.evict(identifier)
        return None

    refused = with_keys(evict, settings)
    if refused is not None:
        err.print(f"[red]not evicted:[/red] {refused}")
        raise typer.Exit(1)
    out.print("evicted")
