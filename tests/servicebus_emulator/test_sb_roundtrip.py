"""Send, PeekLock receive and complete through the real SDK, sync and aio."""

from __future__ import annotations

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from servicebus_emulator import RunningEmulator


def test_send_receive_complete_sync(emulator: RunningEmulator, queue_name: str) -> None:
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(ServiceBusMessage(b"hello", message_id="m-1"))
        with client.get_queue_receiver(queue_name, max_wait_time=5) as receiver:
            (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert b"".join(msg.body) == b"hello"
            assert msg.message_id == "m-1"
            assert msg.sequence_number == 1
            assert msg.delivery_count == 0
            assert msg.lock_token is not None
            assert msg.locked_until_utc is not None
            assert msg.enqueued_time_utc is not None
            receiver.complete_message(msg)
        # Completed means gone: a peek sees every message, locked or not, and answers at once
        # (an empty receive would wait, and could not see the message still locked).
        with client.get_queue_receiver(queue_name) as receiver:
            assert receiver.peek_messages(max_message_count=1, sequence_number=1) == []


async def test_send_receive_complete_aio(emulator: RunningEmulator, queue_name: str) -> None:
    async with AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(queue_name) as sender:
            await sender.send_messages(ServiceBusMessage("x", message_id="a-1"))
        async with client.get_queue_receiver(queue_name, max_wait_time=5) as receiver:
            msgs = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [str(m) for m in msgs] == ["x"]
            await receiver.complete_message(msgs[0])
            assert await receiver.peek_messages(max_message_count=1, sequence_number=1) == []


def test_project_config_round_trip(project_emulator: RunningEmulator) -> None:
    with (
        ServiceBusClient.from_connection_string(project_emulator.connection_string) as client,
        client.get_queue_sender("orders") as sender,
        client.get_queue_receiver("orders") as receiver,
    ):
        sender.send_messages(ServiceBusMessage("order", message_id="o-1"))
        sender.send_messages(ServiceBusMessage("order again", message_id="o-1"))  # dropped
        (msg,) = receiver.receive_messages(max_message_count=5, max_wait_time=5)
        assert str(msg) == "order"
        receiver.complete_message(msg)
        # The duplicate was dropped, the original completed: nothing at all is left.
        assert receiver.peek_messages(max_message_count=1, sequence_number=1) == []
