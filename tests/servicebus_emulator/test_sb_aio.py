"""The `azure.servicebus.aio` client: iteration, auto lock renewal, batches, peek, DLQ."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import AutoLockRenewer, ServiceBusClient
from azure.servicebus.exceptions import MessageLockLostError

from servicebus_emulator import RunningEmulator


@pytest.mark.slow
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
        seen: list[tuple[str, int | None]] = []
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


async def test_async_semantics_tour(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    """Duplicate detection, MaxDeliveryCount, broker-side lock loss, deferral, schedules and
    ReceiveAndDelete through the aio client (the sync tests cover each in depth)."""
    emulator = make_emulator(queue_name, MaxDeliveryCount=2, LockDuration="PT1S")
    queue = emulator.broker.resolve(queue_name)
    assert queue is not None
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(queue_name) as sender:
            await sender.send_messages(ServiceBusMessage("flaky", message_id="d1"))
            await sender.send_messages(ServiceBusMessage("flaky again", message_id="d1"))
            when = datetime.now(UTC) + timedelta(seconds=2)
            (scheduled_seq,) = await sender.schedule_messages(ServiceBusMessage("later"), when)
        async with client.get_queue_receiver(queue_name) as receiver:
            for attempt in range(2):
                (msg,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
                assert (str(msg), msg.delivery_count) == ("flaky", attempt)
                await receiver.abandon_message(msg)
            assert await receiver.receive_messages(max_message_count=1, max_wait_time=0.3) == []

        async with client.get_queue_sender(queue_name) as sender:
            await sender.send_messages([ServiceBusMessage("slow"), ServiceBusMessage("defer")])
        # A receiver of its own: the empty receive above can leave link credit behind, and the
        # SDK releases a message that reaches it between receive calls; "slow" could then come
        # back second (released, so uncounted) and "defer" first. "later" (sequence number 2)
        # comes before "slow" when it has activated by now: let its lock lapse too (it comes
        # back below) and take the next.
        async with client.get_queue_receiver(queue_name) as receiver:
            (slow,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            if str(slow) == "later":
                (slow,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert str(slow) == "slow"
            assert slow.locked_until_utc is not None
            slow._expiry = slow.locked_until_utc + timedelta(days=1)  # the client trusts the lock
            for _ in range(100):  # poll up to 5 s for the broker to expire the 1 s lock
                if not emulator.call(
                    lambda: any(m.seq == slow.sequence_number for m in queue.locks.values())
                ):
                    break
                await asyncio.sleep(0.05)
            with pytest.raises(MessageLockLostError):
                await receiver.complete_message(slow)

            by_body: dict[str, ServiceBusReceivedMessage] = {}
            while not {"slow", "defer", "later"} <= set(by_body):  # "later" activates at 2 s
                more = await receiver.receive_messages(max_message_count=3, max_wait_time=5)
                assert more, f"missing messages, have {sorted(by_body)}"
                by_body.update((str(m), m) for m in more)
            assert by_body["slow"].delivery_count == 1  # redelivered after the lock expired
            await receiver.complete_message(by_body["slow"])
            later = by_body["later"]
            assert later.sequence_number == scheduled_seq
            assert later.enqueued_time_utc is not None
            assert later.enqueued_time_utc >= when - timedelta(milliseconds=1)
            await receiver.complete_message(later)
            deferred_seq = by_body["defer"].sequence_number
            assert deferred_seq is not None
            await receiver.defer_message(by_body["defer"])
            (deferred,) = await receiver.receive_deferred_messages([deferred_seq])
            await receiver.complete_message(deferred)

        async with client.get_queue_receiver(queue_name, sub_queue="deadletter") as dlq:
            (dead,) = await dlq.receive_messages(max_message_count=1, max_wait_time=5)
            assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
            await dlq.complete_message(dead)

        async with client.get_queue_sender(queue_name) as sender:
            await sender.send_messages(ServiceBusMessage("once"))
        async with client.get_queue_receiver(
            queue_name, receive_mode="receiveanddelete"
        ) as deleting:
            (once,) = await deleting.receive_messages(max_message_count=1, max_wait_time=5)
            assert str(once) == "once"
        assert emulator.call(lambda: len(queue.messages)) == 0
