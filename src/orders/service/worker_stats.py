"""What a competing-consumer worker counts while it runs: the core's stats, under the name the
app's hosts have always imported."""

from __future__ import annotations

from exactly_once.worker import WorkerStats as WorkerStats
