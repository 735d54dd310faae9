"""`orders` command line: thin commands over the composition root."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from exactly_once.options import DEFAULT_LEASE_SECONDS
from orders.cli.operations import dead_letters_app, keys_app
from orders.cli.outbox import outbox_app
from orders.cli.payments import payments
from orders.cli.shared import (
    configure_logging,
    connection_errors_exit,
    err,
    exit_unreachable,
    exit_with,
    out,
    require_reachable,
    require_ready,
    settings_or_exit,
    unreachable,
)
from orders.cli.show import show
from orders.domain.ids import InvalidIdError
from orders.domain.load_plan import (
    LoadMix,
    LoadPlan,
    check_run_id,
    plan_from_json,
    plan_load,
    plan_to_json,
)
from orders.service.registry import CONSUMERS, STATUS, consumer_named, downstream_consumers
from orders.service.verify import VerifyReport

if TYPE_CHECKING:
    from orders.entrypoints.demo import DemoResult

app = typer.Typer(
    name="orders",
    help="Exactly-once order processing on Azure Service Bus + Cosmos DB.",
    no_args_is_help=True,
    add_completion=False,
    # Plain help: typer's rich help prints `<bool>` beside every flag.
    rich_markup_mode=None,
)


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1, help="Messages in flight per process")] = 4,
    prefetch: Annotated[
        int, typer.Option(min=0, help="Prefetch per receiver (0: exactly what is asked)")
    ] = 0,
    grace: Annotated[float, typer.Option(help="Seconds to finish in-flight work on stop")] = 20.0,
    decisions: Annotated[
        Path | None, typer.Option(help="Append one JSON line per decision to this file")
    ] = None,
    subscription: Annotated[
        str | None,
        typer.Option(
            help="Run this registered consumer ("
            + ", ".join(spec.name for spec in downstream_consumers())
            + ": a subscription of the events topic, or the status queue) instead of the "
            "order consumer of the orders queue (the registry's first entry, the default)",
        ),
    ] = None,
) -> None:
    """Competing consumer: the orders queue (or an events subscription) until SIGTERM / SIGINT."""
    from exactly_once import DelayedRetries
    from exactly_once.worker import WorkerOptions
    from orders.entrypoints.worker import run_until_signalled

    spec = None
    if subscription is not None:
        try:
            spec = consumer_named(subscription)
        except KeyError as unknown:
            raise typer.BadParameter(str(unknown), param_hint="--subscription") from unknown
    configure_logging()
    settings = settings_or_exit()
    from orders.adapters.preflight import containers, entity

    consumer = spec or CONSUMERS[0]  # the registry's first: the order consumer
    require_ready(
        settings,
        cosmos=containers(settings, "COSMOS_CONTAINER", "COSMOS_INBOX_CONTAINER"),
        servicebus=[entity(consumer.source(settings), consumer.setting)],
        host=True,
    )
    options = WorkerOptions(
        concurrency=concurrency,
        prefetch=prefetch,
        shutdown_grace_seconds=grace,
        # ORDERS_DELAYED_RETRIES / ORDERS_DELAYED_RETRY_SECONDS
        delayed_retries=DelayedRetries(settings.delayed_retries, settings.delayed_retry_seconds),
    )
    run_until_signalled(settings, options, decisions=decisions, subscriber=spec)


@app.command()
def dispatcher(
    lease_seconds: Annotated[
        float, typer.Option(min=3, help="How long a feed-range lease outlives its last renewal")
    ] = DEFAULT_LEASE_SECONDS,
) -> None:
    """Outbox dispatcher: publish stored orders' events to the topic until SIGTERM / SIGINT."""
    from orders.adapters.preflight import containers, topic
    from orders.entrypoints.dispatcher import run_dispatcher_until_signalled

    configure_logging()
    settings = settings_or_exit()
    require_ready(
        settings,
        cosmos=containers(settings, "COSMOS_CONTAINER", "COSMOS_LEASES_CONTAINER"),
        servicebus=[topic("ORDER_EVENTS_TOPIC", settings.order_events_topic)],
        host=True,
    )
    stats = run_dispatcher_until_signalled(settings, lease_seconds=lease_seconds)
    err.print(f"dispatcher stopped: published {stats.published} event(s)")


