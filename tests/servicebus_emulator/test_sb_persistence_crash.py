"""Crash test of persistence: SIGKILL the emulator process while SDK senders and receivers run,
restart it on the same data directory and account for every message."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageLockLostError
from sb_process import EmulatorProcess, wait_until
from sb_receive import receive_all
from sb_support import queue_config, queue_entry

QUEUE = "crash"
SENDERS = 3
RECEIVERS = 2


class Ledger:
    """What the clients were told before the crash (set.add is atomic under the GIL)."""

    def __init__(self) -> None:
        self.sent_attempted: set[str] = set()
        self.sent_acknowledged: set[str] = set()
        self.completing: set[str] = set()  # complete sent, its answer not (yet) received
        self.completed: set[str] = set()  # complete acknowledged to the receiver


def _sender(conn_str: str, number: int, ledger: Ledger, stop: threading.Event) -> None:
    try:
        with (
            ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client,
            client.get_queue_sender(QUEUE) as sender,
        ):
            batch = 0
            while not stop.is_set():
                # Alternate single messages and lists of three (one transfer, one answer).
                ids = [f"s{number}-{batch}-{k}" for k in range(1 + 2 * (batch % 2))]
                batch += 1
                ledger.sent_attempted.update(ids)
                sender.send_messages([ServiceBusMessage(i, message_id=i) for i in ids])
                ledger.sent_acknowledged.update(ids)
    except Exception:  # the emulator was killed: whatever was in flight is not acknowledged
        return


def _receiver(conn_str: str, ledger: Ledger, stop: threading.Event) -> None:
    try:
        with (
            ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client,
            client.get_queue_receiver(QUEUE) as receiver,
        ):
            while not stop.is_set():
                for msg in receiver.receive_messages(max_message_count=10, max_wait_time=0.5):
                    message_id = str(msg.message_id)
                    ledger.completing.add(message_id)
                    try:
                        receiver.complete_message(msg)
                    except MessageLockLostError:
                        ledger.completing.discard(message_id)
                        continue
                    ledger.completing.discard(message_id)
                    ledger.completed.add(message_id)
    except Exception:
        return


def _drain(conn_str: str) -> list[str]:
    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        return [str(msg.message_id) for msg in receive_all(receiver, wait=2)]


@pytest.mark.slow
def test_kill_9_mid_load_loses_no_acknowledged_send_and_revives_no_completed_message(
    tmp_path: Path,
) -> None:
    # A long lock: no message is redelivered to a second receiver before the crash.
    config = queue_config(
        queue_entry(QUEUE, LockDuration="PT1M", DuplicateDetectionHistoryTimeWindow="PT5M")
    )
    data = ("--data", str(tmp_path / "data"))
    emulator = EmulatorProcess(config, tmp_path, data)
    ledger = Ledger()
    stop = threading.Event()
    threads = [
        threading.Thread(target=_sender, args=(emulator.connection_string, n, ledger, stop))
        for n in range(SENDERS)
    ] + [
        threading.Thread(target=_receiver, args=(emulator.connection_string, ledger, stop))
        for _ in range(RECEIVERS)
    ]
    try:
        for thread in threads:
            thread.start()
        # Mid-load: both directions under way, and a backlog the receivers have not caught up.
        assert wait_until(
            lambda: (
                len(ledger.completed) >= 150
                and len(ledger.sent_acknowledged) - len(ledger.completed) >= 50
            ),
            timeout=20,
        ), (len(ledger.sent_acknowledged), len(ledger.completed))
        emulator.kill()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        stop.set()
        emulator.kill()

    restarted = EmulatorProcess(config, tmp_path, data)
    try:
        drained = _drain(restarted.connection_string)
    finally:
        restarted.stop()

    in_flight = ledger.completing
    assert len(in_flight) <= RECEIVERS  # one complete per receiver can be cut short
    # Nothing acknowledged to a sender is lost: it was completed (or being completed) before
    # the crash, or it is delivered after the restart.
    assert ledger.sent_acknowledged - ledger.completed - in_flight - set(drained) == set()
    # Nothing whose completion a receiver was told of comes back.
    assert ledger.completed & set(drained) == set()
    # Nothing appears that no sender sent, and nothing comes twice.
    assert set(drained) <= ledger.sent_attempted
    assert len(drained) == len(set(drained))
    assert drained  # the backlog the crash left behind
