"""Persistence (`data_dir=` / `--data`): what a restart keeps and what it must not bring back,
through the real SDK against an emulator stopped and started again on the same directory."""

from __future__ import annotations

import datetime
import json
import os
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import ServiceBusConnectionError, ServiceBusError
from sb_receive import receive_all
from sb_support import queue_config, queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, journal, start_in_background
from servicebus_emulator.__main__ import main
from servicebus_emulator.journal import JOURNAL_NAME, JournalError

Restart = Callable[[], RunningEmulator]


@pytest.fixture
def config(queue_name: str) -> dict[str, Any]:
    """A queue (`queue_name`), a session queue, and a topic with two subscriptions."""
    return topic_config(
        topic_entry(
            "events",
            subscription_entry("audit"),
            subscription_entry("billing"),
            DuplicateDetectionHistoryTimeWindow="PT5M",
        ),
        queues=(
            queue_entry(
                queue_name, LockDuration="PT30S", DuplicateDetectionHistoryTimeWindow="PT5M"
            ),
            queue_entry("sessions", RequiresSession=True, RequiresDuplicateDetection=False),
        ),
    )


@pytest.fixture
def restart(config: dict[str, Any], tmp_path: Path) -> Iterator[Restart]:
    """Start the emulator on `tmp_path/data`, stopping the one running before (one at a time)."""
    running: list[RunningEmulator] = []

    def start() -> RunningEmulator:
        for emu in running:
            emu.stop()
        running.clear()
        running.append(start_in_background(config=config, data_dir=tmp_path / "data"))
        return running[0]

    yield start
    for emu in running:
        emu.stop()


def _client(emu: RunningEmulator) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(emu.connection_string, retry_total=0)


def _send(emu: RunningEmulator, queue: str, *messages: ServiceBusMessage) -> None:
    with _client(emu) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages(list(messages))


def _drain(
    emu: RunningEmulator, queue: str, sub_queue: ServiceBusSubQueue | None = None
) -> list[ServiceBusReceivedMessage]:
    """Receive and complete everything there; returns what came."""
    with _client(emu) as client, client.get_queue_receiver(queue, sub_queue=sub_queue) as receiver:
        # 0.5 s for a peeked message to arrive: the SDK's own latency here is milliseconds.
        return receive_all(receiver, wait=0.5)


def test_restart_keeps_messages_and_their_delivery_counts_and_sequence_numbers(
    restart: Restart, queue_name: str
) -> None:
    emu = restart()
    _send(emu, queue_name, *(ServiceBusMessage(f"m{i}", message_id=f"m{i}") for i in range(4)))
    with _client(emu) as client, client.get_queue_receiver(queue_name) as receiver:
        first, second = receiver.receive_messages(max_message_count=2, max_wait_time=5)
        receiver.complete_message(first)
        receiver.abandon_message(second)  # delivery count 1

    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("after", message_id="after"))
    got = _drain(emu, queue_name)

    assert [(str(m), m.sequence_number, m.delivery_count) for m in got] == [
        ("m1", 2, 1),
        ("m2", 3, 0),
        ("m3", 4, 0),
        ("after", 5, 0),  # numbering goes on where it stopped, completed m0 included
    ]


def test_settled_messages_do_not_come_back(restart: Restart, queue_name: str) -> None:
    emu = restart()
    _send(emu, queue_name, *(ServiceBusMessage(f"m{i}", message_id=f"m{i}") for i in range(3)))
    assert len(_drain(emu, queue_name)) == 3
    _send(emu, queue_name, ServiceBusMessage("deleted", message_id="deleted"))
    with (
        _client(emu) as client,
        client.get_queue_receiver(
            queue_name, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver,
    ):
        assert [str(m) for m in receiver.receive_messages(max_wait_time=5)] == ["deleted"]

    emu = restart()

    assert _drain(emu, queue_name) == []


@pytest.mark.slow
def test_dead_letter_queue_and_max_delivery_count_survive(
    restart: Restart, queue_name: str
) -> None:
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("bad", message_id="bad"))
    _send(emu, queue_name, ServiceBusMessage("poison", message_id="poison"))
    with _client(emu) as client, client.get_queue_receiver(queue_name) as receiver:
        (bad,) = receiver.receive_messages(max_wait_time=5)
        receiver.dead_letter_message(bad, reason="Invalid", error_description="no order id")
        for _ in range(3):  # MaxDeliveryCount 3
            (poison,) = receiver.receive_messages(max_wait_time=5)
            receiver.abandon_message(poison)

    emu = restart()
    dead = _drain(emu, queue_name, ServiceBusSubQueue.DEAD_LETTER)

    assert [(str(m), m.dead_letter_reason) for m in dead] == [
        ("bad", "Invalid"),
        ("poison", "MaxDeliveryCountExceeded"),
    ]
    assert dead[0].dead_letter_error_description == "no order id"
    assert _drain(emu, queue_name) == []
    emu = restart()
    assert _drain(emu, queue_name, ServiceBusSubQueue.DEAD_LETTER) == []  # completed there


