"""Persistence of messages that move between entities (dead-letter forwarding, ForwardTo, topic
fan-out, expiry), through the real SDK against the emulator as a process restarted on its
`--data` directory, by SIGTERM and by SIGKILL."""

from __future__ import annotations

import base64
import datetime
import json
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage
from sb_process import EmulatorProcess, wait_until
from sb_receive import receive_one
from sb_support import queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, start_in_background
from servicebus_emulator.journal import JOURNAL_NAME, JournalError

# `orders` and the `billing` subscription dead-letter into `errors` (ForwardDeadLetteredMessagesTo);
# `inbox` forwards everything to the `events` topic, whose `audit` subscription keeps its copies.
CONFIG = topic_config(
    topic_entry(
        "events",
        subscription_entry("billing", MaxDeliveryCount=1, ForwardDeadLetteredMessagesTo="errors"),
        subscription_entry("audit"),
        RequiresDuplicateDetection=False,
    ),
    queues=(
        queue_entry(
            "orders",
            MaxDeliveryCount=1,
            LockDuration="PT30S",
            DeadLetteringOnMessageExpiration=True,
            ForwardDeadLetteredMessagesTo="errors",
            RequiresDuplicateDetection=False,
        ),
        queue_entry("inbox", ForwardTo="events", RequiresDuplicateDetection=False),
        # The expired message keeps its one-second TTL in `errors` too, and expires there again.
        queue_entry(
            "errors",
            LockDuration="PT30S",
            DeadLetteringOnMessageExpiration=True,
            RequiresDuplicateDetection=False,
        ),
    ),
)


def _client(emulator: EmulatorProcess | RunningEmulator) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0)


def _peek(client: ServiceBusClient, queue: str, subscription: str | None = None) -> list[Any]:
    receiver = (
        client.get_queue_receiver(queue)
        if subscription is None
        else client.get_subscription_receiver(queue, subscription)
    )
    with receiver:
        return list(receiver.peek_messages(max_message_count=50, sequence_number=1))


def _dead_letter_three_ways(emulator: EmulatorProcess) -> None:
    """By hand and by expiry on `orders`, by MaxDeliveryCount on `billing`; plus a message
    that goes `inbox` -> `events` -> `billing` and `audit`."""
    with _client(emulator) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("by-hand", message_id="by-hand"))
            sender.send_messages(
                ServiceBusMessage(
                    "expires",
                    message_id="expires",
                    time_to_live=datetime.timedelta(seconds=1),  # the SDK sends whole seconds
                )
            )
        with client.get_queue_sender("inbox") as sender:
            sender.send_messages(ServiceBusMessage("poison", message_id="poison"))
        with client.get_queue_receiver("orders") as receiver:
            message = receive_one(receiver)
            assert str(message) == "by-hand"
            receiver.dead_letter_message(message, reason="Invalid", error_description="bad")
        with client.get_subscription_receiver("events", "billing") as receiver:
            message = receive_one(receiver)
            assert str(message) == "poison"
            receiver.abandon_message(message)  # MaxDeliveryCount 1: dead-lettered
        assert wait_until(lambda: len(_peek(client, "errors/$deadletterqueue")) == 1, timeout=10)
        assert len(_peek(client, "errors")) == 2


def _errors_and_sources(messages: list[ServiceBusReceivedMessage]) -> list[tuple[str, ...]]:
    return sorted((str(m), str(m.dead_letter_reason), str(m.dead_letter_source)) for m in messages)


EXPECTED_ERRORS = [
    ("by-hand", "Invalid", "orders"),
    ("poison", "MaxDeliveryCountExceeded", "events/Subscriptions/billing"),
]


@pytest.mark.slow  # about 13 s each: three emulator starts, a dozen receivers
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_forwarded_dead_letters_survive_restarts(tmp_path: Path, stop: str) -> None:
    data = ("--data", str(tmp_path / "data"))
    emulator = EmulatorProcess(CONFIG, tmp_path, data)
    try:
        _dead_letter_three_ways(emulator)
    finally:
        emulator.stop() if stop == "sigterm" else emulator.kill()

    # Before the fix this restart failed: "no message 2 in 'orders/$deadletterqueue' to
    # change", the whole data directory unreadable.
    restarted = EmulatorProcess(CONFIG, tmp_path, data)
    try:
        with _client(restarted) as client:
            assert _errors_and_sources(_peek(client, "errors")) == EXPECTED_ERRORS
            (expired,) = _peek(client, "errors/$deadletterqueue")
            assert (str(expired), expired.dead_letter_reason) == ("expires", "TTLExpiredException")
            assert _peek(client, "orders") == []
            assert [str(m) for m in _peek(client, "events", "audit")] == ["poison"]
            with client.get_queue_receiver("errors") as receiver:
                receiver.complete_message(receive_one(receiver))
    finally:
        restarted.stop()

    again = EmulatorProcess(CONFIG, tmp_path, data)
    try:
        with _client(again) as client:
            assert len(_peek(client, "errors")) == 1  # the completed one stays gone
    finally:
        again.stop()


def _line(record: dict[str, Any]) -> bytes:
    text = json.dumps(record).encode()
    return b"%08x " % zlib.crc32(text) + text + b"\n"


def _message(seq: int, body: bytes, state: int = 0, **extra: Any) -> dict[str, Any]:
    """Journal fields of a message with a data body (the encoding the SDK sends)."""
    now = int(time.time() * 1000)
    return {
        "s": seq,
        "q": now,
        "x": now + 3_600_000,
        "ttl": 3_600_000,
        "sz": 10,
        "dc": 0,
        "st": state,
        "p": "",
        "b": base64.b64encode(b"\x00Su\xa0" + bytes([len(body)]) + body).decode(),
        **extra,
    }


def _journal_written_before_the_fix(*, with_the_move: bool) -> bytes:
    """What an emulator before the fix wrote for a message dead-lettered by hand on `orders`:
    its removal from `orders/$deadletterqueue` (forwarded) first, then its copy in `errors`,
    then its move to the dead-letter queue, journaled in the GONE state."""
    records: list[dict[str, Any]] = [
        {"o": "a", "e": "orders", "m": _message(1, b"by-hand")},
        {"o": "a", "e": "orders", "m": _message(2, b"waiting")},
        {"o": "d", "e": "orders/$deadletterqueue", "s": 1},
        {"o": "a", "e": "errors", "m": _message(1, b"by-hand", dls="orders")},
    ]
    if with_the_move:
        records.append({"o": "m", "e": "orders", "m": _message(1, b"by-hand", state=4)})
    return b"".join(_line(record) for record in records)


def test_a_journal_written_before_the_fix_replays_to_the_state_it_recorded(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / JOURNAL_NAME).write_bytes(_journal_written_before_the_fix(with_the_move=True))

    with (
        start_in_background(config=CONFIG, data_dir=data) as emulator,
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
    ):
        assert [(str(m), m.dead_letter_source) for m in _peek(client, "errors")] == [
            ("by-hand", "orders")
        ]
        assert [str(m) for m in _peek(client, "orders")] == ["waiting"]


def test_an_unmatched_early_removal_is_refused_with_the_way_out(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    written = _journal_written_before_the_fix(with_the_move=False)
    (data / JOURNAL_NAME).write_bytes(written)

    with pytest.raises(JournalError, match=r"record 3 \(byte \d+\).*move the data directory"):
        start_in_background(config=CONFIG, data_dir=data)
    assert (data / JOURNAL_NAME).read_bytes() == written  # left as it was
