"""The workers' decision journals (`orders worker --decisions`) in one folder, read as they
grow: each call reads only what was appended since the last one, a bounded amount per file."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orders.domain.decision_counters import DEFAULT_CONSUMER, MAX_LINE_BYTES, DecisionCounters

JOURNAL_GLOB = "*.decisions.jsonl"
MAX_FILES = 64
# Per file and call: a huge journal is caught up with over several polls, never at once.
MAX_READ_BYTES = 1024 * 1024


def consumer_of(path: Path) -> str:
    """`billing-2.decisions.jsonl` -> billing; the orders workers' `worker-1` -> orders."""
    name = path.name.removesuffix(JOURNAL_GLOB.removeprefix("*")).rsplit("-", 1)[0][:40]
    return DEFAULT_CONSUMER if name in ("", "worker") else name


class JournalFolder:
    """`DecisionFeed` over the journals in one folder (local runs: `orders up` writes them)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self._counters = DecisionCounters()
        self._lock = asyncio.Lock()

    async def counters(self) -> DecisionCounters:
        async with self._lock:
            await asyncio.to_thread(self._read_new)
        return self._counters

    def _read_new(self) -> None:
        paths = sorted(self._folder.glob(JOURNAL_GLOB))[:MAX_FILES]
        for path in paths:
            try:
                with path.open("rb") as journal:
                    journal.seek(self._offsets.get(path, 0))
                    chunk = journal.read(MAX_READ_BYTES)
            except OSError:
                continue  # removed or unreadable meanwhile: try again next time
            self._offsets[path] = self._offsets.get(path, 0) + len(chunk)
            *lines, rest = (self._partial.pop(path, b"") + chunk).split(b"\n")
            consumer = consumer_of(path)
            for line in lines:
                self._counters.add_line(line, consumer)
            if len(rest) > MAX_LINE_BYTES:
                self._counters.skipped_lines += 1  # an endless line: drop it, keep reading
            elif rest:
                self._partial[path] = rest
