"""Persistence (`data_dir=` / `--data DIR`): the account comes back identical after a restart.

Through the real SDK: documents with their `_etag`, `_ts`, `_rid` and `_lsn`, change-feed
continuations, databases, containers (and their replacements), offers, batches, deletes and TTL
expiry. Then the journal itself: a torn last record is ignored, corruption and hostile records
refuse the start without touching the file, a second emulator cannot share the directory, a
failed write is undone and refused, and compaction keeps what it rewrites.
"""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey, ThroughputProperties
from azure.cosmos.exceptions import (
    CosmosBatchOperationError,
    CosmosHttpResponseError,
    CosmosResourceNotFoundError,
)

from cosmos_emulator import RunningCosmosEmulator, start_in_background
from cosmos_emulator import journal as journal_module
from cosmos_emulator.journal import JOURNAL_NAME, JournalError

SRC = Path(__file__).resolve().parents[2] / "src"


def _client(emu: RunningCosmosEmulator) -> CosmosClient:
    return CosmosClient(emu.url, emu.key)


def _container(emu: RunningCosmosEmulator, db: str = "d", name: str = "c") -> ContainerProxy:
    return _client(emu).get_database_client(db).get_container_client(name)


def _feed(container: ContainerProxy, **kwargs: Any) -> list[dict[str, Any]]:
    return list(container.query_items_change_feed(**kwargs))


def _token(container: ContainerProxy) -> str:
    return str(container.client_connection.last_response_headers["etag"])


def _everything(client: CosmosClient) -> dict[str, Any]:
    """All an SDK client can observe of the account, in the order the emulator lists it."""
    state: dict[str, Any] = {}
    for db_props in client.list_databases():
        db = client.get_database_client(db_props["id"])
        containers = {}
        for coll_props in db.list_containers():
            coll = db.get_container_client(coll_props["id"])
            containers[coll_props["id"]] = {
                "props": coll_props,
                "items": list(
                    coll.query_items("SELECT * FROM c", enable_cross_partition_query=True)
                ),
                "feed": _feed(coll, start_time="Beginning"),
            }
        state[db_props["id"]] = {"props": db_props, "containers": containers}
    state["offers"] = list(client.client_connection.ReadOffers())
    return state


def _journal(data: Path) -> Path:
    return data / JOURNAL_NAME


def _raw_line(text: bytes) -> bytes:
    """A journal line with a correct checksum around whatever text."""
    return b"%08x " % zlib.crc32(text) + text + b"\n"


def _line(record: Any) -> bytes:
    return _raw_line(json.dumps(record, separators=(",", ":")).encode())