def test_scheduled_messages_survive_and_can_be_cancelled_after_restart(
    restart: Restart, queue_name: str
) -> None:
    emu = restart()
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    with _client(emu) as client, client.get_queue_sender(queue_name) as sender:
        sender.schedule_messages(ServiceBusMessage("soon", message_id="soon"), soon)
        (later_seq,) = sender.schedule_messages(
            ServiceBusMessage("later", message_id="later"), later
        )

    emu = restart()
    with _client(emu) as client:
        with client.get_queue_receiver(queue_name) as receiver:
            peeked = receiver.peek_messages(max_message_count=10)
            assert [(str(m), m.state.name) for m in peeked] == [
                ("soon", "SCHEDULED"),
                ("later", "SCHEDULED"),
            ]
            (activated,) = receiver.receive_messages(max_wait_time=10)
            assert str(activated) == "soon"
            enqueued = activated.enqueued_time_utc
            assert enqueued is not None and enqueued >= soon.replace(microsecond=0)
            receiver.complete_message(activated)
        with client.get_queue_sender(queue_name) as sender:
            sender.cancel_scheduled_messages(later_seq)

    emu = restart()
    with _client(emu) as client, client.get_queue_receiver(queue_name) as receiver:
        assert receiver.peek_messages(max_message_count=10) == []


def test_duplicate_detection_history_survives(restart: Restart, queue_name: str) -> None:
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("first", message_id="order-1"))
    assert [str(m) for m in _drain(emu, queue_name)] == ["first"]

    emu = restart()
    _send(
        emu,
        queue_name,
        ServiceBusMessage("again", message_id="order-1"),
        ServiceBusMessage("other", message_id="order-2"),
    )

    assert [str(m) for m in _drain(emu, queue_name)] == ["other"]


def test_deferred_messages_and_session_state_survive(restart: Restart, queue_name: str) -> None:
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("later", message_id="d1"))
    _send(emu, "sessions", ServiceBusMessage("s-msg", session_id="order-7"))
    with _client(emu) as client:
        with client.get_queue_receiver(queue_name) as receiver:
            (msg,) = receiver.receive_messages(max_wait_time=5)
            receiver.defer_message(msg)
            deferred_seq = msg.sequence_number
            assert deferred_seq is not None
        with client.get_queue_receiver("sessions", session_id="order-7") as receiver:
            assert receiver.session is not None
            receiver.session.set_state(b"step-2")

    emu = restart()
    with _client(emu) as client:
        with client.get_queue_receiver(queue_name) as receiver:
            assert receiver.receive_messages(max_wait_time=1) == []  # deferred, not available
            (msg,) = receiver.receive_deferred_messages([deferred_seq])
            assert str(msg) == "later"
            receiver.complete_message(msg)
        with client.get_queue_receiver("sessions", session_id="order-7") as receiver:
            assert receiver.session is not None
            assert receiver.session.get_state() == b"step-2"
            (msg,) = receiver.receive_messages(max_wait_time=5)
            assert str(msg) == "s-msg"
            receiver.complete_message(msg)