def progress_bar() -> Progress:
    """Bars on stderr, one per task (its description names it: sending, draining, auditing).
    Only on a terminal: elsewhere (a log, a pipe, a test) rich prints a bar once, when it
    closes, which is after everything the command did next."""
    return Progress(
        TextColumn("[bold]{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
        disable=not err.is_terminal,
    )


@app.command()
def load(
    manifest: Annotated[Path, typer.Option(help="Where to write the manifest (JSON)")],
    orders: Annotated[int, typer.Option(min=1, help="Distinct orders to send")] = 200,
    producer_retries: Annotated[
        float, typer.Option(help="Fraction re-sent inside the window")
    ] = 0.10,
    late_duplicates: Annotated[
        float, typer.Option(help="Fraction re-sent after the window")
    ] = 0.10,
    concurrent_duplicates: Annotated[
        float, typer.Option(help="Fraction sent twice to appear at the same instant")
    ] = 0.10,
    conflicts: Annotated[float, typer.Option(help="Fraction reused with a new payload")] = 0.03,
    poison: Annotated[float, typer.Option(help="Invalid messages, as a fraction")] = 0.04,
    conflicts_in_window: Annotated[
        float,
        typer.Option(help="Fraction reused with a new payload inside the window (broker drops it)"),
    ] = 0.02,
    duplicate_window: Annotated[
        float | None,
        typer.Option(
            help="The queue's duplicate-detection window in seconds "
            "(default: ORDERS_DUPLICATE_WINDOW_SECONDS, which `orders env` sets)"
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed, for reproducible runs")] = 1,
    run_id: Annotated[str | None, typer.Option(help="Prefix of every id (default: random)")] = None,
    status_updates: Annotated[
        bool,
        typer.Option(
            "--status-updates",
            help="Also send absolute, versioned status updates per order (some duplicated, "
            "some never applicable) to the status queue",
        ),
    ] = False,
    reorder: Annotated[
        bool,
        typer.Option("--reorder", help="Send each order's status updates newest first, shuffled"),
    ] = False,
    cancels: Annotated[
        int,
        typer.Option(
            min=0,
            help="Cancel this many orders through the API's core, at every point of the saga "
            "(before billing, after the charge, after shipping, twice under two keys)",
        ),
    ] = 0,
) -> None:
    """Send orders with injected duplicates, conflicts and poison; write a manifest."""
    from orders.entrypoints.runs import send_cancels, send_load

    # Refused before anything is sent or even reached: every id of the run derives from it.
    if run_id is not None:
        try:
            check_run_id(run_id)
        except InvalidIdError as invalid:
            raise typer.BadParameter(str(invalid), param_hint="--run-id") from None
    from orders.adapters.preflight import containers, queue

    configure_logging(logging.WARNING)
    settings = settings_or_exit()
    entities = [queue("ORDERS_QUEUE", settings.orders_queue, sends=True)]
    if status_updates:
        entities.append(queue("STATUS_QUEUE", settings.status_queue, sends=True))
    # The cancels go through the API's core: the orders, keys and inbox containers.
    needs_cosmos = (
        containers(
            settings, "COSMOS_CONTAINER", "COSMOS_IDEMPOTENCY_CONTAINER", "COSMOS_INBOX_CONTAINER"
        )
        if cancels
        else None
    )
    require_ready(settings, cosmos=needs_cosmos, servicebus=entities)
    if duplicate_window is None:
        duplicate_window = float(settings.duplicate_window_seconds)
    mix = LoadMix(
        producer_retries,
        late_duplicates,
        concurrent_duplicates,
        conflicts,
        poison,
        conflicts_in_window,
    )
    plan = plan_load(
        orders,
        mix,
        seed=seed,
        run_id=run_id or f"run{uuid.uuid4().hex[:8]}",
        status_updates=status_updates,
        reorder=reorder,
        cancels=cancels,
    )
    manifest.write_text(
        json.dumps(
            plan_to_json(
                plan, queue=settings.orders_queue, duplicate_window_seconds=duplicate_window
            ),
            indent=1,
        )
    )
    with progress_bar() as progress:
        task = progress.add_task("sending", total=len(plan.sends) + len(plan.status_updates))
        result = asyncio.run(
            send_load(
                settings,
                plan,
                duplicate_window_seconds=duplicate_window,
                on_sent=lambda count: progress.advance(task, count),
            )
        )
    err.print(
        f"sent {result.sent} messages for run [bold]{plan.run_id}[/bold] "
        f"(waited {result.waited_seconds:.1f} s past the duplicate window); manifest: {manifest}"
    )
    if plan.cancels:
        answered = asyncio.run(send_cancels(settings, plan.cancels)).to_json()
        for point, counts in sorted(answered.items()):
            listed = ", ".join(f"{answer} {count}" for answer, count in sorted(counts.items()))
            err.print(f"cancels {point}: {listed}")


def read_manifest(path: Path) -> LoadPlan:
    """The plan `orders load` wrote, or one line and exit 2."""
    try:
        return plan_from_json(json.loads(path.read_text()))
    except OSError as exc:
        exit_with(f"cannot read the manifest {path}: {exc.strerror or exc}")
    except (ValueError, KeyError, TypeError) as exc:
        exit_with(f"{path} is not a manifest `orders load` wrote ({type(exc).__name__}: {exc})")


def report_table(report: VerifyReport) -> Table:
    """The audit as a table, each figure beside what it counts."""
    from orders.service.verify_meanings import (
        CHECK_MEANINGS,
        CONFLICT_MEANINGS,
        CONSUMER_MEANINGS,
        STATUS_MEANINGS,
        effect_meaning,
    )

    table = Table(title=f"verify {report.run_id}: {'OK' if report.ok else 'FAILED'}")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_column("what it counts")
    rows = [
        ("messages sent", report.sent, CHECK_MEANINGS["sent"]),
        ("distinct orders", report.unique_orders, CHECK_MEANINGS["unique_orders"]),
        ("orders in store", report.orders_in_store, CHECK_MEANINGS["orders_in_store"]),
        ("orders stored twice", report.duplicate_orders, CHECK_MEANINGS["duplicate_orders"]),
        ("orders missing", report.missing_orders, CHECK_MEANINGS["missing_orders"]),
        ("dead-lettered (this run)", report.dead_lettered, CHECK_MEANINGS["dead_lettered"]),
        (
            "dead letters expected",
            report.expected_dead_letters,
            CHECK_MEANINGS["expected_dead_letters"],
        ),
        (
            "dead letters unexplained",
            report.unexpected_dead_letters,
            CHECK_MEANINGS["unexpected_dead_letters"],
        ),
        (
            "rejection notes filed",
            report.rejections_recorded,
            CHECK_MEANINGS["rejections_recorded"],
        ),
        (
            "conflicts in window sent",
            report.conflicts_in_window["sent"],
            CONFLICT_MEANINGS["sent"],
        ),
        (
            "  dropped by the broker (silent)",
            report.conflicts_in_window["dropped_by_broker"],
            CONFLICT_MEANINGS["dropped_by_broker"],
        ),
        (
            "  dead-lettered",
            report.conflicts_in_window["dead_lettered"],
            CONFLICT_MEANINGS["dead_lettered"],
        ),
    ]
    for name, value, meaning in rows:
        table.add_row(name, str(value), meaning)
    for kind, count in sorted(report.sends_by_kind.items()):
        table.add_row(f"  sends: {kind}", str(count), "messages of this kind the load sent")
    if report.status_updates is not None:
        for check in (
            "sent",
            "distinct_updates",
            "applied",
            "stale",
            "illegal_sent",
            "illegal_dead_lettered",
            "final_state_mismatches",
        ):
            label = check.replace("_", " ")
            if check in ("applied", "stale"):
                label += " (distinct updates)"
            table.add_row(
                f"status: {label}", str(report.status_updates[check]), STATUS_MEANINGS[check]
            )
    for consumer, found in sorted(report.fanout.items()):
        table.add_row(
            f"{consumer}: effects / expected",
            f"{found['effects']} / {found['expected']}",
            f"{effect_meaning(consumer)} / {CONSUMER_MEANINGS['expected']}",
        )
        for check in ("doubled", "missing", "stuck_in_progress"):
            table.add_row(
                f"  {consumer}: {check.replace('_', ' ')}",
                str(found[check]),
                CONSUMER_MEANINGS[check],
            )
    for invariant, count in (report.invariants or {}).items():
        table.add_row(
            f"invariant: {invariant.replace('_', ' ')}",
            str(count),
            "orders breaking it (must be 0)",
        )
    return table


def print_report(report: VerifyReport, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(report.to_json()))
        return
    out.print(report_table(report))
    for violation in report.violations[:50]:
        out.print(f"[red]violation:[/red] {violation}")


@app.command()
def verify(
    manifest: Annotated[Path, typer.Option(help="The manifest `orders load` wrote")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout")] = False,
    fanout: Annotated[
        bool,
        typer.Option(
            help="Also audit billing (charges and refunds at PAYMENTS_URL), shipping (the "
            "inbox), the saga's invariants and GET's status (the status consumer); "
            "--no-fanout when only order workers run"
        ),
    ] = True,
) -> None:
    """Audit Cosmos DB and the dead-letter queue against a manifest; exit 1 on any violation."""
    from orders.adapters.preflight import containers, queue
    from orders.entrypoints.runs import verify_run

    configure_logging(logging.WARNING)
    settings = settings_or_exit()
    require_reachable(settings)  # a stopped stack first: the manifest is no use without it
    plan = read_manifest(manifest)
    # As `orders up` runs them: every registered consumer downstream of the order consumer.
    consumers = frozenset(spec.name for spec in downstream_consumers()) if fanout else frozenset()
    entities = [queue("ORDERS_QUEUE", settings.orders_queue)]
    if plan.status_updates:
        entities.append(queue("STATUS_QUEUE", settings.status_queue))
    container_settings = ["COSMOS_CONTAINER"] + (["COSMOS_INBOX_CONTAINER"] if fanout else [])
    require_ready(settings, cosmos=containers(settings, *container_settings), servicebus=entities)
    with progress_bar() as progress:
        reading = progress.add_task("auditing", total=None)
        report = asyncio.run(
            verify_run(
                settings,
                plan,
                fanout=consumers,
                on_read=lambda count: progress.advance(reading, count),
            )
        )
    print_report(report, as_json)
    raise typer.Exit(0 if report.ok else 1)


def print_demo_story(result: DemoResult, workers: int) -> None:
    """The verify table, the consumers' outcomes, and what the run proved, in words."""
    report = result.report
    outcomes = result.consumer_outcomes
    handled = sum(outcomes.get(k, 0) for k in ("processed", "duplicate", "mismatch", "rejected"))
    # Producer retries and conflicts inside the window never reach a consumer.
    retries = report.sends_by_kind.get("producer_retry", 0)
    dropped = retries + report.conflicts_in_window["dropped_by_broker"]
    from orders.entrypoints.demo_report import outcome_meaning

    table = report_table(report)
    for outcome, count in sorted(outcomes.items()):
        table.add_row(f"  consumer: {outcome}", str(count), outcome_meaning(outcome))
    out.print(table)
    for violation in report.violations[:50]:
        out.print(f"[red]violation:[/red] {violation}")
    out.print(
        f"{report.sent} messages for {report.unique_orders} orders through {workers} "
        f"competing workers in {result.seconds:.0f} s; the consumers decided {handled} "
        "deliveries."
    )
    if handled == report.sent - dropped:
        out.print(
            f"The {retries} producer retries never reached a consumer: the broker's "
            "duplicate detection dropped them inside its window."
        )
    if report.conflicts_in_window["dropped_by_broker"]:
        out.print(
            f"[yellow]Silent:[/yellow] {report.conflicts_in_window['dropped_by_broker']} "
            "different orders sent under a reused orderId inside the window were dropped "
            "by the broker too (it compares MessageId only): no consumer, dead letter or "
            "alert can see them. The HTTP API refuses such reuse (409); see docs/how-it-works.md."
        )
    for consumer, counts in sorted(result.subscriber_outcomes.items()):
        listed = ", ".join(f"{outcome} {count}" for outcome, count in sorted(counts.items()))
        out.print(f"{consumer} consumer, per delivery: {listed}")
    status_stale = result.subscriber_outcomes.get(STATUS, {}).get("stale")
    if report.status_updates and status_stale is not None:
        out.print(
            f"Stale twice over: the status consumer decided {status_stale} deliveries stale "
            "(every delivery of a stale update, duplicates and redeliveries included); "
            f"{report.status_updates['stale']} distinct updates were stale (the table)."
        )
    if report.ok:
        out.print(
            "[green]Proven:[/green] every order stored exactly once, with its first "
            "payload's hash and all its lines; redeliveries, late and concurrent duplicates "
            f"({outcomes.get('duplicate', 0)}) completed without a second write; every "
            "conflicting reuse and poison message in the dead-letter queue with its reason; "
            "nothing lost, nothing unexplained."
        )
    if report.ok and report.status_updates:
        found = report.status_updates
        out.print(
            f"[green]Proven for status updates:[/green] {found['distinct_updates']} distinct "
            f"absolute, versioned updates ({found['sent']} sent by the load, newest first and "
            f"duplicated, plus billing's and shipping's), {found['applied']} applied, "
            f"{found['stale']} stale without a write, {found['illegal_dead_lettered']} illegal "
            "dead-lettered; every order ends at its highest legal version, with no dedup store."
        )
    if report.ok and report.fanout:
        out.print(
            "[green]Proven after the order:[/green] every stored order's event published "
            "through the outbox, charged exactly once with its amount at the payment service "
            "and shipped exactly once, with nothing stuck in progress."
        )
    for point, counts in sorted(result.cancel_answers.items()):
        listed = ", ".join(f"{answer} {count}" for answer, count in sorted(counts.items()))
        out.print(f"cancels {point.replace('_', ' ')}: {listed}")
    if report.ok and report.invariants is not None:
        out.print(
            f"[green]Proven for the customer:[/green] {len(result.plan.cancels)} orders "
            "cancelled at every point of the saga; no cancelled order shipped, no order "
            "shipped without a charge, every charge of a cancelled order refunded exactly "
            "once and in full, no charge without its stored order or with another amount, "
            "and every order's status as it happened (all invariants 0)."
        )


@app.command()
def demo(
    orders: Annotated[int, typer.Option(min=1, help="Distinct orders")] = 300,
    workers: Annotated[int, typer.Option(min=1, help="Competing worker processes")] = 3,
    seed: Annotated[int, typer.Option(help="Random seed of the load")] = 7,
    cancels: Annotated[
        int, typer.Option(min=0, help="Orders cancelled at every point of the saga")
    ] = 40,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verify object last")] = False,
    report: Annotated[Path, typer.Option(help="Where to write the HTML report of the run")] = Path(
        "demo-report.html"
    ),
) -> None:
    """Run everything on the embedded local stack and prove exactly-once effects."""
    from orders.entrypoints.demo import DemoOptions, run_demo

    configure_logging(logging.WARNING)
    # SIGTERM unwinds like Ctrl-C, so the stack's cleanup stops every process it started. SIGINT
    # is set too: Python leaves it ignored when the demo is started with it ignored (a
    # background job of a script, `make test &`), and then a SIGINT would not stop the demo.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    options = DemoOptions(orders=orders, workers=workers, seed=seed, cancels=cancels)
    with progress_bar() as progress:
        sending = progress.add_task("sending", total=None)
        # Its figure is what the audit has accounted for so far (`VerifyReport.accounted_for`).
        draining = progress.add_task("draining", total=None)
        result = run_demo(
            options,
            on_planned=lambda plan: progress.update(
                sending, total=len(plan.sends) + len(plan.status_updates)
            ),
            on_sent=lambda count: progress.advance(sending, count),
            on_stage=lambda stage: progress.console.print(f"[dim]{stage}[/dim]"),
            on_drained=lambda found, expected: progress.update(
                draining, completed=found, total=expected
            ),
        )
    from orders.entrypoints.demo_report import render_report

    report.write_text(
        render_report(result.report.to_json(), result.decisions, result.seconds), encoding="utf-8"
    )
    if not as_json:
        print_demo_story(result, workers)
        out.print(f"HTML report: {report}")
    if result.processes_left_running:
        err.print(f"[red]left running:[/red] {result.processes_left_running}")
    verified = result.report
    if as_json:
        summary = {
            **verified.to_json(),
            "consumer_outcomes": result.consumer_outcomes,
            "subscriber_outcomes": result.subscriber_outcomes,
            "cancel_answers": result.cancel_answers,
            "worker_exit_codes": result.worker_exit_codes,
            "seconds": round(result.seconds, 1),
        }
        print(json.dumps(summary))
    raise typer.Exit(0 if verified.ok and not result.processes_left_running else 1)


AllowHost = Annotated[
    list[str] | None,
    typer.Option(
        help="Another host name (or name:port) to answer for, besides the bound address, "
        "localhost and 127.0.0.1 (also ORDERS_ALLOWED_HOSTS, comma-separated)",
        show_default=False,
    ),
]


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0 picks a free one)")] = 8000,
    console: Annotated[
        bool, typer.Option("--console", help="Serve the operations console at /console too")
    ] = False,
    allow_host: AllowHost = None,
) -> None:
    """Serve the HTTP API (POST/GET /api/orders, /api/docs) with uvicorn."""
    import uvicorn

    from orders.adapters.preflight import containers, queue
    from orders.bootstrap import ProcessClients, build_console_runtime, build_http_runtime
    from orders.entrypoints.http_api import create_app
    from orders.entrypoints.http_hosts import AllowedHosts

    configure_logging()
    settings = settings_or_exit()  # fail at start, not on the first request
    # The settings alone first: a bad host is named as such, whatever the stack's state.
    try:
        allowed = AllowedHosts.parse([*settings.allowed_hosts, *(allow_host or [])])
    except ValueError as exc:
        err.print(f"[red]ORDERS_ALLOWED_HOSTS / --allow-host: {exc}[/red]")
        raise typer.Exit(2) from exc
    require_ready(
        settings,
        cosmos=containers(
            settings, "COSMOS_CONTAINER", "COSMOS_IDEMPOTENCY_CONTAINER", "COSMOS_INBOX_CONTAINER"
        ),
        servicebus=[queue("ORDERS_QUEUE", settings.orders_queue, sends=True)],
        host=True,
    )
    with_console = console or settings.console_enabled
    # The API and the console share the process's clients (made in uvicorn's loop, on use).
    clients = ProcessClients(settings)
    uvicorn.run(
        create_app(
            lambda: build_http_runtime(settings, clients=clients),
            console_factory=(
                (lambda: build_console_runtime(settings, clients=clients)) if with_console else None
            ),
            allowed_hosts=allowed,
            shared_clients=clients,
            warm_console=with_console,
        ),
        host=host,
        port=port,
        log_level="info",
    )


@app.command()
def up(
    workers: Annotated[int, typer.Option(min=0, help="Competing worker processes")] = 2,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port of the HTTP API")] = 8000,
    directory: Annotated[
        Path, typer.Option("--dir", help="Where logs and the settings files go")
    ] = Path(".orders-local"),
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Start empty: delete the broker's messages, the stored orders and the "
            "payment stand-in's charges kept from the last run",
        ),
    ] = False,
    allow_host: AllowHost = None,
    entities: Annotated[
        Path | None,
        typer.Option(
            "--entities",
            help="A JSON file of your own queues and topics (the Service Bus emulator's "
            "Config.json shape) and Cosmos DB containers (a `Cosmos` section) to add; kept "
            "for the next runs",
        ),
    ] = None,
) -> None:
    """Run the whole local stack (emulators, workers, HTTP API) until Ctrl-C; a restart
    resumes with the orders, messages and charges of the last run."""
    from rich.markup import escape

    from orders.entrypoints.local_entities import EntitiesError
    from orders.entrypoints.up import RunningStack, UpOptions, entities_for, run_up

    def ready(running: RunningStack) -> None:
        out.print(f"[green]ready[/green]: HTTP API {running.api_url}/api/docs")
        out.print(f"operations console: {running.api_url}/console")
        out.print(f"settings: {running.directory / 'env.json'} (`orders env` prints them)")
        out.print(f"local.settings.json for func start: {running.directory}/local.settings.json")
        out.print("Ctrl-C stops everything.", highlight=False)

    configure_logging(logging.WARNING)

    def report(line: str) -> None:
        # Whole lines, never wrapped: paths are long, and scripts read them.
        err.print(line, highlight=False, markup=False, soft_wrap=True)

    try:  # checked whole before anything starts
        own_entities, entities_source = entities_for(directory, entities)
    except EntitiesError as exc:
        err.print(f"[red]--entities: {escape(str(exc))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from exc
    if own_entities is not None:
        report(f"your entities from {entities_source}: {own_entities.summary()}")
    options = UpOptions(
        workers=workers,
        api_port=port,
        directory=directory,
        fresh=fresh,
        allowed_hosts=tuple(allow_host or ()),
        entities=own_entities,
    )

    run_up(options, ready, report)
    err.print("stopped")


@app.command()
def env(
    directory: Annotated[Path, typer.Option("--dir", help="Where `orders up` runs")] = Path(
        ".orders-local"
    ),
) -> None:
    """Print the running local stack's settings as `export` lines: eval "$(orders env)"."""
    from orders.entrypoints.up import ENV_FILE, export_lines
    from orders.settings import Settings, SettingsError

    if not (directory / ENV_FILE).is_file():
        err.print(f"[red]no {ENV_FILE} in {directory}: is `orders up` running?[/red]")
        raise typer.Exit(1)
    # The file outlives the stack that wrote it (Ctrl-C, a crash): settings nobody answers at
    # are stale, and exporting them would only move the failure to the next command.
    try:
        recorded: dict[str, str] = json.loads((directory / ENV_FILE).read_text())
        why = unreachable(Settings.from_env(recorded))
    except (ValueError, SettingsError) as exc:
        err.print(f"[red]{directory / ENV_FILE} is not a stack's settings: {exc}[/red]")
        raise typer.Exit(2) from exc
    if why is not None:
        exit_unreachable(f"{directory / ENV_FILE} is stale, {why}")
    print("\n".join(export_lines(directory)))


app.command()(payments)
app.command()(show)
app.add_typer(dead_letters_app, name="dlq")
app.add_typer(keys_app, name="keys")
app.add_typer(outbox_app, name="outbox")


@app.callback()
def _root() -> None:
    """Commands: up, env, worker, dispatcher, load, verify, demo, serve, payments, dlq, keys,
    outbox."""


def main() -> None:
    with connection_errors_exit():
        app()


if __name__ == "__main__":
    main()