def test_a_restart_keeps_documents_etags_lsns_and_the_change_feed_position(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        client = _client(emu)
        container = client.create_database("d").create_container(
            "c", PartitionKey("/pk"), default_ttl=-1
        )
        for i in range(5):
            container.create_item({"id": f"i{i}", "pk": f"p{i % 2}", "n": i})
        container.replace_item("i0", {"id": "i0", "pk": "p0", "n": 10})
        container.upsert_item({"id": "i1", "pk": "p1", "n": 11})
        container.patch_item("i2", "p0", [{"op": "incr", "path": "/n", "value": 5}])
        container.delete_item("i3", "p1")
        container.execute_item_batch(
            [("create", ({"id": "b1", "pk": "p0"},)), ("upsert", ({"id": "i4", "pk": "p0"},))],
            partition_key="p0",
        )
        pages = container.query_items_change_feed(start_time="Beginning", max_item_count=2)
        first_page = list(next(pages.by_page()))
        page_token = _token(container)
        assert _feed(container, continuation=page_token)  # more after the first page
        _feed(container, continuation=page_token)
        end_token = _token(container)
        before = _everything(client)
        last_lsn = max(d["_lsn"] for d in before["d"]["containers"]["c"]["items"])

    with start_in_background(data_dir=data) as emu:
        client = _client(emu)
        assert _everything(client) == before
        container = _container(emu)
        feed = before["d"]["containers"]["c"]["feed"]
        assert [d["id"] for d in feed] == ["i0", "i1", "i2", "b1", "i4"]  # LSN order
        assert first_page == feed[:2]
        assert _feed(container, continuation=page_token) == feed[2:]
        assert _feed(container, continuation=end_token) == []
        # The ETag of each document still works as a condition.
        doc = container.read_item("i2", "p0")
        container.replace_item(
            "i2", {**doc, "n": 0}, etag=doc["_etag"], match_condition=_if_match()
        )
        # New writes continue the numbering: after every LSN and rid handed out before.
        created = container.create_item({"id": "new", "pk": "p1"})
        assert created["_lsn"] > last_lsn
        assert created["_rid"] not in {d["_rid"] for d in before["d"]["containers"]["c"]["items"]}
        assert [d["id"] for d in _feed(container, continuation=end_token)] == ["i2", "new"]


def _if_match() -> Any:
    from azure.core import MatchConditions

    return MatchConditions.IfNotModified


def test_resources_offers_and_deletes_come_back_as_they_were(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        client = _client(emu)
        shared = client.create_database("shared", offer_throughput=1000)
        shared.create_container("in-shared", PartitionKey("/pk"))
        db = client.create_database("d")
        kept = db.create_container("kept", PartitionKey("/pk"), offer_throughput=500)
        kept.replace_throughput(ThroughputProperties(offer_throughput=700))
        db.replace_container(kept, PartitionKey("/pk"), default_ttl=3600)
        db.create_container("dropped", PartitionKey("/pk")).create_item({"id": "x", "pk": "a"})
        db.delete_container("dropped")
        client.create_database("gone")
        client.delete_database("gone")
        hierarchical = db.create_container("h", PartitionKey(["/t", "/u"], kind="MultiHash"))
        hierarchical.create_item({"id": "1", "t": "a", "u": "b"})
        before = _everything(client)
        assert set(before) == {"shared", "d", "offers"}
        assert kept.get_throughput().offer_throughput == 700
        assert before["d"]["containers"]["kept"]["props"]["defaultTtl"] == 3600

    with start_in_background(data_dir=data) as emu:
        client = _client(emu)
        assert _everything(client) == before
        assert client.get_database_client("shared").get_throughput().offer_throughput == 1000
        assert _container(emu, "d", "kept").get_throughput().offer_throughput == 700
        again = client.get_database_client("d").create_container("dropped", PartitionKey("/pk"))
        assert list(again.query_items("SELECT * FROM c", enable_cross_partition_query=True)) == []
        prefix = _container(emu, "d", "h").query_items_change_feed(
            start_time="Beginning", partition_key=["a"]
        )
        assert [d["id"] for d in prefix] == ["1"]


def test_a_failed_batch_still_moves_the_feed_position_past_a_restart(tmp_path: Path) -> None:
    """A failed batch used LSNs; a position handed out after it must not be reused."""
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        container = _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "dup", "pk": "a"})
        with pytest.raises(CosmosBatchOperationError):
            container.execute_item_batch(
                [
                    ("create", ({"id": "fresh", "pk": "a"},)),
                    ("create", ({"id": "dup", "pk": "a"},)),
                ],
                partition_key="a",
            )
        assert _feed(container, start_time="Now") == []
        now_token = _token(container)
    with start_in_background(data_dir=data) as emu:
        container = _container(emu)
        container.create_item({"id": "after", "pk": "b"})
        assert [d["id"] for d in _feed(container, continuation=now_token)] == ["after"]


