"""The `azure.servicebus.aio` client: iteration, auto lock renewal, batches, peek, DLQ."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import AutoLockRenewer, ServiceBusClient

from servicebus_emulator import RunningEmulator


async def test_async_iteration_with_auto_lock_renewal(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, LockDuration="PT4S")
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(queue_name) as sender:
            batch = await sender.create_message_batch()
            for i in range(3):
                batch.add_message(ServiceBusMessage(f"a{i}", message_id=f"a{i}"))
            await sender.send_messages(batch)
        renewer = AutoLockRenewer(max_lock_renewal_duration=10)
        seen = []
        async with client.get_queue_receiver(
            queue_name, max_wait_time=10, auto_lock_renewer=renewer
        ) as receiver:
            async for msg in receiver:
                if not seen:
                    # Work for longer than the 4 s lock: the renewer must keep it. (Its
                    # 1 s polling cannot keep locks shorter than ~3 s, as in Service Bus.)
                    await asyncio.sleep(5)
                await receiver.complete_message(msg)
                seen.append((str(msg), msg.delivery_count))
                if len(seen) == 3:
                    break
        await renewer.close()
        assert seen == [("a0", 0), ("a1", 0), ("a2", 0)]
        async with client.get_queue_receiver(queue_name) as receiver:
            assert await receiver.peek_messages(max_message_count=5, sequence_number=1) == []


async def test_async_peek_and_dead_letter_queue(emulator: RunningEmulator, queue_name: str) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(queue_name) as sender:
            await sender.send_messages([ServiceBusMessage(f"p{i}") for i in range(3)])
        async with client.get_queue_receiver(queue_name) as receiver:
            peeked = await receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert [m.sequence_number for m in peeked] == [1, 2, 3]
            msgs = await receiver.receive_messages(max_message_count=3, max_wait_time=5)
            while len(msgs) < 3:
                msgs += await receiver.receive_messages(max_message_count=3, max_wait_time=5)
            for msg in msgs:
                await receiver.dead_letter_message(msg, reason="test", error_description="why")
        async with client.get_queue_receiver(queue_name, sub_queue="deadletter") as dlq:
            peeked = await dlq.peek_messages(max_message_count=10, sequence_number=1)
            assert [m.dead_letter_reason for m in peeked] == ["test"] * 3
            assert [m.sequence_number for m in peeked] == [1, 2, 3]
