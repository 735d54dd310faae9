"""How long an azure-servicebus receiver takes to open and close (prints numbers only).

Against our emulator and against the least possible AMQP peer (`tests/servicebus_emulator/
sb_minimal_peer.py`, which answers every frame at once), with the sync and the aio SDK, with
the SDK's defaults and with `prefetch_count=1, keep_alive=0` on the receiver (which removes
the SDK's keep-alive loop, see the emulator README). Medians of N receivers, each on
its own connection, opened and closed one after the other in this process.

    python scripts/bench_receiver_open.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from servicebus_emulator import start_in_background

QUEUE = "orders"
PEER_MODULE = Path(__file__).resolve().parents[1] / "tests/servicebus_emulator/sb_minimal_peer.py"
DEFAULTS: dict[str, Any] = {}
# `keep_alive` is a receiver keyword the SDK's configuration reads but does not document; with
# prefetch 0 the SDK forces a 5 s keep-alive, so both are needed to stop its keep-alive loop.
NO_KEEP_ALIVE: dict[str, Any] = {"prefetch_count": 1, "keep_alive": 0}


def _load_minimal_peer() -> Any:
    spec = importlib.util.spec_from_file_location("sb_minimal_peer", PEER_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MinimalPeer


def time_sync(
    connection_string: str, options: dict[str, Any], repeat: int
) -> list[tuple[float, float]]:
    times: list[tuple[float, float]] = []
    with ServiceBusClient.from_connection_string(connection_string) as client:
        for _ in range(repeat):
            receiver = client.get_queue_receiver(QUEUE, **options)
            started = time.perf_counter()
            receiver.__enter__()
            opened = time.perf_counter()
            receiver.__exit__(None, None, None)
            times.append((opened - started, time.perf_counter() - opened))
    return times


def time_aio(
    connection_string: str, options: dict[str, Any], repeat: int
) -> list[tuple[float, float]]:

    async def run() -> list[tuple[float, float]]:
        times: list[tuple[float, float]] = []
        async with AsyncServiceBusClient.from_connection_string(connection_string) as client:
            for _ in range(repeat):
                receiver = client.get_queue_receiver(QUEUE, **options)
                started = time.perf_counter()
                await receiver.__aenter__()
                opened = time.perf_counter()
                await receiver.__aexit__(None, None, None)
                times.append((opened - started, time.perf_counter() - opened))
        return times

    return asyncio.run(run())


Timer = Callable[[str, dict[str, Any], int], list[tuple[float, float]]]
SCENARIOS: list[tuple[str, Timer, dict[str, Any]]] = [
    ("sync, SDK defaults", time_sync, DEFAULTS),
    ("sync, prefetch 1, keep_alive=0", time_sync, NO_KEEP_ALIVE),
    ("aio, SDK defaults", time_aio, DEFAULTS),
    ("aio, prefetch 1, keep_alive=0", time_aio, NO_KEEP_ALIVE),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="receivers per scenario")
    args = parser.parse_args()
    minimal_peer = _load_minimal_peer()
    print(f"median of {args.repeat} receivers, ms")
    print(f"| {'Peer':<13} | {'Client':<34} | {'open':>6} | {'close':>6} | {'total':>6} |")
    print(f"|{'-' * 15}|{'-' * 36}|{'-' * 7}:|{'-' * 7}:|{'-' * 7}:|")
    with start_in_background() as emulator, minimal_peer() as peer:
        for peer_name, connection_string in (
            ("emulator", emulator.connection_string),
            ("minimal peer", peer.connection_string),
        ):
            for scenario, timer, options in SCENARIOS:
                times = timer(connection_string, options, args.repeat)
                opens = statistics.median(t[0] for t in times) * 1000
                closes = statistics.median(t[1] for t in times) * 1000
                totals = statistics.median((t[0] + t[1]) for t in times) * 1000
                print(
                    f"| {peer_name:<13} | {scenario:<34} | {opens:6.0f} | {closes:6.0f} "
                    f"| {totals:6.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
