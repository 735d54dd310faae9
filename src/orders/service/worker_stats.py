"""What a competing-consumer worker counts while it runs: plain data for every host."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WorkerStats:
    received: int = 0
    settled: int = 0
    settlement_failures: int = 0
