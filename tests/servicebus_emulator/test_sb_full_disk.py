"""A full disk and a torn batch, as a hostile or unlucky environment makes them: the journal
(`--data`) must refuse what it cannot keep with an error the SDK surfaces, keep serving what it
holds, recover when space returns, and restore a batch all or nothing after a crash.

The disk is a small tmpfs of the test's own (mounting needs root, which CI has; elsewhere the
tests skip, and fail in CI), filled by a file the test writes until ENOSPC: the emulator meets
the real kernel error at its real write calls, with no seam in the code."""

from __future__ import annotations

import datetime
import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import (
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
)
from sb_process import EmulatorProcess, wait_until
from sb_receive import receive_all
from sb_support import queue_config, queue_entry, subscription_entry, topic_config, topic_entry
from servers import small_tmpfs

from servicebus_emulator import journal, start_in_background
from servicebus_emulator.journal import JOURNAL_NAME, read_journal

QUEUE = "full-disk"
# Room for the journal, its reserve (4 MiB) and a compaction; small enough to fill at once.
DISK_BYTES = 12 * 1024 * 1024
SESSION_QUEUE = "full-disk-sessions"
CONFIG = queue_config(
    queue_entry(QUEUE, LockDuration="PT30S"),
    queue_entry(SESSION_QUEUE, RequiresSession=True),
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_BYTES mounted for this test only, unmounted after it."""
    with small_tmpfs(tmp_path / "disk", DISK_BYTES) as mount_point:
        yield mount_point


def fill(disk: Path, leave: int = 0) -> None:
    """Write a new file on `disk` until at most `leave` bytes are free (ENOSPC when 0)."""
    fd = os.open(disk / f"filler-{uuid.uuid4().hex}", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while (room := shutil.disk_usage(disk).free - leave) > 0:
            os.write(fd, bytes(min(room, 1024 * 1024)))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert shutil.disk_usage(disk).free <= leave


def free_space(disk: Path) -> None:
    for filler in disk.glob("filler-*"):
        filler.unlink()


def _client(connection_string: str) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(connection_string, retry_total=0)


def _send(connection_string: str, *bodies: str, queue: str = QUEUE) -> None:
    with _client(connection_string) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(body, message_id=body[:64]) for body in bodies])


def _schedule(connection_string: str, body: str) -> None:
    in_an_hour = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    with _client(connection_string) as client, client.get_queue_sender(QUEUE) as sender:
        sender.schedule_messages(ServiceBusMessage(body, message_id=body), in_an_hour)


def _set_session_state(connection_string: str, state: bytes) -> None:
    with (
        _client(connection_string) as client,
        client.get_queue_receiver(SESSION_QUEUE, session_id="s") as receiver,
    ):
        assert receiver.session is not None
        receiver.session.set_state(state)


def _sent(connection_string: str, body: str) -> bool:
    """True when the send is accepted; False while the disk is still full."""
    try:
        _send(connection_string, body)
    except ServiceBusQuotaExceededError:
        return False
    return True


def _peek(connection_string: str) -> list[str]:
    with _client(connection_string) as client, client.get_queue_receiver(QUEUE) as receiver:
        return [str(m) for m in receiver.peek_messages(max_message_count=50)]


def _receive_and_complete_one(connection_string: str) -> str:
    with _client(connection_string) as client, client.get_queue_receiver(QUEUE) as receiver:
        (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        receiver.complete_message(msg)
        return str(msg)


def _drain(connection_string: str) -> list[str]:
    with _client(connection_string) as client, client.get_queue_receiver(QUEUE) as receiver:
        return [str(m) for m in receive_all(receiver, wait=5)]


def test_a_full_disk_refuses_sends_with_a_quota_error_keeps_serving_and_recovers(
    small_disk: Path, tmp_path: Path
) -> None:
    data = small_disk / "data"

    def start() -> EmulatorProcess:
        return EmulatorProcess(CONFIG, tmp_path, ("--data", str(data), "--log-level", "WARNING"))

    emu = start()
    try:
        _send(emu.connection_string, "kept-1", "kept-2", "kept-3", "kept-4")
        fill(small_disk)

        # A send that cannot be kept is refused as Service Bus refuses one to a full entity.
        with pytest.raises(ServiceBusQuotaExceededError, match="disk is full"):
            _send(emu.connection_string, "refused")
        with pytest.raises(ServiceBusQuotaExceededError, match="disk is full"):
            _schedule(emu.connection_string, "refused-scheduled")
        with pytest.raises(ServiceBusQuotaExceededError, match="disk is full"):
            _set_session_state(emu.connection_string, b"refused-state")
        # What the journal holds is still served: peeked, received, settled.
        assert _peek(emu.connection_string) == ["kept-1", "kept-2", "kept-3", "kept-4"]
        assert _receive_and_complete_one(emu.connection_string) == "kept-1"

        # Restarted on the disk still full (the little the reserve gave up is filled too).
        emu.stop()
        fill(small_disk)
        emu = start()
        assert emu.alive()
        assert _peek(emu.connection_string) == ["kept-2", "kept-3", "kept-4"]
        assert _receive_and_complete_one(emu.connection_string) == "kept-2"
        with pytest.raises(ServiceBusQuotaExceededError):
            _send(emu.connection_string, "refused-again")
        assert not list(data.glob("*.compacting"))  # the start-up compaction left nothing

        # Space returns: sends are accepted again, without a restart.
        free_space(small_disk)
        assert wait_until(lambda: _sent(emu.connection_string, "after"), timeout=10)

        emu.stop()
        emu = start()
        assert _drain(emu.connection_string) == ["kept-3", "kept-4", "after"]
        stderr = emu.stderr()
        assert "Traceback" not in stderr
        assert "disk is full" in stderr  # the operator is told why messages were refused
    finally:
        emu.stop()


def test_a_compaction_that_finds_the_disk_full_leaves_no_file_and_changes_nothing(
    small_disk: Path,
) -> None:
    data = small_disk / "data"
    bodies = [f"{n:02d}-{'x' * 8192}" for n in range(40)]
    emu = start_in_background(config=CONFIG, data_dir=data)
    try:
        _send(emu.connection_string, *bodies[:20])  # a batch holds 256 KB at most
        _send(emu.connection_string, *bodies[20:])
        journal_before = (data / JOURNAL_NAME).read_bytes()
        # Room for a small record, not for a snapshot of 40 messages of 8 KB.
        fill(small_disk, leave=32 * 1024)
        the_journal = emu.broker.journal
        assert the_journal is not None
        emu.call(setattr, the_journal, "_compact_at", 0)  # the next write compacts

        _send(emu.connection_string, "small")

        assert emu.call(lambda: the_journal.compactions) == 1  # only the one at start
        assert not list(data.glob("*.compacting"))
        assert (data / JOURNAL_NAME).read_bytes().startswith(journal_before)
        assert len(_peek(emu.connection_string)) == 41
    finally:
        emu.stop()
    free_space(small_disk)
    emu = start_in_background(config=CONFIG, data_dir=data)
    try:
        assert _drain(emu.connection_string) == [*bodies, "small"]
    finally:
        emu.stop()


def test_a_full_disk_that_used_up_the_reserve_acknowledges_nothing_more(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dead-lettering copies each message into a record of its own: with a reserve of two
    steps, a few of them use it up. What was acknowledged before is kept; the settlement that
    found no room is not acknowledged, and every connection after it is told why."""
    monkeypatch.setattr(journal, "RESERVE_BYTES", 2 * journal.RESERVE_STEP)
    data = small_disk / "data"
    bodies = [f"{n:02d}-{'x' * 8192}" for n in range(20)]
    dead_lettered: list[str] = []
    with start_in_background(config=CONFIG, data_dir=data) as emu:
        _send(emu.connection_string, *bodies)
        fill(small_disk)
        with (
            pytest.raises(ServiceBusError),
            _client(emu.connection_string) as client,
            client.get_queue_receiver(QUEUE) as receiver,
        ):
            for _ in bodies:
                (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
                receiver.dead_letter_message(msg, reason="test")
                dead_lettered.append(str(msg))
        with pytest.raises(ServiceBusConnectionError, match="journal could not be written"):
            _peek(emu.connection_string)
    assert 0 < len(dead_lettered) < len(bodies)

    free_space(small_disk)
    with start_in_background(config=CONFIG, data_dir=data) as emu:
        with (
            _client(emu.connection_string) as client,
            client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq,
        ):
            assert [str(m) for m in receive_all(dlq, wait=5)] == dead_lettered
        assert _drain(emu.connection_string) == bodies[len(dead_lettered) :]


def test_a_restart_on_a_full_disk_drops_a_torn_last_record_and_appends_after_it(
    small_disk: Path,
) -> None:
    data = small_disk / "data"
    with start_in_background(config=CONFIG, data_dir=data) as emu:
        _send(emu.connection_string, "kept")
    with (data / JOURNAL_NAME).open("ab") as journal_file:
        journal_file.write(b'0123abcd {"o":"a","e":')  # a crash in the middle of a write
    fill(small_disk)

    with start_in_background(config=CONFIG, data_dir=data) as emu:
        assert _peek(emu.connection_string) == ["kept"]
        free_space(small_disk)
        assert wait_until(lambda: _sent(emu.connection_string, "after"), timeout=10)

    with start_in_background(config=CONFIG, data_dir=data) as emu:
        assert _drain(emu.connection_string) == ["kept", "after"]


def _batch_config() -> dict[str, Any]:
    return topic_config(
        topic_entry("events", subscription_entry("a"), subscription_entry("b")),
        queues=(queue_entry(QUEUE),),
    )


@pytest.mark.parametrize(
    ("sender_for", "entities"),
    [
        (lambda client: client.get_queue_sender(QUEUE), [QUEUE]),
        (
            lambda client: client.get_topic_sender("events"),
            ["events/subscriptions/a", "events/subscriptions/b"],
        ),
    ],
    ids=["queue", "topic"],
)
def test_a_batch_cut_at_any_byte_restores_all_of_it_or_none(
    tmp_path: Path, sender_for: Any, entities: list[str]
) -> None:
    data = tmp_path / "data"
    journal_path = data / JOURNAL_NAME
    batch_ids = {f"batch-{n}" for n in range(10)}
    emu = start_in_background(config=_batch_config(), data_dir=data)
    try:
        with _client(emu.connection_string) as client, sender_for(client) as sender:
            sender.send_messages(ServiceBusMessage("before", message_id="before"))
            start = journal_path.stat().st_size  # acknowledged: written before the answer
            batch = sender.create_message_batch()
            for message_id in sorted(batch_ids):
                batch.add_message(ServiceBusMessage(message_id, message_id=message_id))
            sender.send_messages(batch)
            end = journal_path.stat().st_size
    finally:
        emu.stop()
    written = journal_path.read_bytes()[:end]
    assert end > start

    cut_journal = tmp_path / "cut" / JOURNAL_NAME
    cut_journal.parent.mkdir()
    for cut in range(start, end + 1):
        cut_journal.write_bytes(written[:cut])
        state = read_journal(cut_journal)
        for entity in entities:
            ids = {fields.get("id") for fields in state.messages[entity].values()}
            assert "before" in ids
            expected = batch_ids if cut == end else set()
            assert ids - {"before"} == expected, f"cut at byte {cut} of {start}..{end}"
