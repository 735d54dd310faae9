"""Persistence (`--data DIR`): an append-only journal of broker state changes, compacted.

One file per namespace, `DIR/servicebus-journal.jsonl`: one JSON object per line, each line
prefixed with the CRC-32 of its JSON text (`0123abcd {...}\n`). Bytes (bodies and the other
encoded message sections) are base64. Records name entities by lowercased path (`orders`,
`orders/$deadletterqueue`, `topic/subscriptions/sub`); their operations (`o`):

- `a` a message is stored (all its fields; `dd` also records its MessageId for duplicate
  detection at its enqueued time), `d` it left its entity (completed, received and deleted,
  expired, cancelled), `m` it moved to the entity's dead-letter queue (all its fields again),
  `l` it was locked (delivered in PeekLock), `u` it was unlocked without leaving: its delivery
  count, state or application properties as they are now (abandon, release, lock expiry,
  defer);
- `n` the next sequence number of an entity, `dup` a MessageId a topic accepted (duplicate
  detection on topics), `ss` a session's state;
- `t` a transaction: the records (`r`) of one client request, all in one line, so a crash
  that cuts it restores all of them or none (a batch of messages, a topic's fan-out, a
  schedule request of several messages).

Records are buffered while the event loop handles input and written with one `os.write` (and
`fsync` when asked) before any connection hands output to its socket (`sync`), so a sender's
or a receiver's acknowledgement never leaves the process before the change it acknowledges
is in the file. Locks themselves are not restored: after a restart a message that was locked
is available again, its delivery count one higher (a lost lock counts as an attempt, as an
expired lock does in Service Bus), or dead-lettered if that was its last attempt. At start
the journal is replayed and rewritten as a snapshot of the live state (compaction); it is
compacted again whenever it grows past `COMPACT_RATIO` times the last snapshot (and at least
`COMPACT_MIN_BYTES`).

A full disk (see `Journal.refusal` and `Journal.sync`): beside the journal the emulator keeps
`RESERVE_NAME`, a file of `RESERVE_BYTES` allocated ahead. When a write finds the disk full,
the journal is cut back to its last whole record, the reserve gives up `RESERVE_STEP` bytes and
the write is made again, so what was applied in memory reaches the file. From then on (or as
soon as the free space is too small for a request) new messages are refused with
`amqp:resource-limit-exceeded`, while receives and settlements go on in the reserve, until it
can be allocated whole again. Only a write that fails even then (another error than a full
disk, or the reserve used up) stops the emulator's acknowledgements.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import json
import logging
import os
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

from .message import AVAILABLE, DEFERRED, LOCKED, SCHEDULED, StoredMessage
from .ports import MAX_SESSION_STATE_BYTES, Entity
from .queue import Queue
from .topic import Topic

_LOG = logging.getLogger("servicebus_emulator")

JOURNAL_NAME = "servicebus-journal.jsonl"
LOCK_NAME = "servicebus-journal.lock"
RESERVE_NAME = "servicebus-journal.reserve"
# Room for what is already applied in memory when the disk fills: a few maximum-size batches
# (a 256 KB message is about 350 KB as a record) or thousands of locks and settlements.
RESERVE_BYTES = 4 * 1024 * 1024
# A write that finds the disk full gives up this much of the reserve at a time (or what it
# needs, if more), so the rest stays held: also across a restart on the still full disk.
RESERVE_STEP = 64 * 1024
# While the disk is full, allocating the reserve again is tried at most this often.
SPACE_RETRY_SECONDS = 0.5
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
COMPACT_RATIO = 4
COMPACT_MIN_BYTES = 16 * 1024 * 1024
DEAD_LETTER = "/$deadletterqueue"
_STORED_STATES = (AVAILABLE, DEFERRED, SCHEDULED)
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


class Namespace(Protocol):
    """The broker as the journal reads and rebuilds it (`broker.Broker`, which opens the
    journal: a protocol here keeps the two modules out of a circle)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def queues(self) -> dict[str, Queue]: ...

    @property
    def topics(self) -> dict[str, Topic]: ...

    def subscription_queues(self) -> list[Queue]: ...

    def now_ms(self) -> int: ...

    def resolve(self, path: str) -> Queue | None: ...

    def resolve_topic(self, path: str) -> Topic | None: ...

    def topic_of(self, queue: Queue) -> Topic | None: ...