def test_expiry_is_kept_even_when_the_ttl_is_switched_off_afterwards(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        db = _client(emu).create_database("d")
        container = db.create_container("c", PartitionKey("/pk"), default_ttl=1)
        container.create_item({"id": "short", "pk": "a"})
        container.create_item({"id": "long", "pk": "a", "ttl": -1})
        deadline = time.monotonic() + 10
        while emu.stats()["stored_items"] != 1:  # purged: expiry is a journaled removal
            assert time.monotonic() < deadline, "the expired item was never purged"
            time.sleep(0.05)
        db.replace_container(container, PartitionKey("/pk"))  # no defaultTtl: nothing expires
    with start_in_background(data_dir=data) as emu:
        ids = [d["id"] for d in _container(emu).query_items("SELECT * FROM c", partition_key="a")]
        assert ids == ["long"]


def test_random_writes_come_back_identical(tmp_path: Path) -> None:
    """A seeded mix of every write kind, two restarts (the second replays a compacted journal)."""
    data = tmp_path / "data"
    rng = random.Random(22)
    with start_in_background(data_dir=data) as emu:
        db = _client(emu).create_database("d")
        containers = [
            db.create_container("a", PartitionKey("/pk")),
            db.create_container("b", PartitionKey("/pk"), default_ttl=-1),
        ]
        for step in range(150):
            container = rng.choice(containers)
            pk = f"p{rng.randrange(4)}"
            item_id = f"i{rng.randrange(12)}"
            kind = rng.choice(["upsert", "upsert", "patch", "delete", "batch"])
            try:
                if kind == "upsert":
                    container.upsert_item({"id": item_id, "pk": pk, "step": step})
                elif kind == "patch":
                    container.patch_item(item_id, pk, [{"op": "set", "path": "/p", "value": step}])
                elif kind == "delete":
                    container.delete_item(item_id, pk)
                else:
                    container.execute_item_batch(
                        [
                            ("upsert", ({"id": item_id, "pk": pk, "b": step},)),
                            ("create", ({"id": f"{item_id}-{step % 3}", "pk": pk},)),
                        ],
                        partition_key=pk,
                    )
            except (CosmosHttpResponseError, CosmosBatchOperationError) as exc:
                assert exc.status_code in (404, 409), exc
        before = _everything(_client(emu))
    for _ in range(2):
        with start_in_background(data_dir=data) as emu:
            assert _everything(_client(emu)) == before


def test_a_torn_last_record_is_ignored(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        container = _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        kept = container.create_item({"id": "kept", "pk": "a"})
    whole = _line({"l": 99, "r": 99, "ops": [{"o": "x", "c": "?", "k": "[]", "id": "kept"}]})
    with _journal(data).open("ab") as fh:
        fh.write(whole[: len(whole) // 2])  # a crash in the middle of the write
    with start_in_background(data_dir=data) as emu:
        assert _container(emu).read_item("kept", "a") == kept
    # The same tail with its newline but a wrong checksum is torn too.
    with _journal(data).open("ab") as fh:
        fh.write(b"00000000 " + whole[9:])
    with start_in_background(data_dir=data) as emu:
        assert _container(emu).read_item("kept", "a") == kept


def _start_refused(data: Path) -> str:
    with pytest.raises(JournalError) as info:
        start_in_background(data_dir=data)
    return str(info.value)


def test_a_corrupt_record_with_records_after_it_refuses_the_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        _client(emu).create_database("d")
    lines = _journal(data).read_bytes().splitlines(keepends=True)
    damaged = lines[0][:-3] + b"X" + lines[0][-2:]
    _journal(data).write_bytes(damaged + b"".join(lines[1:]))
    original = _journal(data).read_bytes()
    assert "record 1 (byte 0) is corrupt and records follow it" in _start_refused(data)
    assert _journal(data).read_bytes() == original  # nothing rewritten, nothing lost


HOSTILE_RECORDS: list[tuple[str, bytes]] = [
    ("not an object", _line([1, 2])),
    ("no ops", _line({"l": 1})),
    ("unknown op", _line({"ops": [{"o": "zap"}]})),
    ("item in no container", _line({"ops": [{"o": "x", "c": "nope", "k": "[]", "id": "1"}]})),
    ("negative lsn", _line({"l": -5, "ops": []})),
    ("boolean lsn", _line({"l": True, "ops": []})),
    ("bad database", _line({"ops": [{"o": "db", "p": {"id": 5}, "t": None}]})),
    ("NaN", _raw_line(b'{"l":NaN,"ops":[]}')),
    ("1e400", _raw_line(b'{"l":1e400,"ops":[]}')),
    ("deep", _raw_line(b"[" * 50000 + b"]" * 50000)),
    ("huge integer", _raw_line(b'{"l":' + b"9" * 5000 + b',"ops":[]}')),
    ("not utf-8", _raw_line(b'{"l":"\xff"}')),
]


@pytest.mark.parametrize(("name", "record"), HOSTILE_RECORDS, ids=[n for n, _ in HOSTILE_RECORDS])
def test_a_hostile_record_refuses_the_start_with_its_position(
    tmp_path: Path, name: str, record: bytes
) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        _client(emu).create_database("d")
    with _journal(data).open("ab") as fh:
        fh.write(record)
        fh.write(_line({"ops": []}))  # a good record after it: corruption, not a torn tail
    original = _journal(data).read_bytes()
    message = _start_refused(data)
    assert "is invalid" in message or "is corrupt" in message, (name, message)
    assert _journal(data).read_bytes() == original


def test_a_hostile_item_record_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        rid = _container(emu).read()["_rid"]
    good = {"id": "1", "pk": "a", "_rid": "r", "_self": "s", "_etag": '"e"', "_ts": 1, "_lsn": 9}
    bad_docs: list[Callable[[dict[str, Any]], dict[str, Any]]] = [
        lambda d: {**d, "id": "a/b"},
        lambda d: {**d, "_lsn": "9"},
        lambda d: {**d, "pk": "other"},
        lambda d: {k: v for k, v in d.items() if k != "_etag"},
    ]
    journal = _journal(data).read_bytes()
    for make in bad_docs:
        op = {"o": "i", "c": rid, "k": '["a"]', "d": make(good), "w": 1.0, "s": 1}
        _journal(data).write_bytes(journal + _line({"ops": [op]}) + _line({"ops": []}))
        assert "is invalid" in _start_refused(data)
    op = {"o": "i", "c": rid, "k": '["a"]', "d": good, "w": 1.0, "s": 1}
    _journal(data).write_bytes(journal + _line({"ops": [op]}))
    with start_in_background(data_dir=data) as emu:  # the well-formed one is served
        assert _container(emu).read_item("1", "a")["_etag"] == '"e"'


def test_a_second_emulator_cannot_share_the_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data):
        assert "in use by another emulator" in _start_refused(data)


def test_the_cli_exits_2_on_a_corrupt_journal(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _journal(data).write_bytes(_line({"ops": [{"o": "zap"}]}))
    result = subprocess.run(
        [sys.executable, "-m", "cosmos_emulator", "--port", "0", "--data", str(data)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=30,
    )
    assert result.returncode == 2
    assert "record 1 (byte 0) is invalid" in result.stderr
    assert result.stdout == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_failed_write_is_never_acknowledged(tmp_path: Path) -> None:
    """A journal that cannot even be truncated refuses every write until a restart, and
    serves reads of what it holds (a real full disk: test_cosmos_persistence_full_disk.py)."""
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        container = _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        before = container.create_item({"id": "before", "pk": "a"})
        journal = emu._core.journal
        assert journal is not None
        full = os.open("/dev/full", os.O_WRONLY)  # writes fail with ENOSPC, truncation too
        os.dup2(full, journal._fd)
        os.close(full)
        with pytest.raises(CosmosHttpResponseError) as info:
            container.create_item({"id": "lost", "pk": "a"})
        assert info.value.status_code == 503
        assert "No space left on device" in str(info.value)
        assert container.read_item("before", "a") == before  # reads are still answered
        with pytest.raises(CosmosResourceNotFoundError):
            container.read_item("lost", "a")  # undone in memory too
        with pytest.raises(CosmosHttpResponseError) as info:
            container.create_item({"id": "later", "pk": "a"})
        assert info.value.status_code == 503
        assert "until it is restarted" in str(info.value)
    with start_in_background(data_dir=data) as emu:
        assert [d["id"] for d in _container(emu).read_all_items()] == ["before"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_journal_that_cannot_be_read_back_after_a_failed_write_answers_nothing(
    tmp_path: Path,
) -> None:
    """Memory may then hold the failed write: no answer may show it, reads included."""
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        container = _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "before", "pk": "a"})
        journal = emu._core.journal
        assert journal is not None
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, journal._fd)
        os.close(full)
        _journal(data).rename(data / "moved-away.jsonl")  # the file it would read back
        with pytest.raises(CosmosHttpResponseError) as info:
            container.create_item({"id": "lost", "pk": "a"})
        assert info.value.status_code == 503
        with pytest.raises(CosmosHttpResponseError) as info:
            container.read_item("before", "a")
        assert info.value.status_code == 503
        assert "cannot read back its journal" in str(info.value)


def test_a_compacted_journal_that_cannot_be_reopened_refuses_writes_not_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the rename, appending needs the new file open: without it no write is answered
    as done (it would be in no file), and reads of what the snapshot holds go on."""
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        before = _container(emu).create_item({"id": "before", "pk": "a"})
    real_open = os.open

    def refuse_reopening(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(path) == _journal(data) and flags == os.O_WRONLY | os.O_APPEND:
            raise OSError(errno.EMFILE, "Too many open files (refused by the test)")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse_reopening)  # the journal calls os.open
    with start_in_background(data_dir=data) as emu:  # compacts at start, then cannot reopen
        container = _container(emu)
        assert container.read_item("before", "a") == before
        with pytest.raises(CosmosHttpResponseError) as info:
            container.create_item({"id": "lost", "pk": "a"})
        assert info.value.status_code == 503
        assert "until it is restarted" in str(info.value)
        with pytest.raises(CosmosResourceNotFoundError):
            container.read_item("lost", "a")
    monkeypatch.undo()
    with start_in_background(data_dir=data) as emu:
        assert [d["id"] for d in _container(emu).read_all_items()] == ["before"]


def test_fsync_mode_syncs_before_each_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)  # the journal calls os.fsync
    with start_in_background(data_dir=tmp_path / "data", fsync=True) as emu:
        container = _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        before = len(synced)
        container.create_item({"id": "1", "pk": "a"})
        assert len(synced) == before + 1
        container.read_item("1", "a")  # a read changes nothing: nothing to sync
        assert len(synced) == before + 1


def test_compaction_rewrites_the_journal_and_keeps_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "COMPACT_MIN_BYTES", 20_000)
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        container = _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        for i in range(200):
            container.upsert_item({"id": str(i % 5), "pk": "a", "i": i, "pad": "x" * 200})
        journal = emu._core.journal
        assert journal is not None and journal.compactions >= 2  # at start, then by size
        assert _journal(data).stat().st_size < 20_000
        before = _everything(_client(emu))
    with start_in_background(data_dir=data) as emu:
        assert _everything(_client(emu)) == before


def test_a_snapshot_splits_large_items_over_lines(tmp_path: Path) -> None:
    data = tmp_path / "data"
    big = "x" * 700_000
    with start_in_background(data_dir=data) as emu:
        container = _client(emu).create_database("d").create_container("c", PartitionKey("/pk"))
        written = [container.create_item({"id": str(i), "pk": "a", "big": big}) for i in range(3)]
    with start_in_background(data_dir=data) as emu:  # compacted at start
        lines = _journal(data).read_bytes().splitlines()
        assert len([line for line in lines if big.encode() in line]) == 3  # one item a line
        container = _container(emu)
        assert [container.read_item(str(i), "a") for i in range(3)] == written
