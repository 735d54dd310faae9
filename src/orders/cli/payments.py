"""`orders payments`: the payment service stand-in as a child process.

The stand-in is a separate package that `orders` never imports (an import-linter contract); it
runs as `python -m payments_standin`, exactly as a third-party service would run beside the app.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from orders.cli.shared import err

READY_PREFIX = "payments-standin listening on "
# Where the stand-in reads the token its fault switches (`/faults`) need.
FAULT_TOKEN_ENV = "PAYMENTS_STANDIN_FAULT_TOKEN"
# Where it reads the token its money routes need; the app sends the same as PAYMENTS_TOKEN.
MONEY_TOKEN_ENV = "PAYMENTS_STANDIN_TOKEN"
APP_TOKEN_SETTING = "PAYMENTS_TOKEN"


def payments(
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0 picks a free one)")] = 8090,
    data: Annotated[
        Path | None,
        typer.Option(help="Directory of its SQLite ledger (durable); default: in memory"),
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(help='A fault rule as JSON, e.g. {"kind": "refuse", "count": 2}; repeatable'),
    ] = None,
    fault_token: Annotated[
        str | None,
        typer.Option(
            envvar=FAULT_TOKEN_ENV,
            help="What POST/GET/DELETE /faults must send as `Authorization: Bearer` "
            "(default: a random one, printed at start)",
        ),
    ] = None,
    payments_token: Annotated[
        str | None,
        typer.Option(
            envvar=APP_TOKEN_SETTING,
            help="What POST /payments and POST /refunds must send as `Authorization: Bearer`, "
            "the app's PAYMENTS_TOKEN (default: a random one, printed at start)",
        ),
    ] = None,
) -> None:
    """Serve the payment service stand-in (POST /payments with Idempotency-Key) until Ctrl-C."""
    token = fault_token or secrets.token_urlsafe(32)
    money_token = payments_token or secrets.token_urlsafe(32)
    command = [sys.executable, "-m", "payments_standin", "--host", host, "--port", str(port)]
    if data is not None:
        command += ["--data", str(data)]
    for rule in fault or []:
        command += ["--fault", rule]
    # In the child's environment, not on its command line, which every local user can read.
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, FAULT_TOKEN_ENV: token, MONEY_TOKEN_ENV: money_token},
    )

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line.startswith(READY_PREFIX):
        code = child.wait()
        err.print(f"[red]the payment stand-in did not start[/red] (exit {code})")
        raise typer.Exit(code or 2)
    address = line.removeprefix(READY_PREFIX)
    print(f"payments service listening on http://{address}", flush=True)
    shown_token = "" if payments_token else f" {APP_TOKEN_SETTING}={money_token}"
    err.print(
        f"PAYMENTS_URL=http://{address}{shown_token} points the app at it; Ctrl-C stops it.",
        highlight=False,
        soft_wrap=True,
    )
    if fault_token is None:  # drawn here: the operator learns it only from this line
        err.print(
            f"{FAULT_TOKEN_ENV}={token} opens its fault switches (/faults, as "
            "`Authorization: Bearer`)",
            highlight=False,
            soft_wrap=True,
        )
    raise typer.Exit(child.wait())
