"""`receive_deferred_messages` (`com.microsoft:receive-by-sequence-number`) is bounded: one
request may name deferred messages of at most about 1 MB, since its reply carries them all in
one AMQP message; a refused request, or one naming a missing message, locks nothing."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiver
from azure.servicebus.exceptions import MessageNotFoundError, ServiceBusError

from servicebus_emulator import RunningEmulator

BIG = 250 * 1024  # four fit in one reply, five do not


def _defer_all(receiver: ServiceBusReceiver, count: int) -> list[int]:
    numbers: list[int] = []
    while len(numbers) < count:
        batch = receiver.receive_messages(max_message_count=count, max_wait_time=5)
        assert batch, "the messages to defer did not arrive"
        for message in batch:
            receiver.defer_message(message)
            numbers.append(message.sequence_number or 0)
    return numbers


def test_a_request_for_more_than_one_reply_can_carry_is_refused_and_locks_nothing(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            for i in range(5):
                sender.send_messages(ServiceBusMessage(bytes([i]) * BIG))
        with client.get_queue_receiver(queue_name) as receiver:
            numbers = _defer_all(receiver, 5)
            with pytest.raises(ServiceBusError, match="request fewer sequence numbers"):
                receiver.receive_deferred_messages(numbers)
            got = receiver.receive_deferred_messages(numbers[:4])
            (last,) = receiver.receive_deferred_messages(numbers[4:])
            for message in [*got, last]:
                receiver.complete_message(message)
    assert sorted(m.sequence_number or 0 for m in [*got, last]) == sorted(numbers)


def test_a_missing_number_locks_none_of_the_others_and_a_repeated_one_comes_once(
    emulator: RunningEmulator, queue_name: str
) -> None:
    # No retries: the SDK would retry the not-found error with backoff for ~10 s.
    with ServiceBusClient.from_connection_string(
        emulator.connection_string, retry_total=0
    ) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        with client.get_queue_receiver(queue_name) as receiver:
            first, second = sorted(_defer_all(receiver, 2))
            with pytest.raises(MessageNotFoundError):
                receiver.receive_deferred_messages([first, second + 1000])
            got = receiver.receive_deferred_messages([first, second, first])
            assert [m.sequence_number for m in got] == [first, second]
            for message in got:
                receiver.complete_message(message)
