"""Sessions through the `azure.servicebus.aio` client: session receivers by id and next
available, one lock holder, FIFO and peek within a session, session state, session lock renewal
and expiry, and the refusals on session entities."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)
from sb_support import queue_config, queue_entry

from servicebus_emulator import RunningEmulator, start_in_background

QUEUE = "sq"  # locks last 30 s
SHORT = "sq-short"  # locks last SHORT_LOCK_S seconds (expiry and renewal)
SHORT_LOCK_S = 1.5


@pytest.fixture
def session_emulator() -> Iterator[RunningEmulator]:
    config = queue_config(
        queue_entry(QUEUE, RequiresSession=True, LockDuration="PT30S"),
        queue_entry(SHORT, RequiresSession=True, LockDuration=f"PT{SHORT_LOCK_S}S"),
    )
    with start_in_background(config=config) as emu:
        yield emu


async def receive(
    receiver: ServiceBusReceiver, count: int, wait: float = 5
) -> list[ServiceBusReceivedMessage]:
    got: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + wait
    while len(got) < count and time.monotonic() < deadline:
        got += await receiver.receive_messages(max_message_count=count - len(got), max_wait_time=1)
    return got


async def open_receiver(receiver: ServiceBusReceiver) -> None:
    async with receiver:
        await receiver.receive_messages(max_message_count=1, max_wait_time=1)


async def send(client: ServiceBusClient, queue: str, *pairs: tuple[str, str]) -> None:
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages([ServiceBusMessage(body, session_id=s) for s, body in pairs])


async def test_aio_session_receivers_fifo_peek_state_and_one_lock_holder(
    session_emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(
        session_emulator.connection_string, retry_total=0
    ) as client:
        await send(client, QUEUE, ("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3"))
        async with client.get_queue_receiver(QUEUE, session_id=NEXT_AVAILABLE_SESSION) as first:
            assert first.session.session_id == "a"
            peeked = await first.peek_messages(10, sequence_number=1)
            assert [str(m) for m in peeked] == ["a1", "a2", "a3"]  # its own session only
            got = await receive(first, 3)
            assert [str(m) for m in got] == ["a1", "a2", "a3"]
            assert await first.session.get_state() is None
            await first.session.set_state("cursor=3")
            assert await first.session.get_state() == b"cursor=3"
            with pytest.raises(SessionCannotBeLockedError):
                await open_receiver(client.get_queue_receiver(QUEUE, session_id="a"))
            async with client.get_queue_receiver(
                QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2
            ) as second:
                assert second.session.session_id == "b"
                (msg,) = await receive(second, 1)
                assert str(msg) == "b1"
                await second.complete_message(msg)
            for msg in got:
                await first.complete_message(msg)
        async with client.get_queue_receiver(QUEUE, session_id="a") as again:
            assert await again.session.get_state() == b"cursor=3"
        with pytest.raises(OperationTimeoutError):  # no session has messages
            await open_receiver(
                client.get_queue_receiver(QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1)
            )


@pytest.mark.slow
async def test_aio_session_lock_renewal_and_expiry(session_emulator: RunningEmulator) -> None:
    async with ServiceBusClient.from_connection_string(
        session_emulator.connection_string, retry_total=0
    ) as client:
        await send(client, SHORT, ("r", "r1"), ("e", "e1"))
        async with client.get_queue_receiver(SHORT, session_id="r") as renewing:
            (kept,) = await receive(renewing, 1)
            before = renewing.session.locked_until_utc
            assert before is not None
            end = time.monotonic() + SHORT_LOCK_S * 2
            renewed = before
            while time.monotonic() < end:  # renew for longer than one lock lasts
                await asyncio.sleep(SHORT_LOCK_S / 3)
                renewed = await renewing.session.renew_lock()
            assert renewed > before
            with pytest.raises(SessionCannotBeLockedError):
                await open_receiver(client.get_queue_receiver(SHORT, session_id="r"))
            await renewing.complete_message(kept)

        expiring = client.get_queue_receiver(SHORT, session_id="e", prefetch_count=0)
        async with expiring:
            (lost,) = await receive(expiring, 1)
            deadline = time.monotonic() + SHORT_LOCK_S * 4
            while True:  # not renewed: the session is free again once its lock expires
                other = client.get_queue_receiver(SHORT, session_id="e")
                try:
                    await other.__aenter__()
                    break
                except SessionCannotBeLockedError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            async with other:
                (again,) = await receive(other, 1)
                assert (str(again), again.delivery_count) == ("e1", 1)
                await other.complete_message(again)
            with pytest.raises(SessionLockLostError):
                await expiring.complete_message(lost)


async def test_aio_session_queue_refusals(session_emulator: RunningEmulator) -> None:
    async with ServiceBusClient.from_connection_string(
        session_emulator.connection_string, retry_total=0
    ) as client:
        async with client.get_queue_sender(QUEUE) as sender:
            with pytest.raises(ServiceBusError, match="SessionId"):
                await sender.send_messages(ServiceBusMessage("no session"))
            with pytest.raises(ServiceBusError, match="SessionId"):
                await sender.schedule_messages(ServiceBusMessage("no session"), _in(60))
        with pytest.raises(ServiceBusError, match="requires sessions"):
            await open_receiver(client.get_queue_receiver(QUEUE))
        assert (
            session_emulator.call(lambda: len(session_emulator.broker.queues[QUEUE].messages)) == 0
        )


def _in(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


async def test_aio_next_available_receiver_waits_for_a_session(
    session_emulator: RunningEmulator,
) -> None:
    queue = session_emulator.broker.resolve(QUEUE)
    assert queue is not None
    async with ServiceBusClient.from_connection_string(
        session_emulator.connection_string, retry_total=0
    ) as client:

        async def first_message() -> tuple[str | None, str]:
            async with client.get_queue_receiver(
                QUEUE, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=10
            ) as receiver:
                (msg,) = await receive(receiver, 1)
                await receiver.complete_message(msg)
                return receiver.session.session_id, str(msg)

        task = asyncio.create_task(first_message())
        deadline = time.monotonic() + 5
        while not session_emulator.call(lambda: len(queue._session_waiters)):
            assert time.monotonic() < deadline, "the receiver's attach never arrived"
            await asyncio.sleep(0.02)
        assert not task.done()  # its attach is not answered while no session has a message
        await send(client, QUEUE, ("late", "hello"))
        assert await asyncio.wait_for(task, 15) == ("late", "hello")
