"""Persistence (`--data DIR`): an append-only journal of account changes, compacted.

`DIR/cosmos-journal.jsonl` holds one JSON object per line, each line prefixed with the CRC-32
of its JSON text (`0123abcd {...}\\n`), the format the Service Bus emulator's journal uses (the
packages are independent, so the few lines are repeated rather than shared). A line is a
transaction: everything one request changed, so a transactional batch is one line and is
replayed whole or not at all:

    {"l": <account LSN>, "r": <next resource id>, "ops": [<op>, ...]}

Operations (`o`): `db` a database is created (its properties and throughput), `db-` deleted (by
`_rid`); `c` a container is created in database `d` (its properties, indexing policy and
computed properties included, and `n` its partition key range count when not 1, or `m` its
whole range map once it has split or merged), `c~` replaced, `c-` deleted; `r` a container's
partition key ranges split or merged (`m`: its whole range map after that, as
`ranges.RangeMap.to_record` writes it); `t` an offer's throughput changes; `i` an item version
is stored (container `c` by `_rid`, partition `k`, the document with its `_etag` / `_ts` /
`_lsn`, its exact write time `w`, creation order `s`, and `n: false` when it is left out of
queries: written with `x-ms-indexing-directive: exclude`, or without `include` under a
non-automatic indexing policy); `x` an item is dropped (deleted, expired and purged, or an
expired leftover replaced).

The gateway commits after every request, before the response is handed to the connection:
the line is written with one `os.write` (and `fsync` with `--fsync`), so nothing is
acknowledged before it is in the file. At start the journal is replayed into an empty store
and rewritten as a snapshot of it (temporary file, fsync, rename: compaction); it is compacted
again whenever it grows past `COMPACT_RATIO` times the last snapshot (and `COMPACT_MIN_BYTES`).
A last line cut short (a crash mid-write) is ignored; a bad line with good lines after it is
corruption and the emulator refuses to start rather than drop what follows.

A full (or failing) disk never takes the emulator out of service. A request changes memory
first and the journal second, so when its line cannot be written the line's bytes are cut off
the file again and memory is put back to what the file holds (the file replayed into a fresh
store: exact by construction, and needing no space); the request is refused with
`JournalWriteError`, and the next write tries again. A compaction that fails removes its
temporary file and the journal goes on as it was; at start it is skipped, so a restart on a
full disk serves what the journal holds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import CosmosError
from .ids import RidAllocator, validate_id
from .query.computed import check_definitions
from .ranges import MAX_PARTITION_RANGES
from .store import (
    Container,
    Database,
    Item,
    Store,
    container_record,
    item_record,
    partition_key_definition,
    pk_key,
)

_LOG = logging.getLogger("cosmos_emulator")

JOURNAL_NAME = "cosmos-journal.jsonl"
LOCK_NAME = "cosmos-journal.lock"
COMPACTING_NAME = "cosmos-journal.compacting"  # the snapshot being written, renamed when whole
COMPACT_RATIO = 4
COMPACT_MIN_BYTES = 16 * 1024 * 1024
SNAPSHOT_LINE_BYTES = 1024 * 1024  # a snapshot line holds items up to this size (or one item)
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode


class JournalError(Exception):
    """The data directory cannot be used: corrupt in the middle, unwritable, or locked."""


class JournalWriteError(JournalError):
    """A change could not be made durable (a full disk): it was undone, nothing was answered."""


def _framed(text: bytes) -> bytes:
    return b"%08x " % zlib.crc32(text) + text + b"\n"


def _line(record: dict[str, Any]) -> bytes:
    return _framed(_dumps(record).encode("ascii"))


class Journal:
    """The open journal of a running emulator; `Store.commit()` calls `commit`."""

    def __init__(self, directory: Path, *, fsync: bool) -> None:
        self.directory = directory
        self.path = directory / JOURNAL_NAME
        self.fsync = fsync
        self._store: Store | None = None
        self._log: list[dict[str, Any]] = []
        self._fd = -1
        self._lock_fd = -1
        self._size = 0  # the file's length: every byte of it a whole, written line
        self._compact_at = COMPACT_MIN_BYTES
        self._written_counters = (0, 0)
        # The last write failed (and was undone); None again once a write succeeds.
        self.write_error: OSError | None = None
        # Why the file can take no more lines until a restart (a torn line could not be cut
        # off it, or the compacted file could not be opened); reads are still served.
        self.appends_refused: str | None = None
        # Why memory may hold changes the file lacks (it could not be read back after a
        # failed write): from then on nothing is answered.
        self.out_of_sync: str | None = None
        self.compactions = 0

    @property
    def accepts_writes(self) -> bool:
        """False while the disk refuses writes: the purge waits for a request's write to pass."""
        return (
            self.write_error is None and self.appends_refused is None and self.out_of_sync is None
        )

    # ------------------------------------------------------------------ opening

    def open(self, store: Store) -> None:
        """Lock the directory, replay the journal into the (empty) store and compact it.

        Replay only reads, so a full disk does not stop it; a compaction that fails is skipped
        and the journal is appended to as it is."""
        try:
            if self.directory.exists() and not self.directory.is_dir():
                raise JournalError(
                    f"{self.directory} is a file: --data names a directory (the journal "
                    f"is {JOURNAL_NAME} inside it)"
                )
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_directory()
            whole_lines_end = replay(self.path, store)
            self._store = store
            self._log = store.start_log()
            try:
                self.compact()
            except OSError as exc:
                _LOG.warning("start-up compaction skipped, the journal is kept as it is: %s", exc)
                self._append_after(whole_lines_end)
        except OSError as exc:
            self.close()
            raise JournalError(f"cannot use the data directory {self.directory}: {exc}") from exc
        except BaseException:
            self.close()
            raise
        store.journal = self

    def _append_after(self, whole_lines_end: int) -> None:
        """Append to the journal as it is, cutting off a torn last line first (no space needed)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != whole_lines_end:
                os.ftruncate(fd, whole_lines_end)  # a line appended after it would be corrupt
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self._written_counters = self._counters()
        self._size = whole_lines_end
        self._compact_at = max(COMPACT_MIN_BYTES, 2 * whole_lines_end)

    def _lock_directory(self) -> None:
        self._lock_fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl  # POSIX only; elsewhere the directory is not locked

            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:
            pass
        except OSError as exc:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise JournalError(
                f"{self.directory} is in use by another emulator (its lock file is held)"
            ) from exc

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(JournalError, OSError):
                self.commit()
            os.close(self._fd)
            self._fd = -1
        self._store = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # ------------------------------------------------------------------ writing

    def _counters(self) -> tuple[int, int]:
        assert self._store is not None
        return self._store.lsn, self._store.rids.peek()

    def commit(self) -> None:
        """Write what changed since the last commit as one line; call under the store lock.

        A failed batch changes no item but has used LSNs, which are still written: a client
        may have been handed the position. When the line cannot be written (a full disk), the
        changes are undone in memory and `JournalWriteError` says why: nothing of the request
        is acknowledged, and the next commit tries the disk again."""
        if self._store is None:
            return  # not open (or closed)
        counters = self._counters()
        if not self._log and counters == self._written_counters:
            return  # a read: nothing to make durable, whatever state the disk is in
        if self.out_of_sync is not None:
            raise JournalError(self.out_of_sync)
        if self.appends_refused is not None:
            self._undo_unwritten_changes()
            raise JournalWriteError(
                f"cosmos-emulator cannot append to its journal {self.path} until it is "
                f"restarted ({self.appends_refused}); the write was not made"
            )
        data = _line({"l": counters[0], "r": counters[1], "ops": self._log})
        try:
            _write_all(self._fd, data)
            if self.fsync:
                os.fsync(self._fd)
        except OSError as exc:
            self.write_error = exc
            _LOG.error("journal write failed, the write is undone and refused: %s", exc)
            self._cut_off_unwritten_line(exc)
            self._undo_unwritten_changes()
            raise JournalWriteError(
                f"cosmos-emulator could not write its journal {self.path}: {exc}. The disk "
                f"holding --data {self.directory} is full or failing; the write was not made. "
                "Writes work again once there is space, without a restart."
            ) from exc
        self.write_error = None
        self._log.clear()
        self._written_counters = counters
        self._size += len(data)
        if self._size > self._compact_at:
            try:
                self.compact()
            except OSError as exc:  # the journal as it is stays valid: try again later
                _LOG.warning("journal compaction failed, retried later: %s", exc)
                self._compact_at = 2 * self._size

    def _cut_off_unwritten_line(self, write_error: OSError) -> None:
        """Truncate what a failed write left of its line: a line after it would be corrupt."""
        try:
            os.ftruncate(self._fd, self._size)  # shrinking a file needs no space
        except OSError as exc:
            self.appends_refused = (
                f"a line that failed ({write_error}) could not be cut off the file: {exc}"
            )
            _LOG.error("journal: %s; no more writes until a restart", self.appends_refused)

    def _undo_unwritten_changes(self) -> None:
        """Put memory back to what the file holds: the file replayed into a fresh store."""
        assert self._store is not None
        durable = Store()
        try:
            replay(self.path, durable, missing_ok=False)  # gone is not an empty account
        except (OSError, JournalError) as exc:
            self.out_of_sync = (
                f"cosmos-emulator cannot read back its journal {self.path} after a failed "
                f"write ({exc}); restart it once the disk is fixed"
            )
            _LOG.error("%s", self.out_of_sync)
            return
        self._store.restore(durable)
        self._written_counters = self._counters()

    def compact(self) -> None:
        """Rewrite the journal as the store's state (temporary file, fsync, rename).

        On any error before the rename the temporary file is removed and the journal is left
        as it was (OSError); a full disk must not be made fuller by a half-written snapshot."""
        assert self._store is not None
        temporary = self.directory / COMPACTING_NAME
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            size = 0
            try:
                for chunk in _chunks(snapshot(self._store)):
                    size += _write_all(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise
        self._log.clear()  # the snapshot holds every change recorded so far
        self._written_counters = self._counters()
        self.compactions += 1
        try:
            new_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:  # appending to the replaced file would lose what follows
            self.appends_refused = f"the compacted journal cannot be opened: {exc}"
            _LOG.error("journal: %s; no more writes until a restart", self.appends_refused)
            return
        _fsync_directory(self.directory)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = new_fd
        self._size = size
        self._compact_at = max(COMPACT_MIN_BYTES, COMPACT_RATIO * size)


def _chunks(lines: Iterator[bytes]) -> Iterator[bytes]:
    """Lines joined into writes of about SNAPSHOT_LINE_BYTES: fewer system calls."""
    pending: list[bytes] = []
    pending_bytes = 0
    for line in lines:
        pending.append(line)
        pending_bytes += len(line)
        if pending_bytes >= SNAPSHOT_LINE_BYTES:
            yield b"".join(pending)
            pending, pending_bytes = [], 0
    yield b"".join(pending)


def snapshot(store: Store) -> Iterator[bytes]:
    """Journal lines that rebuild the store: counters, databases, containers, items."""
    yield _line({"l": store.lsn, "r": store.rids.peek(), "ops": []})
    for db in store.databases.values():
        yield _line({"ops": [{"o": "db", "p": db.props, "t": db.throughput}]})
        for coll in db.containers.values():
            yield _line({"ops": [container_record(db.props["_rid"], coll)]})
            ops: list[bytes] = []  # serialised one by one, so a line's size is known exactly
            size = 0
            for key, part in coll.partitions.items():
                for item in part.values():
                    op_text = _dumps(item_record(coll.rid, key, item)).encode("ascii")
                    if ops and size + len(op_text) > SNAPSHOT_LINE_BYTES:
                        yield _ops_line(ops)
                        ops, size = [], 0
                    ops.append(op_text)
                    size += len(op_text)
            if ops:
                yield _ops_line(ops)


def _ops_line(op_texts: list[bytes]) -> bytes:
    return _framed(b'{"ops":[' + b",".join(op_texts) + b"]}")


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------- replay


class _Replay:
    """Applies journal lines to an empty store, checking every field it relies on."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.databases: dict[str, Database] = {}
        self.containers: dict[str, tuple[Database, Container]] = {}
        self.lsn = 0
        self.next_rid = 1

    def apply(self, record: Any) -> None:
        """Apply one line; ValueError / KeyError / TypeError when it is malformed."""
        if not isinstance(record, dict):
            raise ValueError("a record must be an object")
        ops = record["ops"]
        if not isinstance(ops, list):
            raise ValueError("ops must be a list")
        if "l" in record:
            self.lsn = max(self.lsn, _int(record["l"]))
        if "r" in record:
            self.next_rid = max(self.next_rid, _int(record["r"]))
        for op in ops:
            self._op(op)

    def _op(self, op: Any) -> None:
        if not isinstance(op, dict):
            raise ValueError("an operation must be an object")
        kind = op["o"]
        if kind == "i":
            self._item(op)
        elif kind == "x":
            _, coll = self._container(op["c"])
            item_id = op["id"]
            if not isinstance(item_id, str) or not isinstance(op["k"], str):
                raise ValueError("an item removal names its partition and id as strings")
            coll.remove_item(op["k"], item_id)  # idempotent: dropping a missing item is fine
        elif kind == "db":
            props = _resource_props(op["p"])
            if props["id"] in self.store.databases or props["_rid"] in self.databases:
                raise ValueError(f"database {props['id']!r} is created twice")
            db = Database(props, throughput=_throughput(op["t"]))
            self.store.databases[props["id"]] = db
            self.databases[props["_rid"]] = db
        elif kind == "db-":
            db = self._database(op["r"])
            del self.store.databases[db.props["id"]]
            del self.databases[db.props["_rid"]]
            for coll in db.containers.values():
                self.containers.pop(coll.rid, None)
        elif kind == "c":
            db = self._database(op["d"])
            props = _container_props(op["p"])
            if props["id"] in db.containers or props["_rid"] in self.containers:
                raise ValueError(f"container {props['id']!r} is created twice")
            coll = Container(
                props, throughput=_throughput(op["t"]), range_count=_range_count(op.get("n", 1))
            )
            if "m" in op:  # split or merged since it was created
                coll.restore_ranges(op["m"])
            db.containers[props["id"]] = coll
            self.containers[props["_rid"]] = (db, coll)
        elif kind == "c~":
            db, coll = self._container(op["r"])
            props = _container_props(op["p"])
            if props["id"] != coll.props["id"] or props["_rid"] != coll.rid:
                raise ValueError("a container replace changes its id")
            coll.props = props
        elif kind == "c-":
            db, coll = self._container(op["r"])
            del db.containers[coll.props["id"]]
            del self.containers[coll.rid]
        elif kind == "r":  # a split or merge: the container's whole range map after it
            _, coll = self._container(op["c"])
            coll.restore_ranges(op["m"])
        elif kind == "t":
            rid = op["r"]
            if rid not in self.databases and rid not in self.containers:
                raise ValueError(f"no database or container {rid!r} for an offer")
            self.store.set_throughput(rid, _throughput(op["t"]) or 0)
        else:
            raise ValueError(f"unknown operation {kind!r}")

    def _item(self, op: dict[str, Any]) -> None:
        _, coll = self._container(op["c"])
        key, doc = op["k"], op["d"]
        if not isinstance(doc, dict) or not isinstance(key, str):
            raise ValueError("an item record needs a partition key string and a document")
        validate_id(doc.get("id"), item=True)
        for name in ("_rid", "_self", "_etag"):
            if not isinstance(doc.get(name), str):
                raise ValueError(f"the item's {name} must be a string")
        _int(doc.get("_ts"))
        lsn = _int(doc.get("_lsn"))
        if pk_key(coll.pk_from_doc(doc)) != key:
            raise ValueError("the item's partition key does not match its record")
        written_at = op["w"]
        if not isinstance(written_at, int | float) or not math.isfinite(written_at):
            raise ValueError("the write time must be a finite number")
        indexed = op.get("n", True)
        if not isinstance(indexed, bool):
            raise ValueError("an item's index flag must be a boolean")
        coll.put_item(key, Item(doc, float(written_at), _int(op["s"]), indexed), None)
        self.lsn = max(self.lsn, lsn)

    def _database(self, rid: Any) -> Database:
        if not isinstance(rid, str) or rid not in self.databases:
            raise ValueError(f"no database {rid!r}")
        return self.databases[rid]

    def _container(self, rid: Any) -> tuple[Database, Container]:
        if not isinstance(rid, str) or rid not in self.containers:
            raise ValueError(f"no container {rid!r}")
        return self.containers[rid]

    def finish(self) -> None:
        self.store.lsn = self.lsn
        for coll in self.store.containers():
            # Range LSNs are not journaled; the account's is never below any of them, so
            # restarting each range there keeps session tokens and `lsn` headers monotonic.
            coll.range_lsns = [self.lsn] * coll.range_count
        highest_seq = max(
            (
                i.seq
                for c in self.store.containers()
                for p in c.partitions.values()
                for i in p.values()
            ),
            default=0,
        )
        self.store.rids = RidAllocator(max(self.next_rid, highest_seq + 1))


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r:.80}")
    return value


