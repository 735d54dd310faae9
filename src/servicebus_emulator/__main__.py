"""`python -m servicebus_emulator --host 127.0.0.1 --port 5672 --config FILE`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .config import ConfigError
from .connection import DEFAULT_MAX_CONNECTIONS
from .journal import JournalError
from .server import EmulatorServer


async def _serve(args: argparse.Namespace) -> None:
    server = await EmulatorServer.start(
        args.config,
        host=args.host,
        port=args.port,
        data_dir=args.data,
        fsync=args.fsync,
        max_connections=args.max_connections,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"servicebus-emulator listening on {server.host}:{server.port}", flush=True)
    await stop.wait()
    await server.close()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m servicebus_emulator", description="Pure-Python Azure Service Bus emulator"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5672, help="0 picks a free port")
    parser.add_argument(
        "--config", default=None, help="official emulator Config.json (default: one 'orders' queue)"
    )
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="keep messages in a journal in DIR across restarts (default: in memory only)",
    )
    parser.add_argument(
        "--fsync",
        action="store_true",
        help="with --data: fsync each journal write (survives a machine crash, not only a "
        "killed emulator; slower)",
    )
    parser.add_argument(
        "--max-connections",
        type=_positive,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help=f"refuse AMQP connections beyond N open at once (default {DEFAULT_MAX_CONNECTIONS}; "
        "the official emulator allows 10)",
    )
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        asyncio.run(_serve(args))
    except ConfigError as exc:
        print(f"servicebus-emulator: configuration error: {exc}", file=sys.stderr, flush=True)
        return 2
    except JournalError as exc:
        print(f"servicebus-emulator: data error: {exc}", file=sys.stderr, flush=True)
        return 2
    except OSError as exc:
        print(f"servicebus-emulator: cannot listen: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
