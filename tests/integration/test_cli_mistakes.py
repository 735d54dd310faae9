"""Every `orders` command against every operator mistake: one line that names what is wrong,
a non-zero exit, never a traceback.

The matrix is built from the CLI's own list of commands: a new command fails
`test_every_command_is_in_the_matrix` until it says how it is run here and which mistakes it
must report. The services are our emulators (one of each for the module) through the real
SDKs; each mistake is a setting an operator gets wrong.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_support import commands
from servers import free_port
from typer.testing import CliRunner

import orders.cli.shared
from cosmos_emulator import start_in_background as start_cosmos
from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.cli import app
from orders.domain.load_plan import LoadMix, plan_load, plan_to_json
from orders.entrypoints.localstack import QueueOptions
from orders.settings import EMULATOR_COSMOS_KEY, Settings
from servicebus_emulator import start_in_background as start_servicebus
from servicebus_emulator.server import connection_string

COSMOS = frozenset(
    {
        "no database",
        "no container",
        "Cosmos DB unreachable",
        "Cosmos DB host unknown",
        "Cosmos DB endpoint of another service",
        "Cosmos DB key refused",
    }
)
SERVICE_BUS = frozenset(
    {
        "no queue",
        "Service Bus unreachable",
        "Service Bus endpoint of another service",
        "connection string malformed",
    }
)
# A host (worker, dispatcher, API) on an emulator's key creates its database and containers,
# as `orders up` does: a missing one is no mistake there (in Azure it is reported as above).
HOST_COSMOS = COSMOS - {"no database", "no container"}


@dataclass(frozen=True)
class Invocation:
    args: list[str]
    reports: frozenset[str]


MANIFEST = "manifest.json"
# How each command runs in the matrix and the mistakes it must report (the ones that touch what
# it uses); a command that needs none of the settings says why instead.
MATRIX: dict[tuple[str, ...], Invocation | str] = {
    ("worker",): Invocation([], HOST_COSMOS | SERVICE_BUS),
    ("dispatcher",): Invocation([], HOST_COSMOS | (SERVICE_BUS - {"no queue"}) | {"no topic"}),
    ("load",): Invocation(
        ["--manifest", "sent.json", "--orders", "3", "--cancels", "1"], COSMOS | SERVICE_BUS
    ),
    ("verify",): Invocation(["--manifest", MANIFEST, "--no-fanout"], COSMOS | SERVICE_BUS),
    ("serve",): Invocation(["--port", "0"], HOST_COSMOS | SERVICE_BUS),
    ("show",): Invocation(["o-1"], COSMOS | SERVICE_BUS | {"no topic", "no subscription"}),
    ("dlq", "list"): Invocation([], SERVICE_BUS),
    ("dlq", "show"): Invocation(["1"], SERVICE_BUS),
    ("dlq", "resubmit"): Invocation(["--all", "--yes"], SERVICE_BUS),
    ("dlq", "purge"): Invocation(["--all", "--yes"], SERVICE_BUS),
    ("keys", "show"): Invocation(["k"], COSMOS),
    ("keys", "evict"): Invocation(["k", "--yes"], COSMOS),
    ("outbox", "parked"): Invocation([], COSMOS),
    ("outbox", "redrive"): Invocation(["o-1", "o-1:outbox:OrderAccepted"], COSMOS),
    ("up",): "starts its own emulators on free ports: no settings to get wrong",
    ("demo",): "starts its own emulators on free ports: no settings to get wrong",
    ("payments",): "serves the payment stand-in: neither Cosmos DB nor Service Bus",
    (
        "env",
    ): "reads `orders up`'s env.json, not the settings (its stale file: test_cli_unreachable)",
}


@dataclass(frozen=True)
class Stack:
    env: dict[str, str]
    cosmos_port: int
    servicebus_port: int


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """Both emulators, in this process, with the app's entities and containers."""
    queue = QueueOptions()
    servicebus = start_servicebus(config=queue.config())
    cosmos = start_cosmos()
    env = {
        "COSMOS_ENDPOINT": cosmos.url,
        "COSMOS_KEY": cosmos.key,
        "ServiceBusConnection": servicebus.connection_string,
        "ORDERS_DUPLICATE_WINDOW_SECONDS": str(queue.duplicate_window_seconds),
        "PAYMENTS_URL": f"http://127.0.0.1:{free_port()}",
    }
    asyncio.run(prepare_local_cosmos(Settings.from_env(env)))
    try:
        yield Stack(env, cosmos.port, servicebus.port)
    finally:
        cosmos.stop()
        servicebus.stop()