@pytest.mark.slow
def test_topic_copies_subscription_dead_letters_and_topic_dedup_survive(
    restart: Restart,
) -> None:
    emu = restart()
    with _client(emu) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage("e1", message_id="e1"))
            sender.send_messages(ServiceBusMessage("e2", message_id="e2"))
        with client.get_subscription_receiver("events", "audit") as receiver:
            (e1,) = receiver.receive_messages(max_wait_time=5)
            receiver.dead_letter_message(e1, reason="audit-failed")

    emu = restart()
    with _client(emu) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage("dup", message_id="e1"))  # within the window
            sender.send_messages(ServiceBusMessage("e3", message_id="e3"))
        received: dict[str, list[tuple[str, int | None]]] = {}
        for name, sub_queue in (
            ("audit", None),
            ("audit-dlq", ServiceBusSubQueue.DEAD_LETTER),
            ("billing", None),
        ):
            subscription = name.removesuffix("-dlq")
            with client.get_subscription_receiver(
                "events", subscription, sub_queue=sub_queue
            ) as receiver:
                got = receive_all(receiver, wait=1)
                received[name] = [(str(m), m.sequence_number) for m in got]

    assert received == {
        "audit": [("e2", 2), ("e3", 3)],
        "audit-dlq": [("e1", 1)],
        "billing": [("e1", 1), ("e2", 2), ("e3", 3)],
    }


def test_a_lock_lost_to_a_restart_counts_as_a_delivery_attempt(
    restart: Restart, queue_name: str
) -> None:
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("last-try", message_id="last-try"))
    client = _client(emu)
    receiver = client.get_queue_receiver(queue_name)
    for _ in range(2):  # MaxDeliveryCount 3: two attempts used
        (msg,) = receiver.receive_messages(max_wait_time=5)
        receiver.abandon_message(msg)
    _send(emu, queue_name, ServiceBusMessage("held", message_id="held"))
    held = receiver.receive_messages(max_message_count=2, max_wait_time=5)
    assert sorted(str(m) for m in held) == ["held", "last-try"]
    # The emulator goes away while both are locked and never settled.
    emu = restart()
    with pytest.raises(Exception):  # noqa: B017 - whatever the SDK makes of the dead link
        receiver.complete_message(held[0])
    client.close()

    again = _drain(emu, queue_name)
    dead = _drain(emu, queue_name, ServiceBusSubQueue.DEAD_LETTER)

    assert [(str(m), m.delivery_count) for m in again] == [("held", 1)]
    assert [(str(m), m.dead_letter_reason, m.delivery_count) for m in dead] == [
        ("last-try", "MaxDeliveryCountExceeded", 3)
    ]


@pytest.mark.slow
def test_compaction_keeps_only_the_live_state(
    restart: Restart, queue_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "COMPACT_MIN_BYTES", 4096)
    emu = restart()
    _send(emu, "sessions", ServiceBusMessage("kept", session_id="s"))
    for _ in range(3):  # about 24 KB of records each round
        _send(emu, queue_name, *(ServiceBusMessage(b"x" * 800) for _ in range(20)))
        assert len(_drain(emu, queue_name)) == 20
    the_journal = emu.broker.journal
    assert the_journal is not None
    assert emu.call(lambda: the_journal.compactions) > 1  # at start, then as it grew
    journal_file = tmp_path / "data" / JOURNAL_NAME

    emu = restart()
    records = [json.loads(line[9:]) for line in journal_file.read_bytes().splitlines()]
    assert [r["e"] for r in records if r["o"] == "a"] == ["sessions"]  # only the live message
    assert {r["e"]: r["n"] for r in records if r["o"] == "n"}[queue_name] == 61
    with _client(emu) as client, client.get_queue_receiver("sessions", session_id="s") as rcv:
        assert [(str(m), m.sequence_number) for m in rcv.receive_messages(max_wait_time=5)] == [
            ("kept", 1)
        ]


