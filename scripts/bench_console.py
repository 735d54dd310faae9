"""The operations console's page load times on the demo's data (prints numbers only).

Starts `orders up` in a scratch folder, sends the demo's load (`orders demo`'s plan: orders
with duplicates, poison and reused ids, versioned status updates), waits until every order has
settled, then loads each console page 1 + R times, one request at a time, and prints the
first load, and the median and the slowest of the rest, per page in milliseconds. The target
is under 300 ms per page.

    python scripts/bench_console.py [--orders 300] [--repeats 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode

import httpx

from orders.domain.load_plan import LoadMix, plan_load
from orders.entrypoints.runs import send_load, verify_run
from orders.entrypoints.up import ENV_FILE
from orders.service.registry import CONSUMERS
from orders.settings import Settings

READY_TIMEOUT_SECONDS = 180.0
SETTLE_TIMEOUT_SECONDS = 300.0
POLL_SECONDS = 0.5


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_up(directory: Path, port: int) -> subprocess.Popen[bytes]:
    log = directory.parent / "up.log"
    with log.open("wb") as output:
        up = subprocess.Popen(
            [sys.executable, "-m", "orders", "up", "--port", str(port), "--dir", str(directory)],
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while "ready" not in log.read_text():
        if up.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"orders up did not start:\n{log.read_text()[-2000:]}")
        time.sleep(POLL_SECONDS)  # polling its output for the ready line, bounded above
    return up


async def load_demo_data(settings: Settings, orders: int) -> str:
    """The demo's plan, sent and settled; returns one stored order's id."""
    plan = plan_load(
        orders,
        LoadMix(),
        seed=7,
        run_id=f"bench{uuid.uuid4().hex[:6]}",
        status_updates=True,
        reorder=True,
    )
    await send_load(settings, plan, duplicate_window_seconds=5)
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        report = await verify_run(settings, plan)
        if report.ok:
            break
        await asyncio.sleep(POLL_SECONDS)
    else:
        raise TimeoutError("the demo's load did not settle")
    return next(s.order_id for s in plan.sends if s.order_id and s.expected_reason is None)


def pages(order_id: str, sources: list[str]) -> dict[str, str]:
    found = {
        "overview": "/console",
        "counters page": "/console/counters",
        "counters JSON": "/console/api/counters",
        "order": "/console/orders?" + urlencode({"orderId": order_id}),
    }
    for source in sources:
        found[f"dead letters {source}"] = "/console/dead-letters?" + urlencode({"source": source})
    return found


def measure(api: str, paths: dict[str, str], repeats: int) -> None:
    """The first load of each page apart (the console's first page builds its clients and
    opens its peek receivers, which later pages reuse), then the median and slowest of the
    next `repeats`."""
    print(f"{'page':<48} {'first ms':>9} {'median ms':>10} {'max ms':>8}")
    with httpx.Client(base_url=api, timeout=60) as client:
        for name, path in paths.items():
            took = []
            for _ in range(repeats + 1):
                started = time.perf_counter()
                client.get(path).raise_for_status()
                took.append((time.perf_counter() - started) * 1000)
            first, rest = took[0], took[1:]
            print(f"{name:<48} {first:>9.0f} {statistics.median(rest):>10.0f} {max(rest):>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=300, help="the demo's default")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-console-") as scratch:
        directory, port = Path(scratch) / "local", free_port()
        up = start_up(directory, port)
        try:
            environment = json.loads((directory / ENV_FILE).read_text())
            settings = Settings.from_env(environment)
            order_id = asyncio.run(load_demo_data(settings, args.orders))
            # The registry's queues first (the orders queue first of all), as the console lists.
            sources = [
                str(spec.source(settings))
                for spec in sorted(CONSUMERS, key=lambda spec: spec.on_topic)
            ]
            print(f"{args.orders} orders settled; {args.repeats} loads per page, one at a time")
            measure(environment["ORDERS_API_URL"], pages(order_id, sources), args.repeats)
        finally:
            os.kill(up.pid, signal.SIGINT)
            up.wait(timeout=120)


if __name__ == "__main__":
    main()
