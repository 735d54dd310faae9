"""Competing consumers on many connections: one lock holder per message, credit respected."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.exceptions import ServiceBusError

from servicebus_emulator import RunningEmulator


def test_many_connections_each_message_processed_once(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, LockDuration="PT30S")
    total = 60
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(queue_name) as sender,
    ):
        sender.send_messages(
            [ServiceBusMessage(f"job-{i}", message_id=f"job-{i}") for i in range(total)]
        )
    seen: dict[str, list[str]] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []
    # Every receiver has its link open before any receives: on a loaded machine the first one
    # could otherwise drain the queue while the others are still connecting, and the test would
    # prove nothing about competing.
    all_open = threading.Barrier(4)

    def worker(name: str, prefetch: int) -> None:
        try:
            with (
                ServiceBusClient.from_connection_string(emulator.connection_string) as client,
                client.get_queue_receiver(queue_name, prefetch_count=prefetch) as receiver,
            ):
                all_open.wait(timeout=30)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    with lock:
                        if sum(len(v) for v in seen.values()) >= total:
                            return
                    for msg in receiver.receive_messages(max_message_count=5, max_wait_time=1):
                        with lock:
                            seen.setdefault(str(msg), []).append(name)
                        receiver.complete_message(msg)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{i}", i % 2 * 5)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    assert not errors
    assert sorted(seen) == sorted(f"job-{i}" for i in range(total))
    assert all(len(holders) == 1 for holders in seen.values()), seen
    assert len({h[0] for h in seen.values()}) > 1, "the work was not shared"


def test_credit_limits_what_one_receiver_locks(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, LockDuration="PT30S")
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(5)])
        with (
            client.get_queue_receiver(queue_name) as first,
            client.get_queue_receiver(queue_name) as second,
        ):
            (one,) = first.receive_messages(max_message_count=1, max_wait_time=5)
            queue = emulator.broker.resolve(queue_name)
            assert queue is not None
            assert emulator.call(lambda: len(queue.locks)) == 1  # credit 1: one message locked
            rest: list[ServiceBusReceivedMessage] = []
            while len(rest) < 4:
                batch = second.receive_messages(max_message_count=4, max_wait_time=5)
                assert batch, "the second receiver starved"
                rest += batch
            assert one.sequence_number not in {m.sequence_number for m in rest}
            assert emulator.call(lambda: len(queue.locks)) == 5
            for msg in rest:
                second.complete_message(msg)
            first.complete_message(one)
        assert emulator.call(lambda: len(queue.messages)) == 0


def test_unknown_entity_and_a_session_receiver_on_a_plain_queue_are_refused(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(
        emulator.connection_string, retry_total=0
    ) as client:
        try:
            with client.get_queue_sender("no-such-queue") as sender:
                sender.send_messages(ServiceBusMessage("x"))
            raise AssertionError("sending to a missing queue succeeded")
        except ServiceBusError as exc:
            assert "could not be found" in str(exc)
        try:
            with client.get_queue_receiver(queue_name, session_id="s1") as receiver:
                receiver.receive_messages(max_message_count=1, max_wait_time=1)
            raise AssertionError("a session receiver attached")
        except ServiceBusError as exc:
            assert "does not require sessions" in str(exc)


def test_unsupported_management_operation_gets_an_error_reply(
    emulator: RunningEmulator, queue_name: str
) -> None:
    from azure.servicebus._common import mgmt_handlers

    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(queue_name) as receiver,
    ):
        started = time.monotonic()
        try:
            receiver._mgmt_request_response(
                b"com.microsoft:enumerate-rules", {}, mgmt_handlers.default, timeout=10
            )
            raise AssertionError("unsupported operation succeeded")
        except ServiceBusError as exc:
            assert "not supported" in str(exc)
        assert time.monotonic() - started < 5, "the emulator did not answer promptly"