class JournalError(Exception):
    """The journal cannot be used: corrupt in the middle, unknown entities, locked, or a
    write failed that the reserve could not save (acknowledgements stop)."""


def _record_bytes_bound(payload_bytes: int) -> int:
    """At most what a request of this many bytes adds to the journal: base64 grows bytes by a
    third, and each message record adds its fields."""
    return 2 * payload_bytes + 4096


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError("expected a base64 string")
    return base64.b64decode(text, validate=True)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _opt_str(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def message_fields(msg: StoredMessage) -> dict[str, Any]:
    """A message as a journal record holds it (a locked message is stored unlocked)."""
    state = msg.state
    locked = state == LOCKED
    if locked:
        state = DEFERRED if msg.lock_owner == "deferred" else AVAILABLE
    fields: dict[str, Any] = {
        "s": msg.seq,
        "q": msg.enqueued_ms,
        "x": msg.expires_ms,
        "ttl": msg.ttl_ms,
        "sz": msg.size,
        "dc": msg.delivery_count,
        "st": state,
        "p": _b64(msg.properties_raw),
        "b": _b64(msg.body_raw),
    }
    optional = {
        "id": msg.message_id,
        "sid": msg.session_id,
        "du": msg.durable,
        "pr": msg.priority,
        "sch": msg.scheduled_ms,
        "dls": msg.dead_letter_source,
        "es": msg.enqueue_seq,
    }
    fields.update((k, v) for k, v in optional.items() if v is not None)
    if msg.delivery_annotation_count:
        fields["da"] = _b64(msg.delivery_annotations_raw)
        fields["dac"] = msg.delivery_annotation_count
    if msg.annotation_count:
        fields["ma"] = _b64(msg.annotations_raw)
        fields["mac"] = msg.annotation_count
    if msg.app_count:
        fields["ap"] = _b64(msg.app_raw)
        fields["apc"] = msg.app_count
    if locked:
        fields["lk"] = 1
    return fields


def message_from_fields(fields: dict[str, Any]) -> StoredMessage:
    """Rebuild a stored message; raises ValueError / KeyError on a malformed record."""
    msg = StoredMessage.__new__(StoredMessage)
    msg.seq = _int(fields["s"])
    msg.enqueued_ms = _int(fields["q"])
    msg.expires_ms = _int(fields["x"])
    msg.ttl_ms = _int(fields["ttl"])
    msg.size = _int(fields["sz"])
    msg.delivery_count = _int(fields["dc"])
    msg.state = _int(fields["st"])
    if msg.state not in _STORED_STATES:
        raise ValueError(f"message state {msg.state} is not stored")
    msg.properties_raw = _unb64(fields["p"])
    msg.body_raw = _unb64(fields["b"])
    msg.message_id = _opt_str(fields.get("id"))
    msg.session_id = _opt_str(fields.get("sid"))
    durable = fields.get("du")
    if durable is not None and not isinstance(durable, bool):
        raise ValueError("durable must be a boolean")
    msg.durable = durable
    priority = fields.get("pr")
    msg.priority = None if priority is None else _int(priority)
    scheduled = fields.get("sch")
    msg.scheduled_ms = None if scheduled is None else _int(scheduled)
    msg.dead_letter_source = _opt_str(fields.get("dls"))
    first_seq = fields.get("es")
    msg.enqueue_seq = None if first_seq is None else _int(first_seq)
    msg.delivery_annotations_raw = _unb64(fields.get("da", ""))
    msg.delivery_annotation_count = _int(fields.get("dac", 0))
    msg.annotations_raw = _unb64(fields.get("ma", ""))
    msg.annotation_count = _int(fields.get("mac", 0))
    msg.app_raw = _unb64(fields.get("ap", ""))
    msg.app_count = _int(fields.get("apc", 0))
    msg.lock_token = None
    msg.locked_until_ms = 0
    msg.lock_owner = None
    msg.bare = b""
    msg._rebuild_bare()
    return msg


def _line(record: dict[str, Any]) -> bytes:
    text = _dumps(record).encode("ascii")
    return b"%08x " % zlib.crc32(text) + text + b"\n"


class Journal:
    """The open journal of a running broker; queues and topics call its `record_*` hooks."""

    def __init__(self, directory: Path, *, fsync: bool, reserve_bytes: int | None = None) -> None:
        self.directory = directory
        self.path = directory / JOURNAL_NAME
        self.fsync = fsync
        self.reserve_bytes = RESERVE_BYTES if reserve_bytes is None else reserve_bytes
        self._pending: list[bytes] = []
        # Records of the open transaction (see `transaction`), written as one line.
        self._transaction: list[dict[str, Any]] | None = None
        self._fd = -1
        self._lock_fd = -1
        self._reserve_fd = -1
        self._size = 0  # bytes of whole records in the file: a failed write is cut back to it
        self._compact_at = COMPACT_MIN_BYTES
        self._broker: Namespace | None = None
        self._failed: OSError | None = None
        # Why new messages are refused (the disk is full), None while they are accepted.
        self.disk_full: str | None = None
        self._space_retry_at = 0.0
        self.compactions = 0

    # ------------------------------------------------------------------ opening

    def open(self, broker: Namespace) -> None:
        """Lock the directory, replay the journal into the broker and compact it.

        Replaying needs no free space: when the compaction cannot be written (a full disk)
        the journal is kept as it is, its torn last record (if any) cut off, and the changes
        the replay itself made (lost locks counted) are appended to it instead."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_directory()
            state = read_journal(self.path)
            # Hooked before the install: what activating the restored messages changes is
            # journaled (and dropped again when the compaction below holds it).
            for queue in _all_queues(broker):
                queue.journal = self
            for topic in broker.topics.values():
                topic.journal = self
            state.install(broker)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size != state.valid_bytes:
                os.ftruncate(self._fd, state.valid_bytes)  # frees space: works on a full disk
            self._size = state.valid_bytes
            self._broker = broker
            self._allocate_reserve()
            try:
                self.compact()
            except OSError as exc:
                _LOG.warning("journal compaction at start skipped (%s): serving as it is", exc)
                self._compact_at = max(COMPACT_MIN_BYTES, 2 * self._size)
                self.sync()
        except OSError as exc:
            self.close()
            raise JournalError(f"cannot use the data directory {self.directory}: {exc}") from exc
        except BaseException:
            self.close()
            raise

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
                self.sync()
            os.close(self._fd)  # also after a failed write: the descriptor is ours to free
            self._fd = -1
        if self._reserve_fd >= 0:
            os.close(self._reserve_fd)
            self._reserve_fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # ------------------------------------------------------------------ writing

    def _append(self, record: dict[str, Any]) -> None:
        if self._failed is not None:
            return  # nothing is written any more (see `sync`): keep no backlog
        if self._transaction is not None:
            self._transaction.append(record)
            return
        if not self._pending and self._broker is not None:
            # Nothing may stay buffered when no connection writes (a timer's change).
            self._broker.loop.call_soon(self._sync_unasked)
        self._pending.append(_line(record))

    def _sync_unasked(self) -> None:
        with contextlib.suppress(JournalError):  # logged once; the connections report it
            self.sync()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Journal every change made inside as one line (`t`): a crash keeps all or none."""
        if self._transaction is not None:  # nested: part of the outer one
            yield
            return
        self._transaction = []
        try:
            yield
        finally:
            records, self._transaction = self._transaction, None
            if len(records) == 1:
                self._append(records[0])
            elif records:
                self._append({"o": "t", "r": records})

    def refusal(self, payload_bytes: int) -> str | None:
        """Why a request adding this many bytes cannot be accepted now (None: it can).

        Asked before a client's message, schedule or session state is applied: refused, it
        changes nothing. A full disk refuses until the reserve can be allocated again."""
        if self._failed is not None:
            return f"The emulator's journal could not be written: {self._failed}"
        if self.disk_full is None:
            free = _free_bytes(self._fd)
            if free is None or free >= _record_bytes_bound(payload_bytes):
                return None
            self._enter_disk_full(f"{free} bytes free")
        now = time.monotonic()
        if now >= self._space_retry_at:
            self._space_retry_at = now + SPACE_RETRY_SECONDS
            if self._allocate_reserve():
                free = _free_bytes(self._fd)
                if free is None or free >= _record_bytes_bound(payload_bytes):
                    _LOG.warning("journal: disk space is back, accepting messages again")
                    self.disk_full = None
                    return None
        return (
            f"The emulator's disk is full ({self.disk_full}): messages are refused until "
            f"space is freed on {self.directory}; receiving and settling still work."
        )

    def _enter_disk_full(self, why: str) -> None:
        if self.disk_full is None:
            _LOG.warning("journal: the disk is full (%s), refusing new messages", why)
        self.disk_full = why
        self._space_retry_at = time.monotonic() + SPACE_RETRY_SECONDS

    def _allocate_reserve(self) -> bool:
        """Grow the reserve back to `reserve_bytes`; False when the disk has not the room (the
        reserve then keeps what it held)."""
        if self.reserve_bytes <= 0:
            return True
        held = 0
        try:
            if self._reserve_fd < 0:
                self._reserve_fd = os.open(
                    self.directory / RESERVE_NAME, os.O_RDWR | os.O_CREAT, 0o644
                )
            held = os.fstat(self._reserve_fd).st_size
            if held >= self.reserve_bytes:
                return True
            _allocate(self._reserve_fd, self.reserve_bytes)
        except OSError as exc:
            if self._reserve_fd >= 0:
                with contextlib.suppress(OSError):  # give back what the attempt took
                    os.ftruncate(self._reserve_fd, held)
            self._enter_disk_full(f"no room for the {self.reserve_bytes}-byte reserve: {exc}")
            return False
        return True

    def _shrink_reserve(self, needed: int) -> bool:
        """Free at least `needed` bytes of the reserve (RESERVE_STEP at least); False when
        it holds nothing more."""
        if self._reserve_fd < 0:
            return False
        try:
            held = os.fstat(self._reserve_fd).st_size
            if held == 0:
                return False
            os.ftruncate(self._reserve_fd, max(0, held - max(needed, RESERVE_STEP)))
        except OSError:
            return False
        return True

    def sync(self) -> None:
        """Write the buffered records (one write; fsync when asked); before any output.

        A failed write is cut back to the last whole record and made again in the space of
        the reserve, so every change already applied (and about to be acknowledged) reaches
        the file; new messages are then refused until space returns (`refusal`). Only when
        that fails as well does every call raise JournalError: no connection hands out
        another acknowledgement and the emulator must be restarted."""
        if self._failed is not None:
            raise JournalError(f"the journal could not be written: {self._failed}")
        if not self._pending or self._fd < 0:
            return
        data = b"".join(self._pending)
        while True:
            try:
                self._write(data)
                break
            except OSError as exc:
                if exc.errno not in _NO_SPACE or not self._shrink_reserve(len(data)):
                    self._fail(exc)
                self._enter_disk_full(f"a journal write failed: {exc}")
        self._pending.clear()
        self._size += len(data)
        if self._size > self._compact_at and self.disk_full is None:
            try:
                self.compact()
            except OSError as exc:  # the journal as it is stays valid: try again later
                _LOG.warning("journal compaction failed, retried later: %s", exc)
                self._compact_at = 2 * self._size

    def _write(self, data: bytes) -> None:
        try:
            _write_all(self._fd, data)
            if self.fsync:
                os.fsync(self._fd)
        except OSError as exc:
            # A write cut short leaves part of a record: appending after it would make the
            # journal unreadable. Cutting a file needs no free space; if it fails anyway,
            # nothing more may be appended.
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                self._fail(exc)
            raise

    def _fail(self, exc: OSError) -> NoReturn:
        self._failed = exc
        _LOG.error("journal write failed, no more acknowledgements: %s", exc)
        raise JournalError(f"the journal could not be written: {exc}") from exc

    @property
    def failed(self) -> bool:
        """True once a write failed that the reserve could not save."""
        return self._failed is not None

    def compact(self) -> None:
        """Rewrite the journal as the broker's live state (temporary file, fsync, rename).

        On any error the temporary file is removed and the journal stays as it was."""
        assert self._broker is not None
        temporary = self.path.with_suffix(".compacting")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                size = 0
                chunk: list[bytes] = []
                for record in snapshot(self._broker):
                    chunk.append(_line(record))
                    if len(chunk) >= 1024:
                        size += _write_all(fd, b"".join(chunk))
                        chunk.clear()
                size += _write_all(fd, b"".join(chunk))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self._pending.clear()  # the snapshot holds every buffered change
        try:
            new_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:  # appending to the replaced file would lose what follows
            self._failed = exc
            raise JournalError(f"the compacted journal cannot be opened: {exc}") from exc
        _fsync_directory(self.directory)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = new_fd
        self._size = size
        self._compact_at = max(COMPACT_MIN_BYTES, COMPACT_RATIO * size)
        self.compactions += 1

    # ------------------------------------------------------------------ hooks

    def record_added(self, queue: Entity, msg: StoredMessage, dedup: bool) -> None:
        record: dict[str, Any] = {"o": "a", "e": queue.name.lower(), "m": message_fields(msg)}
        if dedup:
            record["dd"] = 1
        self._append(record)

    def record_removed(self, queue: Entity, msg: StoredMessage) -> None:
        self._append({"o": "d", "e": queue.name.lower(), "s": msg.seq})

    def record_dead_lettered(self, queue: Entity, msg: StoredMessage) -> None:
        self._append({"o": "m", "e": queue.name.lower(), "m": message_fields(msg)})

    def record_locked(self, queue: Entity, msg: StoredMessage) -> None:
        self._append({"o": "l", "e": queue.name.lower(), "s": msg.seq})

    def record_updated(self, queue: Entity, msg: StoredMessage) -> None:
        state = DEFERRED if msg.state == DEFERRED else AVAILABLE
        record: dict[str, Any] = {
            "o": "u",
            "e": queue.name.lower(),
            "s": msg.seq,
            "dc": msg.delivery_count,
            "st": state,
        }
        if msg.app_count:
            record["ap"] = _b64(msg.app_raw)
            record["apc"] = msg.app_count
        self._append(record)

    def record_topic_send(self, topic: Entity, seq: int, message_id: str | None, at: int) -> None:
        record: dict[str, Any] = {"o": "n", "e": topic.name.lower(), "n": seq + 1}
        self._append(record)
        if message_id is not None:
            self._append({"o": "dup", "e": topic.name.lower(), "id": message_id, "t": at})

    def record_session_state(self, queue: Entity, session_id: str, state: bytes | None) -> None:
        self._append(
            {
                "o": "ss",
                "e": queue.name.lower(),
                "sid": session_id,
                "v": None if state is None else _b64(state),
            }
        )


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


def _free_bytes(fd: int) -> int | None:
    """Free bytes on the file system of `fd` for an unprivileged writer (None: unknown)."""
    try:
        stats = os.fstatvfs(fd)
    except (OSError, AttributeError):  # not every platform has statvfs
        return None
    return stats.f_bavail * stats.f_frsize


def _allocate(fd: int, size: int) -> None:
    """Make the file `size` bytes long with its blocks allocated (ENOSPC when they are not
    free)."""
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is not None:
        allocate(fd, 0, size)
        return
    os.ftruncate(fd, 0)  # elsewhere: write the bytes, which allocates them as well
    zeros = bytes(64 * 1024)
    for _ in range(0, size, len(zeros)):
        _write_all(fd, zeros)


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _all_queues(broker: Namespace) -> Iterator[Queue]:
    for queue in [*broker.queues.values(), *broker.subscription_queues()]:
        yield queue
        if queue.dead_letter is not None:
            yield queue.dead_letter


def snapshot(broker: Namespace) -> Iterator[dict[str, Any]]:
    """The records that rebuild the broker's live state."""
    now = broker.now_ms()
    for topic in broker.topics.values():
        key = topic.name.lower()
        yield {"o": "n", "e": key, "n": topic.next_seq}
        for message_id, at in topic.dedup_entries(now):
            yield {"o": "dup", "e": key, "id": message_id, "t": at}
    for queue in _all_queues(broker):
        key = queue.name.lower()
        if queue.parent is None:
            yield {"o": "n", "e": key, "n": queue.next_seq}
        for message_id, at in queue.dedup_entries(now):
            yield {"o": "dup", "e": key, "id": message_id, "t": at}
        for msg in queue.messages.values():
            yield {"o": "a", "e": key, "m": message_fields(msg)}
        for session_id, state in queue.session_states():
            yield {"o": "ss", "e": key, "sid": session_id, "v": _b64(state)}


@dataclass
class JournalState:
    """What a journal replays to, before it is installed into a broker."""

    messages: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    next_seq: dict[str, int] = field(default_factory=dict)
    dedup: dict[str, dict[str, int]] = field(default_factory=dict)
    session_states: dict[str, dict[str, bytes]] = field(default_factory=dict)
    # (dead-letter queue, seq) -> where its early removal record is; see `apply`.
    early_removals: dict[tuple[str, int], str] = field(default_factory=dict)
    repaired: int = 0  # such pairs replayed
    valid_bytes: int = 0  # the file's length up to a torn last record

    def apply(self, record: Any, position: str = "") -> None:
        """Apply one record; raises ValueError / KeyError / TypeError when it is malformed."""
        if not isinstance(record, dict):
            raise ValueError("a record must be an object")
        op = record["o"]
        if op == "t":
            records = record["r"]
            if not isinstance(records, list):
                raise ValueError("a transaction holds a list of records")
            for inner in records:
                if isinstance(inner, dict) and inner.get("o") == "t":
                    raise ValueError("a transaction inside a transaction")
                self.apply(inner, position)
            return
        entity = record["e"]
        if not isinstance(entity, str):
            raise ValueError("entity must be a string")
        if op == "a":
            fields = record["m"]
            message_from_fields(fields)  # validated now: a bad record fails here, not later
            seq = _int(fields["s"])
            self.messages.setdefault(entity, {})[seq] = fields
            self._bump(entity, seq + 1)
            if record.get("dd"):
                self.dedup.setdefault(entity, {})[str(fields["id"])] = _int(fields["q"])
        elif op == "d":
            seq = _int(record["s"])
            if entity.endswith(DEAD_LETTER) and seq not in self.messages.get(entity, {}):
                # Emulators before the fix journaled a forwarded dead letter's removal from
                # the dead-letter queue before its move there ("m", a few records later):
                # the pair cancels out, so such a journal replays to the state it recorded.
                self._owned(entity[: -len(DEAD_LETTER)], seq)
                self.early_removals[(entity, seq)] = position
                return
            self._owned(entity, seq)
            del self.messages[entity][seq]
        elif op == "m":
            fields = record["m"]
            seq = _int(fields["s"])
            self._owned(entity, seq)
            if self.early_removals.pop((entity + DEAD_LETTER, seq), None) is not None:
                del self.messages[entity][seq]  # its fields were journaled as already gone
                self.repaired += 1
                return
            message_from_fields(fields)
            del self.messages[entity][seq]
            self.messages.setdefault(entity + DEAD_LETTER, {})[seq] = fields
        elif op == "u":
            seq = _int(record["s"])
            self._owned(entity, seq)
            fields = self.messages[entity][seq]
            fields["dc"] = _int(record["dc"])
            fields["st"] = _int(record["st"])
            fields.pop("lk", None)
            fields.pop("ap", None)
            fields.pop("apc", None)
            if "ap" in record:
                _unb64(record["ap"])
                fields["ap"], fields["apc"] = record["ap"], _int(record["apc"])
        elif op == "l":
            seq = _int(record["s"])
            self._owned(entity, seq)
            self.messages[entity][seq]["lk"] = 1
        elif op == "n":
            self._bump(entity, _int(record["n"]))
        elif op == "dup":
            message_id = record["id"]
            if not isinstance(message_id, str):
                raise ValueError("dup id must be a string")
            self.dedup.setdefault(entity, {})[message_id] = _int(record["t"])
        elif op == "ss":
            session_id = record["sid"]
            if not isinstance(session_id, str):
                raise ValueError("session id must be a string")
            states = self.session_states.setdefault(entity, {})
            if record["v"] is None:
                states.pop(session_id, None)
            else:
                value = _unb64(record["v"])
                if len(value) > MAX_SESSION_STATE_BYTES:
                    raise ValueError(f"session state of {len(value)} bytes is over the limit")
                states[session_id] = value
        else:
            raise ValueError(f"unknown operation {op!r}")

    def check_complete(self) -> None:
        """Raise ValueError when a removal was journaled for a dead letter that never came."""
        for (entity, seq), position in self.early_removals.items():
            raise ValueError(f"{position}: no message {seq} in {entity!r} to change")

    def _bump(self, entity: str, next_seq: int) -> None:
        self.next_seq[entity] = max(self.next_seq.get(entity, 1), next_seq)

    def _owned(self, entity: str, seq: int) -> None:
        if seq not in self.messages.get(entity, {}):
            raise ValueError(f"no message {seq} in {entity!r} to change")

    def install(self, broker: Namespace) -> None:
        """Put the replayed state into a broker built from the configuration."""
        entities = set(self.messages) | set(self.next_seq) | set(self.dedup)
        entities |= set(self.session_states)
        unknown = sorted(
            e for e in entities if broker.resolve(e) is None and broker.resolve_topic(e) is None
        )
        if unknown:
            raise JournalError(
                f"the journal holds state of entities the configuration does not define: "
                f"{', '.join(unknown)} (define them again, or move the data directory away)"
            )
        now = broker.now_ms()
        for entity, next_seq in self.next_seq.items():
            queue = broker.resolve(entity)
            target = queue or broker.resolve_topic(entity)
            assert target is not None
            target.restore_next_seq(next_seq)
            topic = None if queue is None else broker.topic_of(queue)
            if topic is not None:  # a subscription's numbers come from its topic
                topic.restore_next_seq(next_seq)
        restored: list[tuple[Queue, StoredMessage, bool]] = []
        for entity, by_seq in self.messages.items():
            queue = broker.resolve(entity)
            assert queue is not None
            for seq in sorted(by_seq):
                fields = by_seq[seq]
                msg = message_from_fields(fields)
                queue.restore_message(msg)
                restored.append((queue, msg, bool(fields.get("lk"))))
        # Only now: a message activated here may move (forwarding, dead-lettering) to an
        # entity whose own messages must be in place first.
        for queue, msg, lock_lost in restored:
            queue.activate_restored(msg, now, lock_lost)
        for entity in self.messages:
            queue = broker.resolve(entity)
            assert queue is not None
            topic = broker.topic_of(queue)
            if topic is not None:
                topic.restore_scheduled(queue)
        for entity, entries in self.dedup.items():
            target = broker.resolve(entity) or broker.resolve_topic(entity)
            assert target is not None
            target.restore_dedup(entries, now)
        for entity, states in self.session_states.items():
            queue = broker.resolve(entity)
            assert queue is not None
            for session_id, value in states.items():
                queue.restore_session_state(session_id, value)


def read_journal(path: Path) -> JournalState:
    """Replay a journal file. A torn tail (a crash mid-write) is ignored; a bad record with
    good records after it raises JournalError, never losing what follows silently."""
    state = JournalState()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return state
    offset = 0
    torn_at: int | None = None
    line_number = 0
    while offset < len(data):
        end = data.find(b"\n", offset)
        line_number += 1
        if end < 0:  # no newline: the last write was cut short
            torn_at = torn_at if torn_at is not None else offset
            break
        record = _parse_line(data[offset:end])
        if record is None:
            if torn_at is None:
                torn_at, torn_line = offset, line_number
        elif torn_at is not None:
            raise JournalError(
                f"{path}: record {torn_line} (byte {torn_at}) is corrupt and records follow "
                f"it. {_REMEDY}"
            )
        else:
            position = f"record {line_number} (byte {offset})"
            try:
                state.apply(record, position)
            except (KeyError, TypeError, ValueError, binascii.Error) as exc:
                raise JournalError(f"{path}: {position} is invalid: {exc!r}. {_REMEDY}") from exc
        offset = end + 1
    try:
        state.check_complete()
    except ValueError as exc:
        raise JournalError(f"{path}: {exc}. {_REMEDY}") from exc
    state.valid_bytes = len(data) if torn_at is None else torn_at
    if torn_at is not None:
        _LOG.warning(
            "%s: ignoring %d bytes of an incomplete last record", path, len(data) - torn_at
        )
    if state.repaired:
        _LOG.warning(
            "%s: replayed %d forwarded dead letters an older emulator journaled out of order",
            path,
            state.repaired,
        )
    return state


# Said with every refusal to replay. The file is left untouched: guessing past a bad record
# could bring back settled messages or drop live ones, and the file is the evidence.
_REMEDY = (
    "Nothing was changed. To start anyway, move the data directory (or this file) away: the "
    "emulator then starts empty and the old file stays for inspection"
)


def _parse_line(line: bytes) -> Any:
    """The record of a line whose checksum matches, else None."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    text = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(text):
            return None
        return json.loads(text)
    except (ValueError, RecursionError):  # bad hex, JSON or UTF-8; absurd nesting
        return None
