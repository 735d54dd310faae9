"""The CLI when what it needs is not there: one line and exit 2, never a traceback; and help
that shows flags as flags. No servers: closed ports stand for a stopped stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from cli_support import commands
from servers import free_port
from typer.testing import CliRunner

from orders.cli import app
from orders.cli.shared import connection_errors_exit, connection_failure, iso_time
from orders.settings import EMULATOR_COSMOS_KEY

EMULATOR_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
)


def stopped_stack() -> dict[str, str]:
    """Settings of a local stack whose processes are gone: nothing listens on its ports."""
    return {
        "COSMOS_ENDPOINT": f"http://127.0.0.1:{free_port()}/",
        "COSMOS_KEY": EMULATOR_COSMOS_KEY,
        "ServiceBusConnection": f"Endpoint=sb://127.0.0.1:{free_port()};SharedAccessKeyName="
        "RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
    }


@pytest.mark.parametrize(
    ("args", "needed"),
    [
        # The DLQ commands need Service Bus alone, the key commands Cosmos DB alone.
        (["dlq", "list"], "Service Bus"),
        (["dlq", "show", "1"], "Service Bus"),
        (["dlq", "resubmit", "--all"], "Service Bus"),
        (["dlq", "purge", "--all", "--yes"], "Service Bus"),
        (["keys", "show", "k"], "Cosmos DB"),
        (["keys", "evict", "k", "--yes"], "Cosmos DB"),
        # The parked outbox documents are in the orders container.
        (["outbox", "parked"], "Cosmos DB"),
        (["outbox", "redrive", "o-1", "o-1:outbox:OrderAccepted"], "Cosmos DB"),
        (["verify", "--manifest", "run.json"], "Cosmos DB"),
    ],
)
def test_a_stopped_stack_is_one_line_and_exit_2(args: list[str], needed: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orders", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **stopped_stack(), "COLUMNS": "80"},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"cannot reach {needed} at 127.0.0.1:" in result.stderr
    assert "is the local stack running?" in result.stderr and "Traceback" not in result.stderr


def test_orders_env_refuses_settings_of_a_stack_that_stopped(tmp_path: Path) -> None:
    (tmp_path / "env.json").write_text(json.dumps(stopped_stack()))
    result = CliRunner().invoke(app, ["env", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "export" not in result.stdout
    assert "env.json is stale" in result.output


def test_a_connection_lost_mid_command_exits_2_without_a_traceback() -> None:
    class SdkError(Exception):
        """Stands for an SDK's wrapper, which keeps the socket error as its cause."""

    with pytest.raises(typer.Exit) as exited, connection_errors_exit():
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except OSError as exc:
            raise SdkError("Failed to initiate the connection") from exc
    assert exited.value.exit_code == 2


def test_only_network_errors_count_as_unreachable() -> None:
    wrapped = RuntimeError("outer")
    wrapped.inner_exception = TimeoutError("connect")  # type: ignore[attr-defined]
    assert isinstance(connection_failure(wrapped), TimeoutError)
    assert connection_failure(ValueError("a bug")) is None
    with pytest.raises(ValueError), connection_errors_exit():
        raise ValueError("a bug stays a bug, with its traceback")
    # An exit already decided (here after a connection error) is not reported a second time.
    with pytest.raises(typer.Exit) as decided, connection_errors_exit():
        try:
            raise ConnectionRefusedError(111, "refused")
        except OSError as exc:
            raise typer.Exit(1) from exc
    assert decided.value.exit_code == 1


def test_help_shows_flags_without_a_type() -> None:
    every = commands()
    assert ("dlq", "list") in every and ("keys", "show") in every
    for path in every:
        result = CliRunner().invoke(app, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "<bool>" not in result.output, (path, result.output)


def test_times_are_iso_8601_in_utc() -> None:
    assert iso_time(0) == "1970-01-01T00:00:00.000+00:00"
