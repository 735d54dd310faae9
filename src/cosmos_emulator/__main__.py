"""`python -m cosmos_emulator --host 127.0.0.1 --port 8081 [--https] [--data DIR [--fsync]]
[--allowed-host NAME[:PORT]]... [--fault-token TOKEN] [--partition-ranges N]`.

The fault token comes from `--fault-token`, else from COSMOS_EMULATOR_FAULT_TOKEN (better: a
command line is visible to every local user), else it is drawn at random and printed once, on
the line after the ready line."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from .auth import WELL_KNOWN_KEY
from .fault_access import FAULT_TOKEN_ENV, checked_fault_token
from .journal import JournalError
from .ranges import PARTITION_RANGES_ENV, checked_range_count
from .server import serve_forever


def _fault_token(text: str) -> str:
    try:
        return checked_fault_token(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _range_count(text: str) -> int:
    try:
        return checked_range_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cosmos_emulator", description="Pure-Python Cosmos DB for NoSQL emulator."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081, help="0 picks a free port")
    parser.add_argument("--https", action="store_true", help="serve TLS (self-signed)")
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="directory of the journal the account survives in",
    )
    parser.add_argument(
        "--fsync", action="store_true", help="with --data: fsync before each answer (power loss)"
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="also serve requests with this Host (repeatable; NAME alone: any port)",
    )
    parser.add_argument("--key", default=os.environ.get("COSMOS_EMULATOR_KEY", WELL_KNOWN_KEY))
    parser.add_argument(
        "--fault-token",
        type=_fault_token,
        default=os.environ.get(FAULT_TOKEN_ENV) or None,
        metavar="TOKEN",
        help="what /_emulator/faults requests send as `Authorization: Bearer` (default: "
        f"${FAULT_TOKEN_ENV}, else a random one, printed at start)",
    )
    parser.add_argument(
        "--log-requests", action="store_true", help="one line per request on stderr"
    )
    parser.add_argument(
        "--partition-ranges",
        type=_range_count,
        default=os.environ.get(PARTITION_RANGES_ENV) or "1",
        metavar="N",
        help="partition key ranges (physical partitions) each new container gets at least "
        f"(default: ${PARTITION_RANGES_ENV}, else 1; more when its throughput needs them)",
    )
    args = parser.parse_args(argv)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_forever(
            args.host,
            args.port,
            args.https,
            args.data,
            args.key,
            stop,
            args.log_requests,
            fsync=args.fsync,
            allowed_hosts=args.allowed_host,
            fault_token=args.fault_token,
            partition_ranges=args.partition_ranges,
        )

    try:
        asyncio.run(run())
    except (OSError, ValueError, JournalError) as exc:  # busy port, bad host, unusable --data
        print(f"cosmos-emulator: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc


if __name__ == "__main__":
    main()
