"""kill -9 under SDK load: after a restart on the same `--data`, nothing acknowledged is lost.

Four writer threads (each with its own SDK client and its own ids) create items, create pairs in
transactional batches, delete some of what they created and upsert a counter document, while
the emulator process is killed with SIGKILL. Each writer has at most one request in flight, so
every acknowledged write must be there exactly as acknowledged (the in-flight one may or may
not have landed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey

from cosmos_emulator import WELL_KNOWN_KEY

SRC = Path(__file__).resolve().parents[2] / "src"
WRITERS = 4
ACKS_BEFORE_KILL = 300


def _launch(data: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cosmos_emulator", "--port", "0", "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    url = line.removeprefix("cosmos-emulator listening on ")
    assert url != line, line
    return proc, url


@dataclass
class Acknowledged:
    """What the emulator answered as done, per writer (only that writer writes these ids)."""

    etags: dict[str, str] = field(default_factory=dict)  # id -> etag of the acknowledged write
    deleted: set[str] = field(default_factory=set)
    counter: tuple[int, str] | None = None  # (value, etag) of the last acknowledged upsert
    deleting: str | None = None  # the id of a delete sent and not yet answered
    count: int = 0


def _write(
    container: ContainerProxy, writer: int, acks: Acknowledged, stop: threading.Event
) -> None:
    pk = f"w{writer}"
    step = 0
    try:
        while not stop.is_set():
            step += 1
            if step % 4 == 0:
                results = container.execute_item_batch(
                    [
                        ("create", ({"id": f"{pk}-b{step}a", "pk": pk},)),
                        ("create", ({"id": f"{pk}-b{step}b", "pk": pk},)),
                    ],
                    partition_key=pk,
                )
                for result in results:
                    body = result["resourceBody"]
                    acks.etags[body["id"]] = body["_etag"]
            elif step % 4 == 1:
                doc = container.upsert_item({"id": f"{pk}-counter", "pk": pk, "n": step})
                acks.counter = (step, doc["_etag"])
            elif step % 4 == 2 and step > 3:
                victim = f"{pk}-c{step - 3}"  # created (and acknowledged) three steps ago
                acks.deleting = victim
                container.delete_item(victim, pk)
                acks.etags.pop(victim)
                acks.deleted.add(victim)
                acks.deleting = None
            else:
                doc = container.create_item({"id": f"{pk}-c{step}", "pk": pk})
                acks.etags[doc["id"]] = doc["_etag"]
            acks.count += 1
    except Exception:  # the emulator was killed under this request: it was never acknowledged
        return


def test_kill_9_under_sdk_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, url = _launch(data)
    try:
        setup = CosmosClient(url, WELL_KNOWN_KEY)
        setup.create_database("d").create_container("c", PartitionKey("/pk"))
        acks = [Acknowledged() for _ in range(WRITERS)]
        stop = threading.Event()
        threads = []
        for writer in range(WRITERS):
            # No retries: a request cut off by the kill fails at once instead of retrying.
            client = CosmosClient(url, WELL_KNOWN_KEY, retry_total=0, connection_timeout=5)
            container = client.get_database_client("d").get_container_client("c")
            thread = threading.Thread(target=_write, args=(container, writer, acks[writer], stop))
            thread.start()
            threads.append(thread)
        deadline = time.monotonic() + 60
        while sum(a.count for a in acks) < ACKS_BEFORE_KILL:
            assert time.monotonic() < deadline, "the writers made no progress"
            assert all(t.is_alive() for t in threads), "a writer failed before the kill"
            time.sleep(0.01)  # polling the writers' progress, bounded by the deadline
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
            assert not thread.is_alive()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()

    proc, url = _launch(data)
    try:
        container = (
            CosmosClient(url, WELL_KNOWN_KEY).get_database_client("d").get_container_client("c")
        )
        for writer, acked in enumerate(acks):
            stored: dict[str, Any] = {
                d["id"]: d
                for d in container.query_items("SELECT * FROM c", partition_key=f"w{writer}")
            }
            for item_id, etag in acked.etags.items():
                if item_id == acked.deleting and item_id not in stored:
                    continue  # the delete in flight at the kill landed, unanswered
                assert stored[item_id]["_etag"] == etag, item_id
            assert not acked.deleted & stored.keys()
            assert acked.counter is not None
            counter = stored[f"w{writer}-counter"]
            value, etag = acked.counter
            # The in-flight upsert may have landed after the last acknowledged one.
            assert counter["n"] > value or counter["_etag"] == etag
        assert sum(a.count for a in acks) >= ACKS_BEFORE_KILL
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert proc.stdout is not None
        proc.stdout.close()
