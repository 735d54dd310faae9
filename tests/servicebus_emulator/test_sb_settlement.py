"""PeekLock settlement through the real SDK: abandon, dead-letter, defer, locks, redelivery."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import MessageLockLostError, MessageNotFoundError

from servicebus_emulator import RunningEmulator


def _send(client: ServiceBusClient, queue: str, *bodies: str) -> None:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(b, message_id=b) for b in bodies])


def _nothing_left(receiver: ServiceBusReceiver) -> bool:
    """No message in the entity, locked or not: a peek from the start sees every one, at once.

    Asked after a settlement the SDK has seen confirmed (the positive synchronisation point),
    so it checks absence without waiting for something not to happen.
    """
    return receiver.peek_messages(max_message_count=10, sequence_number=1) == []


def _receive_one(receiver: ServiceBusReceiver, wait: float = 5) -> ServiceBusReceivedMessage:
    msgs = receiver.receive_messages(max_message_count=1, max_wait_time=wait)
    assert len(msgs) == 1, "expected one message"
    return msgs[0]


def test_abandon_redelivers_with_delivery_count_plus_one(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "a")
        with client.get_queue_receiver(queue_name) as receiver:
            first = _receive_one(receiver)
            assert first.delivery_count == 0
            receiver.abandon_message(first)
            second = _receive_one(receiver)
            assert second.sequence_number == first.sequence_number
            assert second.delivery_count == 1
            assert second.lock_token != first.lock_token
            receiver.complete_message(second)


def test_dead_letter_with_reason_lands_in_dlq(emulator: RunningEmulator, queue_name: str) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "poison")
        with client.get_queue_receiver(queue_name) as receiver:
            msg = _receive_one(receiver)
            receiver.dead_letter_message(
                msg, reason="BadOrder", error_description="amount is negative"
            )
            assert _nothing_left(receiver)
        with client.get_queue_receiver(queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = _receive_one(dlq)
            assert str(dead) == "poison"
            assert dead.message_id == "poison"
            assert dead.dead_letter_reason == "BadOrder"
            assert dead.dead_letter_error_description == "amount is negative"
            assert dead.application_properties is not None
            assert dead.application_properties[b"DeadLetterReason"] == b"BadOrder"
            dlq.complete_message(dead)
            assert _nothing_left(dlq)


def test_max_delivery_count_moves_to_dlq(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, MaxDeliveryCount=2)
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "flaky")
        with client.get_queue_receiver(queue_name) as receiver:
            receiver.abandon_message(_receive_one(receiver))
            receiver.abandon_message(_receive_one(receiver))
            assert _nothing_left(receiver)
        with client.get_queue_receiver(queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = _receive_one(dlq)
            assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
            assert dead.dead_letter_error_description is not None
            assert dead.delivery_count == 2
            dlq.complete_message(dead)


def test_lock_expiry_redelivers_and_old_lock_is_lost(
    emulator: RunningEmulator, queue_name: str
) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "slow")
        with client.get_queue_receiver(queue_name) as receiver:
            first = _receive_one(receiver)
            assert first.locked_until_utc is not None
            # Lock is 2 s: the message comes back once it expires, one delivery later.
            second = _receive_one(receiver, wait=6)
            assert second.sequence_number == first.sequence_number
            assert second.delivery_count == 1
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(first)
            receiver.complete_message(second)


def test_settling_a_lock_the_broker_expired_raises_lock_lost(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    # The client still believes the lock is valid (its clock says so); the broker decides.
    emulator = make_emulator(queue_name, LockDuration="PT1S")
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "late")
        with client.get_queue_receiver(queue_name) as receiver:
            msg = _receive_one(receiver)
            assert msg.locked_until_utc is not None
            msg._expiry = msg.locked_until_utc.replace(year=msg.locked_until_utc.year + 1)
            deadline = time.monotonic() + 5
            queue = emulator.broker.resolve(queue_name)
            assert queue is not None
            while emulator.call(lambda: len(queue.locks)) and (time.monotonic() < deadline):
                time.sleep(0.05)
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(msg)


def test_renew_lock_keeps_the_message_locked(emulator: RunningEmulator, queue_name: str) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "long-job")
        with (
            client.get_queue_receiver(queue_name) as receiver,
            client.get_queue_receiver(queue_name) as competitor,
        ):
            msg = _receive_one(receiver)
            before = msg.locked_until_utc
            assert before is not None
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline:  # hold the lock well past its 2 s duration
                new_until = receiver.renew_message_lock(msg)
                assert competitor.receive_messages(max_message_count=1, max_wait_time=0.5) == []
            assert new_until > before
            assert msg.locked_until_utc == new_until
            receiver.complete_message(msg)


def test_renew_lock_of_expired_lock_fails(emulator: RunningEmulator, queue_name: str) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "x")
        with client.get_queue_receiver(queue_name) as receiver:
            msg = _receive_one(receiver)
            again = _receive_one(receiver, wait=6)  # redelivered after the lock expired
            with pytest.raises(MessageLockLostError):
                receiver.renew_message_lock(msg)
            receiver.complete_message(again)


def test_defer_and_receive_deferred(emulator: RunningEmulator, queue_name: str) -> None:
    # retry_total=0: the SDK retries message-not-found, which only slows this test down.
    with ServiceBusClient.from_connection_string(
        emulator.connection_string, retry_total=0
    ) as client:
        _send(client, queue_name, "later", "now")
        with client.get_queue_receiver(queue_name) as receiver:
            later = _receive_one(receiver)
            seq = later.sequence_number
            assert seq is not None
            receiver.defer_message(later)
            now = _receive_one(receiver)
            assert str(now) == "now"
            receiver.complete_message(now)
            # Deferred messages stay in the entity (peekable) but are never delivered again.
            [still_there] = receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert still_there.sequence_number == seq
            assert receiver.receive_messages(max_message_count=1, max_wait_time=0.5) == []
            with pytest.raises(MessageNotFoundError):
                receiver.receive_deferred_messages([seq + 1000])
            (deferred,) = receiver.receive_deferred_messages([seq])
            assert str(deferred) == "later"
            receiver.complete_message(deferred)
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert peeked == []


def test_receive_and_delete(emulator: RunningEmulator, queue_name: str) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send(client, queue_name, "one", "two")
        with client.get_queue_receiver(queue_name, receive_mode="receiveanddelete") as receiver:
            got = receiver.receive_messages(max_message_count=2, max_wait_time=5)
            while len(got) < 2:
                more = receiver.receive_messages(max_message_count=2, max_wait_time=2)
                assert more, "second message never arrived"
                got += more
            assert sorted(str(m) for m in got) == ["one", "two"]
        with client.get_queue_receiver(queue_name) as receiver:
            assert _nothing_left(receiver)


async def test_aio_abandon_dead_letter_renew(emulator: RunningEmulator, queue_name: str) -> None:
    async with AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(queue_name) as sender:
            await sender.send_messages(ServiceBusMessage("z", message_id="z"))
        async with client.get_queue_receiver(queue_name) as receiver:
            (msg,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            await receiver.renew_message_lock(msg)
            await receiver.abandon_message(msg)
            (msg,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert msg.delivery_count == 1
            await receiver.dead_letter_message(msg, reason="r", error_description="d")
        async with client.get_queue_receiver(queue_name, sub_queue="deadletter") as dlq:
            (dead,) = await dlq.receive_messages(max_message_count=1, max_wait_time=5)
            assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("r", "d")
            await dlq.complete_message(dead)
