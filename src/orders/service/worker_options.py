"""How a competing-consumer worker runs: the core's options, under the name the app's hosts
(the CLI, the worker entrypoint, the tests) have always imported."""

from __future__ import annotations

from exactly_once.worker import WorkerOptions as WorkerOptions