def test_a_torn_last_record_is_ignored(restart: Restart, queue_name: str, tmp_path: Path) -> None:
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("kept", message_id="kept"))
    emu.stop()
    journal_file = tmp_path / "data" / JOURNAL_NAME
    with journal_file.open("ab") as f:
        f.write(b'0badc0de {"o":"a","e":"')  # a crash in the middle of a write

    emu = restart()

    assert [str(m) for m in _drain(emu, queue_name)] == ["kept"]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda lines: [lines[0], b"garbage", *lines[1:]], id="garbage-line"),
        pytest.param(lambda lines: [lines[0].replace(b'"n":', b'"N":'), *lines[1:]], id="checksum"),
        pytest.param(
            lambda lines: [b"%08x " % zlib.crc32(b"[]") + b"[]", *lines],
            id="valid-checksum-bad-record",
        ),
        pytest.param(lambda lines: [b"\xff" * 64, *lines], id="binary"),
    ],
)
def test_a_corrupt_record_before_the_end_is_a_clear_error(
    restart: Restart,
    queue_name: str,
    tmp_path: Path,
    config: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[list[bytes]], list[bytes]],
) -> None:
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("kept", message_id="kept"))
    emu.stop()
    journal_file = tmp_path / "data" / JOURNAL_NAME
    lines = journal_file.read_bytes().splitlines()
    journal_file.write_bytes(b"\n".join(damage(lines)) + b"\n")

    with pytest.raises(JournalError, match=r"record [12] .* (is corrupt|is invalid)"):
        start_in_background(config=config, data_dir=tmp_path / "data")
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config))
    code = main(["--port", "0", "--config", str(config_file), "--data", str(tmp_path / "data")])
    assert code == 2
    assert "data error" in capsys.readouterr().err
    assert journal_file.read_bytes() == b"\n".join(damage(lines)) + b"\n"  # left as it was


def test_state_of_an_entity_the_configuration_lost_is_refused(
    restart: Restart, queue_name: str, tmp_path: Path
) -> None:
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("kept", message_id="kept"))
    emu.stop()

    with pytest.raises(JournalError, match=queue_name):
        start_in_background(config=queue_config(queue_entry("other")), data_dir=tmp_path / "data")


def test_one_data_directory_serves_one_emulator(restart: Restart, tmp_path: Path) -> None:
    restart()
    with pytest.raises(JournalError, match="in use"):
        start_in_background(
            config=queue_config(queue_entry(f"q-{uuid.uuid4().hex[:6]}")),
            data_dir=tmp_path / "data",
        )


def _record(value: Any) -> bytes:
    """A journal line with a valid checksum around any JSON value."""
    text = json.dumps(value).encode()
    return b"%08x " % zlib.crc32(text) + text + b"\n"


_MESSAGE = {"s": 1, "q": 0, "x": 1, "ttl": 1, "sz": 1, "dc": 0, "st": 0, "p": "", "b": ""}


@pytest.mark.parametrize(
    "record",
    [
        pytest.param({"o": "zz", "e": "q"}, id="unknown-operation"),
        pytest.param({"o": "d", "e": "q", "s": 7}, id="removes-a-message-never-stored"),
        pytest.param({"o": "u", "e": "q", "s": 7, "dc": 1, "st": 0}, id="updates-nothing"),
        pytest.param({"o": "a", "e": "q", "m": {**_MESSAGE, "s": "1"}}, id="seq-as-text"),
        pytest.param({"o": "a", "e": "q", "m": {**_MESSAGE, "b": "!!"}}, id="body-not-base64"),
        pytest.param({"o": "a", "e": "q", "m": {**_MESSAGE, "st": 1}}, id="stored-as-locked"),
        pytest.param({"o": "a", "e": "q", "m": {**_MESSAGE, "du": "yes"}}, id="durable-text"),
        pytest.param({"o": "a", "e": 5, "m": _MESSAGE}, id="entity-not-text"),
        pytest.param({"o": "a", "e": "q"}, id="message-missing"),
        pytest.param({"o": "ss", "e": "q", "sid": None, "v": None}, id="session-id-null"),
        pytest.param({"o": "dup", "e": "q", "id": "m", "t": True}, id="time-as-bool"),
        pytest.param([[[[[]]]]], id="not-an-object"),
    ],
)
def test_hostile_journal_records_are_refused_with_their_position(
    tmp_path: Path, record: Any
) -> None:
    path = tmp_path / JOURNAL_NAME
    path.write_bytes(_record({"o": "n", "e": "q", "n": 1}) + _record(record))

    with pytest.raises(JournalError, match=r"record 2 \(byte \d+\) is invalid"):
        journal.read_journal(path)


