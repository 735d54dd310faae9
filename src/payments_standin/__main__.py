"""`python -m payments_standin --host 127.0.0.1 --port 0 [--data DIR] [--fault JSON]...
[--allowed-host NAME[:PORT]]...`."""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
import threading
from pathlib import Path

from .faults import FaultRule, fault_rule_from
from .standin import PaymentStandin
from .validation import InvalidInput, json_body


def _fault(text: str) -> FaultRule:
    try:
        return fault_rule_from(json_body(text.encode("utf-8", "surrogateescape")))
    except InvalidInput as exc:
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
        )
    except (OSError, ValueError, sqlite3.Error) as exc:  # busy port, unusable data directory
        print(f"payments-standin: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    standin.start()
    print(f"payments-standin listening on {standin.host}:{standin.port}", flush=True)
    stop.wait()
    standin.stop()


if __name__ == "__main__":
    main()
