"""What refusing each poison message costs (prints numbers, asserts nothing).

For every case of the poison corpus (tests/poison_corpus.py), the CPU time of the consumer's
whole decision (`parse_received_order`: decode, bound, validate) in microseconds: the median
and the worst of `--repeat` runs, sorted worst first. The goal is "a few milliseconds at most"
for every case; the worst line says how far from it we are.

    python scripts/bench_poison.py [--repeat 50]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from poison_corpus import poison_cases

from orders.domain.messages import MessageRejected, parse_received_order
from orders.domain.received import ReceivedOrderMessage


def cost_of(message: ReceivedOrderMessage, repeat: int) -> tuple[list[float], str]:
    samples: list[float] = []
    reason = "accepted"
    for _ in range(repeat):
        started = time.process_time()
        try:
            parse_received_order(message)
        except MessageRejected as rejection:
            reason = rejection.reason.value
        samples.append((time.process_time() - started) * 1e6)
    return samples, reason


def machine() -> str:
    """What the numbers were measured on: they move with the CPU and with what else runs."""
    cpuinfo = Path("/proc/cpuinfo")
    models = [
        line.split(":", 1)[1].strip()
        for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
        if line.startswith("model name")
    ]
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    model = models[0] if models else platform.processor() or platform.machine()
    return f"machine: {model}, {os.cpu_count()} cores, load average {load}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    rows = []
    for case in poison_cases("bench"):
        message = ReceivedOrderMessage(case.body, case.message_id, body_kind=case.body_kind)
        samples, reason = cost_of(message, args.repeat)
        rows.append((max(samples), statistics.median(samples), case.name, len(case.body), reason))
    rows.sort(reverse=True)
    print(machine())
    print(f"{'case':34} {'bytes':>8} {'reason':18} {'median us':>10} {'worst us':>10}")
    for worst, median, name, size, reason in rows:
        print(f"{name:34} {size:8d} {reason:18} {median:10.0f} {worst:10.0f}")
    print(f"{len(rows)} cases; worst median {max(r[1] for r in rows):.0f} us")


if __name__ == "__main__":
    main()