def mistakes(stack: Stack) -> dict[str, tuple[dict[str, str], str]]:
    """Each mistake: the settings it changes, and what the one line must name."""
    closed = free_port()
    return {
        "no database": ({"COSMOS_DATABASE": "nodb-orders"}, "nodb-orders"),
        "no container": (
            {
                name: f"noc-{name.lower()}"
                for name in (
                    "COSMOS_CONTAINER",
                    "COSMOS_IDEMPOTENCY_CONTAINER",
                    "COSMOS_INBOX_CONTAINER",
                    "COSMOS_LEASES_CONTAINER",
                )
            },
            "container 'noc-",
        ),
        "Cosmos DB unreachable": (
            {"COSMOS_ENDPOINT": f"http://127.0.0.1:{closed}/"},
            f"127.0.0.1:{closed}",
        ),
        "Cosmos DB host unknown": (
            {"COSMOS_ENDPOINT": "http://no-such-host.invalid:8081/"},
            "no-such-host.invalid",
        ),
        "Cosmos DB endpoint of another service": (
            {"COSMOS_ENDPOINT": f"http://127.0.0.1:{stack.servicebus_port}/"},
            "does not answer as Cosmos DB",
        ),
        "Cosmos DB key refused": (
            {"COSMOS_KEY": EMULATOR_COSMOS_KEY[::-1].replace("=", "") + "=="},
            "COSMOS_KEY",
        ),
        "no queue": ({"ORDERS_QUEUE": "noq-orders", "STATUS_QUEUE": "noq-status"}, "queue 'noq-"),
        "no topic": ({"ORDER_EVENTS_TOPIC": "not-events"}, "'not-events'"),
        "no subscription": (
            {"BILLING_SUBSCRIPTION": "nos-billing", "SHIPPING_SUBSCRIPTION": "nos-shipping"},
            "subscription 'nos-",
        ),
        "Service Bus unreachable": (
            {"ServiceBusConnection": connection_string("127.0.0.1", closed)},
            f"127.0.0.1:{closed}",
        ),
        "Service Bus endpoint of another service": (
            {"ServiceBusConnection": connection_string("127.0.0.1", stack.cosmos_port)},
            "does not answer as Service Bus",
        ),
        "connection string malformed": (
            {"ServiceBusConnection": "Endpoint=;SharedAccessKey"},
            "ServiceBusConnection",
        ),
    }


def every_mistake() -> frozenset[str]:
    return COSMOS | SERVICE_BUS | {"no topic", "no subscription"}


def test_every_command_is_in_the_matrix() -> None:
    assert sorted(commands()) == sorted(MATRIX), "say how a new command runs here"
    named = {m for entry in MATRIX.values() if isinstance(entry, Invocation) for m in entry.reports}
    assert named == every_mistake()


CASES = [
    (path, mistake)
    for path, entry in MATRIX.items()
    if isinstance(entry, Invocation)
    for mistake in sorted(entry.reports)
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mistakes")
    plan = plan_load(3, LoadMix(), seed=1, run_id="mistake")
    manifest = plan_to_json(plan, queue="orders", duplicate_window_seconds=5)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def run_cli(
    stack: Stack, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[list[str], dict[str, str]], Any]:
    # An HTTP server named as the namespace never answers AMQP's header: not worth 3 s a case.
    monkeypatch.setattr(orders.cli.shared, "PROTOCOL_TIMEOUT_SECONDS", 0.5)
    monkeypatch.chdir(workdir)

    def run(args: list[str], changed: dict[str, str]) -> Any:
        return CliRunner().invoke(app, args, env={**stack.env, **changed})

    return run


@pytest.mark.parametrize(("path", "mistake"), CASES, ids=[f"{' '.join(p)}: {m}" for p, m in CASES])
def test_a_mistake_is_one_line_and_a_non_zero_exit(
    path: tuple[str, ...],
    mistake: str,
    stack: Stack,
    run_cli: Callable[[list[str], dict[str, str]], Any],
) -> None:
    entry = MATRIX[path]
    assert isinstance(entry, Invocation)
    changed, named = mistakes(stack)[mistake]
    result = run_cli([*path, *entry.args], changed)
    # A traceback is an exception the command let out (typer prints it, rich and all).
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert named in lines[0], lines[0]
