"""Sending through the real SDK: batches, large messages, duplicate detection, TTL, schedules."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageSizeExceededError

from servicebus_emulator import RunningEmulator


def _drain(client: ServiceBusClient, queue: str, expected: int, **kwargs: object) -> list[str]:
    """Receive and complete until `expected` messages arrived (or a 10 s deadline)."""
    bodies: list[str] = []
    deadline = time.monotonic() + 10
    with client.get_queue_receiver(queue, **kwargs) as receiver:  # type: ignore[arg-type]
        while len(bodies) < expected and time.monotonic() < deadline:
            for msg in receiver.receive_messages(max_message_count=expected, max_wait_time=2):
                bodies.append(str(msg))
                receiver.complete_message(msg)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=0.3) == []
    return bodies


def test_batch_send_keeps_order_and_sequence_numbers(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            batch = sender.create_message_batch()
            for i in range(50):
                batch.add_message(
                    ServiceBusMessage(
                        f"m{i}", message_id=f"id-{i}", application_properties={"i": i}
                    )
                )
            sender.send_messages(batch)
            sender.send_messages([ServiceBusMessage("list-1"), ServiceBusMessage("list-2")])
        with client.get_queue_receiver(queue_name, prefetch_count=100) as receiver:
            got: list[ServiceBusReceivedMessage] = []
            while len(got) < 52:
                chunk = receiver.receive_messages(max_message_count=52, max_wait_time=5)
                assert chunk, "batch messages missing"
                got += chunk
            assert [m.sequence_number for m in got] == list(range(1, 53))
            assert [str(m) for m in got[:3]] == ["m0", "m1", "m2"]
            assert got[7].application_properties == {b"i": 7}
            assert got[7].message_id == "id-7"
            for m in got:
                receiver.complete_message(m)


def test_large_message_spans_several_frames(emulator: RunningEmulator, queue_name: str) -> None:
    body = bytes(range(256)) * 800  # 200 KB: several 64 KB frames each way
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(ServiceBusMessage(body, message_id="big"))
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(ServiceBusMessage(b"x" * 300_000))
        with client.get_queue_receiver(queue_name) as receiver:
            (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert b"".join(msg.body) == body
            receiver.complete_message(msg)


def test_duplicate_message_id_dropped_within_window(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(ServiceBusMessage("first", message_id="order-1"))
            sender.send_messages(ServiceBusMessage("dup", message_id="order-1"))  # acked, dropped
            sender.send_messages(ServiceBusMessage("other", message_id="order-2"))
            time.sleep(2.2)  # the configured detection window (PT2S) elapses on purpose
            sender.send_messages(ServiceBusMessage("after-window", message_id="order-1"))
        assert _drain(client, queue_name, 3) == ["first", "other", "after-window"]


def test_duplicate_detection_off_keeps_duplicates(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, RequiresDuplicateDetection=False)
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("a", message_id="same"),
                    ServiceBusMessage("b", message_id="same"),
                ]
            )
        assert _drain(client, queue_name, 2) == ["a", "b"]


def test_ttl_expiry_dead_letters_when_configured(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, DeadLetteringOnMessageExpiration=True)
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("short", time_to_live=timedelta(seconds=1)),
                    ServiceBusMessage("long"),
                ]
            )
        with client.get_queue_receiver(
            queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=3
        ) as dlq:
            (dead,) = dlq.receive_messages(max_message_count=1, max_wait_time=3)
            assert str(dead) == "short"
            assert dead.dead_letter_reason == "TTLExpiredException"
            dlq.complete_message(dead)
        assert _drain(client, queue_name, 1) == ["long"]


def test_ttl_expiry_drops_without_dead_lettering(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            msg = ServiceBusMessage("gone", time_to_live=timedelta(seconds=1))
            sender.send_messages(msg)
        time.sleep(1.2)  # let the TTL pass; nothing to poll for a message that vanishes
        with client.get_queue_receiver(queue_name) as receiver:
            assert receiver.peek_messages(max_message_count=5, sequence_number=1) == []
            assert receiver.receive_messages(max_message_count=1, max_wait_time=0.5) == []
        with client.get_queue_receiver(queue_name, sub_queue="deadletter") as dlq:
            assert dlq.peek_messages(max_message_count=5, sequence_number=1) == []


def test_peek_browses_from_the_start_without_locking(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages([ServiceBusMessage(f"p{i}") for i in range(5)])
        with client.get_queue_receiver(queue_name) as receiver:
            first = receiver.peek_messages(max_message_count=2)
            assert [m.sequence_number for m in first] == [1, 2]
            nxt = receiver.peek_messages(max_message_count=10)
            assert [m.sequence_number for m in nxt] == [3, 4, 5]
            again = receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert [str(m) for m in again] == [f"p{i}" for i in range(5)]
            with pytest.raises(ValueError):
                receiver.complete_message(again[0])  # peeked messages hold no lock
            got = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            assert got and got[0].sequence_number == 1


def test_schedule_and_cancel(emulator: RunningEmulator, queue_name: str) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            when = datetime.now(UTC) + timedelta(seconds=3)
            (keep,) = sender.schedule_messages(ServiceBusMessage("scheduled"), when)
            (drop,) = sender.schedule_messages(ServiceBusMessage("cancelled"), when)
            sender.cancel_scheduled_messages(drop)
        with client.get_queue_receiver(queue_name) as receiver:
            peeked = receiver.peek_messages(max_message_count=5, sequence_number=1)
            assert [m.sequence_number for m in peeked] == [keep]
            assert peeked[0].scheduled_enqueue_time_utc is not None
            assert receiver.receive_messages(max_message_count=1, max_wait_time=0.2) == []
            (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=8)
            assert str(msg) == "scheduled"
            assert msg.enqueued_time_utc is not None and msg.enqueued_time_utc >= when - timedelta(
                milliseconds=1
            )
            assert msg.sequence_number == keep
            receiver.complete_message(msg)
