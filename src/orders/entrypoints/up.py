"""`orders up`: the whole local stack, kept running until Ctrl-C.

Both emulators, the payment service stand-in, competing order workers, the outbox dispatcher,
every registered consumer (orders.service.registry), and the HTTP API with the operations console
(/console), on free ports (the API on the port asked for). The broker's messages, the Cosmos
emulator's account and the payment stand-in's charges are kept under the stack's folder, so a
restart resumes where the last run stopped; `--fresh` deletes them all first. The settings
the other tools need are printed, written as `env.json` (read by `orders env`, which prints
them as `export` lines for a second shell; with the fault switches' token, for an operator
only) and as `local.settings.json` for `func start` users. Ctrl-C or SIGTERM stops every
process it started, saying which, as each one stops.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.entrypoints.local_entities import (
    LocalEntities,
    check_containers,
    load_entities,
    merged_servicebus_config,
)
from orders.entrypoints.localstack import DEFAULTS, LocalStack, QueueOptions, local_stack
from orders.service.registry import downstream_consumers

API_READY = re.compile(r"Uvicorn running on (http://\S+)")
READY_TIMEOUT_SECONDS = 60.0
ENV_FILE = "env.json"
# What a restart resumes from, under the stack's folder (the payment stand-in's is chosen by
# LocalStack.start_payments).
SERVICEBUS_DATA = "servicebus-data"
COSMOS_DATA = "cosmos-data"
PAYMENTS_DATA = "payments"
LOCAL_SETTINGS_FILE = "local.settings.json"
# A user's own entities (`--entities`), kept once the stack started with them: a restart
# without `--entities` adds them again, so the messages the broker kept for them still have
# their queues (the emulator refuses a journal that holds an entity its config lacks).
ENTITIES_FILE = "entities.json"


class StartInterrupted(Exception):
    """SIGINT or SIGTERM before the stack was ready: what was started is stopped."""


@dataclass(frozen=True)
class UpOptions:
    workers: int = 2
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    directory: Path = Path(".orders-local")
    # Start empty: forget the messages, orders and charges the last run kept.
    fresh: bool = False
    # Host names the HTTP API answers for besides its address, localhost and 127.0.0.1.
    allowed_hosts: tuple[str, ...] = ()
    # A user's own queues, topics and containers, added beside the app's (`entities_for`).
    entities: LocalEntities | None = None

    @property
    def entities_file(self) -> Path:
        return self.directory / ENTITIES_FILE

    @property
    def servicebus_data(self) -> Path:
        return self.directory / SERVICEBUS_DATA

    @property
    def cosmos_data(self) -> Path:
        return self.directory / COSMOS_DATA

    @property
    def payments_data(self) -> Path:
        return self.directory / PAYMENTS_DATA


@dataclass(frozen=True)
class RunningStack:
    api_url: str
    environment: dict[str, str]
    directory: Path


def write_settings(
    directory: Path,
    environment: dict[str, str],
    api_url: str,
    operator_environment: dict[str, str] | None = None,
) -> None:
    """`operator_environment` (the fault switches' tokens) goes to env.json only, readable by
    its owner alone: the app and `func start` never need it."""
    directory.mkdir(parents=True, exist_ok=True)
    env_file = directory / ENV_FILE
    env_file.touch(mode=0o600)
    os.chmod(env_file, 0o600)  # a file left by an older run keeps its mode otherwise
    env_file.write_text(
        json.dumps(
            {**environment, "ORDERS_API_URL": api_url, **(operator_environment or {})}, indent=2
        )
        + "\n"
    )
    # What `func start` reads; the Functions host needs its own storage setting besides ours.
    local_settings = {
        "IsEncrypted": False,
        "Values": {
            "AzureWebJobsStorage": "UseDevelopmentStorage=true",
            "FUNCTIONS_WORKER_RUNTIME": "python",
            **environment,
            # The outbox dispatcher's Cosmos DB trigger reads a connection string locally.
            "CosmosConnection": (
                f"AccountEndpoint={environment['COSMOS_ENDPOINT']};"
                f"AccountKey={environment['COSMOS_KEY']};"
            ),
        },
    }
    # Owner-only too: it holds PAYMENTS_TOKEN, which moves money through the stand-in.
    settings_file = directory / LOCAL_SETTINGS_FILE
    settings_file.touch(mode=0o600)
    os.chmod(settings_file, 0o600)
    settings_file.write_text(json.dumps(local_settings, indent=2) + "\n")


def entities_for(directory: Path, given: Path | None) -> tuple[LocalEntities | None, Path | None]:
    """The entities to add and the file they come from: `given`, else the ones the last run
    with `--entities` kept under `directory`, else none. Checked whole before anything starts:
    `EntitiesError` for a bad field or a name the app's own entities already use."""
    source = given if given is not None else directory / ENTITIES_FILE
    if given is None and not source.is_file():
        return None, None
    entities = load_entities(source)
    merged_servicebus_config(QueueOptions().config(), entities)
    app_containers = {
        (DEFAULTS.cosmos_database, name)
        for name in (
            DEFAULTS.cosmos_container,
            DEFAULTS.cosmos_idempotency_container,
            DEFAULTS.cosmos_inbox_container,
            DEFAULTS.cosmos_leases_container,
        )
    }
    check_containers(app_containers, entities)
    return entities, source


def export_lines(directory: Path) -> list[str]:
    """`export NAME=value` lines (shell-quoted) from a running stack's env.json."""
    values: dict[str, str] = json.loads((directory / ENV_FILE).read_text())
    return [f"export {name}={shlex.quote(value)}" for name, value in values.items()]


def _wait_for_api(stack: LocalStack, name: str) -> str:
    [api] = [p for p in stack.processes if p.name == name]
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        match = API_READY.search(api.log())
        if match:
            return match.group(1)
        if not api.running:
            raise RuntimeError(f"the HTTP API exited early:\n{api.log()[-2000:]}")
        time.sleep(0.05)  # polling the child's log for its ready line, bounded above
    raise TimeoutError("the HTTP API did not report ready")


def forget_last_run(options: UpOptions) -> list[Path]:
    """Delete what a restart would resume from, all of it, so the stores stay consistent (a
    broker that kept messages for orders the database forgot would redeliver them into
    nothing), and the workers' decision journals the console counts. Returns what it deleted."""
    deleted = []
    for path in (options.servicebus_data, options.cosmos_data, options.payments_data):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        deleted.append(path)
    for journal in sorted(options.directory.glob("*.decisions.jsonl")):
        journal.unlink()
        deleted.append(journal)
    return deleted


class StartSignals:
    """SIGINT or SIGTERM: the stack stops. While it starts, the signal cuts the start short
    (StartInterrupted); the stack defers it while a child is started and recorded
    (`signals_deferred`), so whatever was started is stopped."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.stopped = threading.Event()
        self.starting = True
        self._report = report

    def handle(self, signum: int, frame: object) -> None:
        if self.stopped.is_set():
            return  # already stopping: a second Ctrl-C must not cut the stop short
        self._report(f"{signal.Signals(signum).name}: stopping the local stack")
        self.stopped.set()
        if self.starting:
            raise StartInterrupted


def run_up(
    options: UpOptions,
    on_ready: Callable[[RunningStack], None],
    report: Callable[[str], None] = lambda line: None,
) -> None:
    """Start everything, report it, and block until SIGINT or SIGTERM; then stop it all,
    telling `report` what it stops as it stops. A signal during the start cuts it short."""
    signals = StartSignals(report)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signals.handle)
    try:
        with _started(options, report) as (stack, api_url, environment):
            signals.starting = False
            on_ready(RunningStack(api_url, environment, options.directory))
            while not signals.stopped.wait(0.5):
                if not all(process.running for process in stack.processes):
                    gone = [p.name for p in stack.processes if not p.running]
                    raise RuntimeError(f"stopped unexpectedly: {gone}")
    except StartInterrupted:
        return


@contextmanager
def _started(
    options: UpOptions, report: Callable[[str], None]
) -> Iterator[tuple[LocalStack, str, dict[str, str]]]:
    """The whole stack, started (and stopped when the block ends, however it ends)."""
    options.directory.mkdir(parents=True, exist_ok=True)
    if options.fresh:
        for path in forget_last_run(options):
            report(f"--fresh: deleted {path}")
    # The broker's messages, the stored orders and the charges survive a restart of
    # `orders up`: each store keeps them under the folder.
    with local_stack(
        QueueOptions(),
        options.directory,
        servicebus_data=options.servicebus_data,
        cosmos_data=options.cosmos_data,
        report=report,
        entities=options.entities,
    ) as stack:
        containers = options.entities.containers if options.entities else []
        asyncio.run(prepare_local_cosmos(stack.settings(), containers))
        stack.start_payments()
        for _ in range(options.workers):
            stack.start_worker()
        stack.start_dispatcher()
        for spec in downstream_consumers():
            stack.start_subscriber(spec.name)
        environment = stack.environment()
        # The console reads the workers' journals and respects the local queue's window.
        console_environment = {
            "ORDERS_DECISIONS_DIR": str(stack.workdir.resolve()),
            "ORDERS_DUPLICATE_WINDOW_SECONDS": str(stack.queue.duplicate_window_seconds),
            "ORDERS_CONSOLE_SUBSCRIPTIONS": ",".join(
                f"{stack.queue.events_topic}/{name}" for name in stack.queue.subscriptions
            ),
        }
        stack.spawn(
            "http-api",
            ["-m", "orders", "serve", "--console",
             "--host", options.api_host, "--port", str(options.api_port),
             *(arg for host in options.allowed_hosts for arg in ("--allow-host", host))],
            env={**environment, **console_environment},
        )  # fmt: skip
        api_url = _wait_for_api(stack, "http-api")
        write_settings(options.directory, environment, api_url, stack.fault_environment())
        if options.entities is not None:
            options.entities_file.write_text(options.entities.to_json())
        yield stack, api_url, environment
