"""Soak the local stack: `orders up`, a load every interval, each process's RSS over time.

    .venv/bin/python scripts/soak.py                 # 20 minutes, 500 orders every 30 s
    .venv/bin/python scripts/soak.py --minutes 4 --orders 300

Starts `orders up --fresh` in a directory of its own on a free port, sends `orders load
--status-updates` of `--orders` orders every `--interval` seconds (the next one waits for the
last to finish), and samples the resident set of every process the stack runs. At the end it
stops the stack (SIGINT, as Ctrl-C) and prints, per process: RSS at the end of the warm-up,
at the end and at its peak, and its slope after the warm-up, in MiB per minute and in KB per
order sent (the growth per order is what a longer or bigger load multiplies). Prints numbers,
asserts nothing. Linux only: processes and their memory are read from /proc.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
# Process roles by a word of their command line, most specific first.
ROLES = (
    ("servicebus_emulator", "servicebus emulator"),
    ("cosmos_emulator", "cosmos emulator"),
    ("payments", "payments stand-in"),
    ("dispatcher", "dispatcher"),
    ("--subscription", "subscription worker"),
    ("worker", "orders worker"),
    ("serve", "http api"),
)


@dataclass
class Series:
    """One process's samples: (seconds since start, orders sent by then, RSS bytes)."""

    label: str
    samples: list[tuple[float, int, int]] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _descendants(root: int) -> list[int]:
    """The processes under `root` (children of children included)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _label(pid: int) -> str | None:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    for word, role in ROLES:
        if word in command:
            return f"{role} [{pid}]"
    return None


def _rss(pid: int) -> int | None:
    """Resident set in bytes (None once the process is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of y over x (0 with fewer than two distinct x)."""
    if len({x for x, _ in points}) < 2:
        return 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in points)
    den = sum((x - mean_x) ** 2 for x, _ in points)
    return num / den


def _wait_for_env(directory: Path, deadline_s: float) -> dict[str, str]:
    """The stack's settings once `orders env` prints them (the stack is up)."""
    deadline = time.monotonic() + deadline_s
    while True:
        done = subprocess.run(
            [str(BIN / "orders"), "env", "--dir", str(directory)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0 and "export" in done.stdout:
            env = dict(os.environ)
            for line in done.stdout.splitlines():
                if line.startswith("export ") and "=" in line:
                    name, _, value = line[len("export ") :].partition("=")
                    env[name] = value.strip("'\"")
            return env
        if time.monotonic() > deadline:
            raise SystemExit(f"the stack did not come up: {done.stderr.strip()}")
        time.sleep(1)  # polling the stack's readiness, with a deadline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="how long to load")
    parser.add_argument("--orders", type=int, default=500, help="orders per load")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between loads")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=2.0, help="minutes not in the slope")
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="orders-soak-"))
    command = [str(BIN / "orders"), "up", "--fresh", "--dir", str(directory)]
    up = subprocess.Popen(
        [*command, "--port", str(_free_port())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    series: dict[int, Series] = {}
    sent = [0]
    stop = threading.Event()
    started = time.monotonic()

    def sample() -> None:
        while not stop.is_set():
            for pid in _descendants(up.pid):
                label, rss = _label(pid), _rss(pid)
                if label is not None and rss is not None:
                    entry = series.setdefault(pid, Series(label))
                    entry.samples.append((time.monotonic() - started, sent[0], rss))
            stop.wait(args.sample)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        env = _wait_for_env(directory, 120)
        started = time.monotonic()
        sampler.start()
        end = started + args.minutes * 60
        run = 0
        while time.monotonic() < end:
            began = time.monotonic()
            run += 1
            manifest = directory / f"soak-{run}.json"
            load = [str(BIN / "orders"), "load", "--manifest", str(manifest)]
            subprocess.run(
                [*load, "--orders", str(args.orders), "--status-updates", "--seed", str(run)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            sent[0] += args.orders
            elapsed = time.monotonic() - began
            print(f"{(time.monotonic() - started) / 60:5.1f} min: {sent[0]} orders sent")
            stop.wait(max(0.0, min(args.interval - elapsed, end - time.monotonic())))
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()

    minutes = (time.monotonic() - started) / 60
    print(f"\n{sent[0]} orders in {minutes:.1f} min; RSS in MiB, slope after {args.warmup} min")
    print("| process | after warm-up | end | peak | MiB/min | KB per order |")
    print("|---|---:|---:|---:|---:|---:|")
    mib = 1024 * 1024
    for entry in sorted(series.values(), key=lambda s: s.label):
        warm = [s for s in entry.samples if s[0] >= args.warmup * 60] or entry.samples
        per_minute = _slope([(t / 60, rss) for t, _, rss in warm]) / mib
        per_order = _slope([(float(n), rss) for _, n, rss in warm]) / 1000
        print(
            f"| {entry.label} | {warm[0][2] / mib:.0f} | {entry.samples[-1][2] / mib:.0f} | "
            f"{max(s[2] for s in entry.samples) / mib:.0f} | {per_minute:.2f} | {per_order:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
