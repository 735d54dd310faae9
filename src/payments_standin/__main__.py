"""`python -m payments_standin --host 127.0.0.1 --port 0 [--data DIR] [--fault JSON]...
[--allowed-host NAME[:PORT]]... [--fault-token TOKEN] [--token TOKEN]`.

The fault token comes from `--fault-token`, else from PAYMENTS_STANDIN_FAULT_TOKEN (better: a
command line is visible to every local user), else it is drawn at random and printed once, on
the line after the ready line. The money routes' token (`POST /payments`, `POST /refunds`) comes
the same way from `--token` or PAYMENTS_STANDIN_TOKEN."""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import sys
import threading
from pathlib import Path

from .fault_access import FAULT_TOKEN_ENV, MONEY_TOKEN_ENV, checked_fault_token, checked_money_token
from .faults import FaultRule, fault_rule_from
from .standin import PaymentStandin
from .validation import InvalidInput, json_body


def _fault(text: str) -> FaultRule:
    try:
        return fault_rule_from(json_body(text.encode("utf-8", "surrogateescape")))
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fault_token(text: str) -> str:
    try:
        return checked_fault_token(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _money_token(text: str) -> str:
    try:
        return checked_money_token(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m payments_standin",
        description="A local payment provider that honours Idempotency-Key.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=_port, default=8090, help="0 picks a free port")
    parser.add_argument(
        "--data", type=Path, default=None, help="directory of the SQLite ledger (default: memory)"
    )
    parser.add_argument(
        "--fault",
        type=_fault,
        action="append",
        default=[],
        help='a fault rule as JSON, as POST /faults takes it: {"kind": "refuse", "count": 2}',
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="also serve requests whose Host is this (default port: the bound one); the bound "
        "address, localhost and 127.0.0.1 are always served",
    )
    parser.add_argument(
        "--fault-token",
        type=_fault_token,
        default=os.environ.get(FAULT_TOKEN_ENV) or None,
        metavar="TOKEN",
        help="what /faults requests send as `Authorization: Bearer` (default: "
        f"${FAULT_TOKEN_ENV}, else a random one, printed at start)",
    )
    parser.add_argument(
        "--token",
        type=_money_token,
        default=os.environ.get(MONEY_TOKEN_ENV) or None,
        metavar="TOKEN",
        help="what POST /payments and POST /refunds send as `Authorization: Bearer` (default: "
        f"${MONEY_TOKEN_ENV}, else a random one, printed at start)",
    )
    parser.add_argument(
        "--log-requests", action="store_true", help="one line per request on stderr"
    )
    args = parser.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        standin = PaymentStandin(
            args.host,
            args.port,
            args.data,
            faults=args.fault,
            log_requests=args.log_requests,
            allowed_hosts=args.allowed_host,
            fault_token=args.fault_token,
            money_token=args.token,
        )
    except (OSError, ValueError, sqlite3.Error) as exc:  # busy port, unusable data directory
        print(f"payments-standin: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    standin.start()
    print(f"payments-standin listening on {standin.host}:{standin.port}", flush=True)
    if args.fault_token is None:  # drawn here: whoever started it has no other way to know it
        print(f"payments-standin fault token: {standin.fault_token}", flush=True)
    if args.token is None:
        print(f"payments-standin payments token: {standin.money_token}", flush=True)
    stop.wait()
    standin.stop()


if __name__ == "__main__":
    main()