def test_deeply_nested_journal_lines_are_corruption_not_a_crash(tmp_path: Path) -> None:
    text = b"[" * 100_000 + b"]" * 100_000
    path = tmp_path / JOURNAL_NAME
    path.write_bytes(
        b"%08x " % zlib.crc32(text) + text + b"\n" + _record({"o": "n", "e": "q", "n": 1})
    )

    with pytest.raises(JournalError, match=r"record 1 .* is corrupt"):
        journal.read_journal(path)


def test_a_journal_write_failure_stops_acknowledgements(restart: Restart, queue_name: str) -> None:
    """A write error that is not a full disk (the journal's descriptor turned read-only: EBADF;
    a full disk is test_sb_full_disk.py's): the send in flight is not acknowledged (its
    connection is closed with `amqp:internal-error`, which the SDK reports without the text),
    and every later connection is told why at its open, never a dropped socket."""
    emu = restart()
    _send(emu, queue_name, ServiceBusMessage("before", message_id="before"))
    the_journal = emu.broker.journal
    assert the_journal is not None
    read_only = os.open(the_journal.path, os.O_RDONLY)
    emu.call(os.dup2, read_only, the_journal._fd)
    os.close(read_only)

    with pytest.raises(ServiceBusError):
        _send(emu, queue_name, ServiceBusMessage("after", message_id="after"))
    with pytest.raises(ServiceBusConnectionError, match="journal could not be written"):
        _send(emu, queue_name, ServiceBusMessage("refused", message_id="refused"))

    emu = restart()
    assert [str(m) for m in _drain(emu, queue_name)] == ["before"]


def test_an_answer_leaves_only_after_the_change_it_acknowledges_is_written(
    restart: Restart, queue_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the next-loop-turn write, records reach the file only when a connection is
    # about to write its output: the ordering that makes acknowledgements durable.
    monkeypatch.setattr(
        journal.Journal, "_append", lambda self, record: self._pending.append(journal._line(record))
    )
    journal_file = tmp_path / "data" / JOURNAL_NAME
    emu = restart()

    def records(operation: str) -> list[dict[str, Any]]:
        lines = journal_file.read_bytes().splitlines()
        return [r for r in (json.loads(line[9:]) for line in lines) if r["o"] == operation]

    with _client(emu) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(ServiceBusMessage("durable", message_id="durable"))
            assert [r["m"]["id"] for r in records("a")] == ["durable"]
        with client.get_queue_receiver(queue_name) as receiver:
            (msg,) = receiver.receive_messages(max_wait_time=5)
            assert [r["s"] for r in records("l")] == [msg.sequence_number]
            receiver.complete_message(msg)
            assert [r["s"] for r in records("d")] == [msg.sequence_number]


def test_fsync_mode_keeps_messages_too(
    config: dict[str, Any], queue_name: str, tmp_path: Path
) -> None:
    with start_in_background(config=config, data_dir=tmp_path / "data", fsync=True) as emu:
        assert emu.broker.journal is not None and emu.broker.journal.fsync
        _send(emu, queue_name, ServiceBusMessage("synced", message_id="synced"))

    with start_in_background(config=config, data_dir=tmp_path / "data") as emu:
        assert [str(m) for m in _drain(emu, queue_name)] == ["synced"]


def test_a_forwarded_message_keeps_its_first_sequence_number_across_a_restart(
    tmp_path: Path,
) -> None:
    """Forwarding stamps `x-opt-enqueue-sequence-number`; the journal must keep it."""
    config = queue_config(
        queue_entry("inbound", ForwardTo="target", RequiresDuplicateDetection=False),
        queue_entry("target", RequiresDuplicateDetection=False),
    )
    data = tmp_path / "data"
    first = start_in_background(config=config, data_dir=data)
    try:
        _send(first, "inbound", ServiceBusMessage("forwarded", message_id="f-1"))
    finally:
        first.stop()
    again = start_in_background(config=config, data_dir=data)
    try:
        [message] = _drain(again, "target")
    finally:
        again.stop()
    assert str(message) == "forwarded" and message.message_id == "f-1"
    assert message.enqueued_sequence_number == 1
