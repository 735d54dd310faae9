"""A full disk under `--data`, through the real SDK: the emulator stays in service.

Reads go on (point reads, queries, the change feed, metadata). A write that cannot be made
durable is refused with a 503 whose message names the disk, and leaves no trace: not in memory,
not a torn line in the journal. A compaction that runs out of space leaves no temporary file
behind. Once space comes back, writes work again without a restart, and a restart on the full
disk serves every acknowledged write.

The disk is a real one: a tmpfs of a few hundred KiB mounted for the test, so the errors come
from the kernel, not from a stand-in (mounting needs root: CI runs as root; elsewhere the tests
skip and say why).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey
from azure.cosmos.exceptions import CosmosHttpResponseError, CosmosResourceNotFoundError
from servers import small_tmpfs

from cosmos_emulator import WELL_KNOWN_KEY, start_in_background
from cosmos_emulator import journal as journal_module
from cosmos_emulator.journal import JOURNAL_NAME

SRC = Path(__file__).resolve().parents[2] / "src"
DISK_BYTES = 512 * 1024
PAD = "x" * 1000  # an item of about 1 KB: a journal line of about 1.2 KB


@dataclass
class SmallDisk:
    """A mounted tmpfs: `fill()` takes its free space, `free()` gives it back."""

    root: Path

    @property
    def filler(self) -> Path:
        return self.root / "filler"

    def fill(self, leave: int = 0) -> None:
        """Take every free byte, then give back about `leave` bytes (tmpfs frees whole pages)."""
        chunk = b"\0" * 65536
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while True:
                try:
                    os.write(fd, chunk)  # a short write first, then ENOSPC
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        finally:
            os.close(fd)
        assert self.free_bytes() == 0
        if leave:
            os.truncate(self.filler, self.filler.stat().st_size - leave)

    def free(self) -> None:
        self.filler.unlink()

    def free_bytes(self) -> int:
        stats = os.statvfs(self.root)
        return stats.f_bavail * stats.f_frsize


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_tmpfs(tmp_path / "disk", DISK_BYTES) as root:
        yield SmallDisk(root)


def _items(container: ContainerProxy) -> dict[str, dict[str, Any]]:
    return {
        doc["id"]: doc
        for doc in container.query_items("SELECT * FROM c", enable_cross_partition_query=True)
    }


def _latest_in_feed(container: ContainerProxy) -> dict[str, str]:
    """Each item's id and the `_etag` of its latest version in the change feed."""
    return {
        doc["id"]: doc["_etag"] for doc in container.query_items_change_feed(start_time="Beginning")
    }


def _assert_refused_for_the_disk(exc: CosmosHttpResponseError, data: Path) -> None:
    assert exc.status_code == 503
    assert "No space left on device" in str(exc)
    assert str(data) in str(exc)  # the message names the disk that is full