def _range_count(value: Any) -> int:
    count = _int(value)
    if not 1 <= count <= MAX_PARTITION_RANGES:
        raise ValueError(f"a container's range count must be 1 to {MAX_PARTITION_RANGES}")
    return count


def _throughput(value: Any) -> int | None:
    return None if value is None else _int(value)


def _resource_props(props: Any) -> dict[str, Any]:
    if not isinstance(props, dict):
        raise ValueError("resource properties must be an object")
    validate_id(props.get("id"), "resource id")
    for name in ("_rid", "_self", "_etag"):
        if not isinstance(props.get(name), str):
            raise ValueError(f"the resource's {name} must be a string")
    _int(props.get("_ts"))
    return props


def _container_props(raw: Any) -> dict[str, Any]:
    props = _resource_props(raw)
    partition_key_definition(props.get("partitionKey"))
    ttl = props.get("defaultTtl")
    if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool)):
        raise ValueError("defaultTtl must be an integer")
    # Queries compile these on every request: a definition the store would refuse must not
    # come back from the file (a CosmosError here refuses the journal).
    if check_definitions(props.get("computedProperties")) != props.get("computedProperties", []):
        raise ValueError("computedProperties are not as the emulator stores them")
    return props


def replay(path: Path, store: Store, *, missing_ok: bool = True) -> int:
    """Replay a journal file into an empty store; returns where its whole lines end.

    A torn tail (a crash mid-write) is ignored; a bad line with good lines after it raises
    JournalError, never losing what follows silently. Memory is bounded by the store it
    rebuilds plus its largest line. Only reads: it works on a full disk. A missing file is
    an empty account when `missing_ok` (a first start), else FileNotFoundError."""
    state = _Replay(store)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        if not missing_ok:
            raise
        return 0
    torn_at: int | None = None
    torn_line = 0
    with handle:
        offset = 0
        for number, line in enumerate(handle, start=1):
            text = _checked_text(line[:-1]) if line.endswith(b"\n") else None
            if text is None:
                if torn_at is None:
                    torn_at, torn_line = offset, number
            elif torn_at is not None:
                raise JournalError(
                    f"{path}: record {torn_line} (byte {torn_at}) is corrupt and records follow it"
                )
            else:
                try:
                    state.apply(_decode(text))
                except (KeyError, TypeError, ValueError, RecursionError, CosmosError) as exc:
                    raise JournalError(
                        f"{path}: record {number} (byte {offset}) is invalid: {exc!r:.300}"
                    ) from exc
            offset += len(line)
    state.finish()
    if torn_at is None:
        return offset
    _LOG.warning("%s: ignoring %d bytes of an incomplete last record", path, offset - torn_at)
    return torn_at


def _checked_text(line: bytes) -> bytes | None:
    """The JSON text of a line whose checksum matches, else None (torn or damaged)."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    text = line[9:]
    try:
        checksum = int(line[:8], 16)
    except ValueError:
        return None
    return text if checksum == zlib.crc32(text) else None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is not a finite double")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _decode(text: bytes) -> Any:
    """A line's record; the journal only ever holds strict JSON with finite numbers."""
    return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