def test_a_full_disk_during_compaction_refuses_writes_and_keeps_serving_reads(
    small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Compaction is due a few writes after the disk fills up, and its snapshot (about 35 KB)
    # does not fit in the 12 KiB left. In-process, so that compaction comes at 40 KB rather
    # than 16 MB; the restart test below runs the emulator as a process of its own.
    monkeypatch.setattr(journal_module, "COMPACT_MIN_BYTES", 40_000)
    data = small_disk.root / "data"
    journal = data / JOURNAL_NAME
    with start_in_background(data_dir=data) as emu:
        core_journal = emu._core.journal
        assert core_journal is not None
        client = CosmosClient(emu.url, emu.key)
        container = client.create_database("d").create_container("c", PartitionKey("/pk"))
        acknowledged = {}
        for i in range(25):
            doc = container.create_item({"id": f"i{i}", "pk": "a", "pad": PAD})
            acknowledged[doc["id"]] = doc
        assert core_journal.compactions == 1  # at start only: the next one is still to come
        small_disk.fill(leave=12 * 1024)

        refused: CosmosHttpResponseError | None = None
        for n in range(100):
            size_before = journal.stat().st_size
            try:
                doc = container.upsert_item({"id": f"i{n % 25}", "pk": "a", "pad": PAD, "n": n})
            except CosmosHttpResponseError as exc:
                refused = exc
                break
            acknowledged[doc["id"]] = doc
        assert refused is not None, "the disk never filled up"
        _assert_refused_for_the_disk(refused, data)
        assert journal.stat().st_size == size_before  # no torn line left behind
        assert journal.stat().st_size > 40_000  # compaction was due ...
        assert core_journal.compactions == 1  # ... and failed
        assert not list(data.glob("*.compacting"))

        # Reads: point reads, queries, the change feed, metadata.
        for item_id, doc in acknowledged.items():
            assert container.read_item(item_id, "a") == doc
        assert _items(container) == acknowledged
        assert _latest_in_feed(container) == {k: v["_etag"] for k, v in acknowledged.items()}
        assert [db["id"] for db in client.list_databases()] == ["d"]
        assert container.read()["id"] == "c"

        # A write too large for what is left is refused the same way and leaves nothing
        # behind, all of a batch included. (A small one may still fit the journal's last page.)
        with pytest.raises(CosmosHttpResponseError) as created:
            container.create_item({"id": "new", "pk": "a", "pad": PAD * 20})
        _assert_refused_for_the_disk(created.value, data)
        with pytest.raises(CosmosHttpResponseError) as batch:
            container.execute_item_batch(
                [("delete", ("i0",)), ("create", ({"id": "b1", "pk": "a", "pad": PAD * 20},))],
                partition_key="a",
            )
        _assert_refused_for_the_disk(batch.value, data)
        with pytest.raises(CosmosResourceNotFoundError):
            container.read_item("new", "a")
        assert _items(container) == acknowledged  # i0 is still there, b1 is not
        assert journal.stat().st_size == size_before

        # Space comes back: writes work again, in the same process.
        small_disk.free()
        created_doc = container.create_item({"id": "new", "pk": "a", "pad": PAD})
        acknowledged["new"] = created_doc
        container.delete_item("i0", "a")
        del acknowledged["i0"]
        assert _items(container) == acknowledged

    with start_in_background(data_dir=data) as emu:  # the journal replays as acknowledged
        container = (
            CosmosClient(emu.url, emu.key).get_database_client("d").get_container_client("c")
        )
        assert _items(container) == acknowledged


def _launch(data: Path, stderr: Path) -> tuple[subprocess.Popen[str], str]:
    """`python -m cosmos_emulator --data DATA`; fails the test with its stderr if it exits."""
    with stderr.open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cosmos_emulator", "--port", "0", "--data", str(data)],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("cosmos-emulator listening on "):
        proc.wait(timeout=10)
        proc.stdout.close()
        pytest.fail(f"the emulator exited with {proc.returncode}: {stderr.read_text()}")
    return proc, line.removeprefix("cosmos-emulator listening on ")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_restart_on_a_full_disk_serves_every_acknowledged_write(
    small_disk: SmallDisk, tmp_path: Path
) -> None:
    data = small_disk.root / "data"
    stderr = tmp_path / "stderr.txt"  # not on the small disk
    proc, url = _launch(data, stderr)
    try:
        container = (
            CosmosClient(url, WELL_KNOWN_KEY)
            .create_database("d")
            .create_container("c", PartitionKey("/pk"))
        )
        for i in range(20):
            container.create_item({"id": f"i{i}", "pk": f"p{i % 3}", "pad": PAD})
        container.delete_item("i3", "p0")
        container.upsert_item({"id": "i4", "pk": "p1", "n": 4})
        acknowledged = _items(container)
        feed = _latest_in_feed(container)
    finally:
        _stop(proc)

    with (data / JOURNAL_NAME).open("ab") as journal:
        journal.write(b'0badc0de {"ops":[')  # a line cut short by a crash
    small_disk.fill()
    proc, url = _launch(data, stderr)  # start-up compaction fails and is skipped
    try:
        client = CosmosClient(url, WELL_KNOWN_KEY)
        container = client.get_database_client("d").get_container_client("c")
        assert _items(container) == acknowledged
        assert _latest_in_feed(container) == feed
        for item_id, doc in acknowledged.items():
            assert container.read_item(item_id, doc["pk"]) == doc
        assert not list(data.glob("*.compacting"))

        small_disk.free()
        created = container.create_item({"id": "new", "pk": "p0", "pad": PAD})
        acknowledged["new"] = created
        assert container.read_item("new", "p0") == created

        small_disk.fill()  # (the journal's last page may still hold a small line: 20 KB)
        with pytest.raises(CosmosHttpResponseError) as refused:
            container.create_item({"id": "refused", "pk": "p0", "pad": PAD * 20})
        _assert_refused_for_the_disk(refused.value, data)
        with pytest.raises(CosmosResourceNotFoundError):
            container.read_item("refused", "p0")
    finally:
        _stop(proc)

    # The torn line was cut off at the start, before "new" was appended after it: the journal
    # replays whole (else "new" would be lost in a line that is no longer torn but corrupt).
    proc, url = _launch(data, stderr)
    try:
        container = (
            CosmosClient(url, WELL_KNOWN_KEY).get_database_client("d").get_container_client("c")
        )
        assert _items(container) == acknowledged
    finally:
        _stop(proc)
