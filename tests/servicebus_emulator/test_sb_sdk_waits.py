"""The test run's short waits in azure-servicebus (tests/sdk_waits.py, installed by
tests/conftest.py): a sender or receiver opens without the SDK's 50 ms polls and closes at once
instead of waiting out its keep-alive loop's one-second sleep, and that loop still listens on
the connection at its interval."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from sdk_waits import SDK_TICK_SECONDS

from servicebus_emulator import RunningEmulator

CYCLES = 3
# The SDK's 50 ms polls alone spend about 0.4 s of each open against our emulator.
OPEN_BUDGET_SECONDS = 0.25


def test_senders_and_receivers_open_without_the_sdks_polls(
    emulator: RunningEmulator, queue_name: str
) -> None:
    opening: list[float] = []
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        for _ in range(CYCLES):
            for handler in (
                client.get_queue_sender(queue_name),
                client.get_queue_receiver(queue_name),
            ):
                started = time.monotonic()
                with handler:
                    opening.append(time.monotonic() - started)

    assert sum(opening) < 2 * CYCLES * OPEN_BUDGET_SECONDS, opening


async def test_async_senders_and_receivers_open_without_the_sdks_polls(
    emulator: RunningEmulator, queue_name: str
) -> None:
    opening: list[float] = []
    async with AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client:
        for _ in range(CYCLES):
            for handler in (
                client.get_queue_sender(queue_name),
                client.get_queue_receiver(queue_name),
            ):
                started = time.monotonic()
                async with handler:
                    opening.append(time.monotonic() - started)

    assert sum(opening) < 2 * CYCLES * OPEN_BUDGET_SECONDS, opening


def test_senders_and_receivers_close_without_waiting_for_the_keep_alive_tick(
    emulator: RunningEmulator, queue_name: str
) -> None:
    closing: list[float] = []
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        for cycle in range(CYCLES):
            sender = client.get_queue_sender(queue_name)
            sender.send_messages(ServiceBusMessage(f"m-{cycle}"))
            started = time.monotonic()
            sender.close()
            closing.append(time.monotonic() - started)
            receiver = client.get_queue_receiver(queue_name)
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(message)
            started = time.monotonic()
            receiver.close()
            closing.append(time.monotonic() - started)

    # The SDK's own loop makes each close wait for the rest of its one-second tick.
    assert sum(closing) < SDK_TICK_SECONDS, closing


async def test_an_async_sender_closes_without_waiting_for_the_keep_alive_tick(
    emulator: RunningEmulator, queue_name: str
) -> None:
    closing: list[float] = []
    async with AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client:
        for cycle in range(CYCLES):
            sender = client.get_queue_sender(queue_name)
            await sender.send_messages(ServiceBusMessage(f"m-{cycle}"))
            started = time.monotonic()
            await sender.close()
            closing.append(time.monotonic() - started)
    assert sum(closing) < SDK_TICK_SECONDS, closing


def test_the_keep_alive_loop_still_listens_at_its_interval(
    emulator: RunningEmulator, queue_name: str
) -> None:
    listened_from: list[str] = []
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(queue_name) as sender,
    ):
        sender.send_messages(ServiceBusMessage("opens the link"))
        # The loop reads the interval on every tick: one second instead of the default 30.
        sender._handler._keep_alive_interval = 1
        connection: Any = sender._handler._connection
        listen = connection.listen
        listened = threading.Event()

        def recorded_listen(*args: Any, **kwargs: Any) -> Any:
            listened_from.append(threading.current_thread().name)
            listened.set()
            return listen(*args, **kwargs)

        connection.listen = recorded_listen
        listened.wait(timeout=5 * SDK_TICK_SECONDS)
        connection.listen = listen

    assert listened_from, "the keep-alive loop never listened on the idle connection"
    assert threading.main_thread().name not in listened_from


async def test_an_async_keep_alive_loop_still_listens_at_its_interval(
    emulator: RunningEmulator, queue_name: str
) -> None:
    async with (
        AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(queue_name) as sender,
    ):
        await sender.send_messages(ServiceBusMessage("opens the link"))
        sender._handler._keep_alive_interval = 1  # instead of the default 30
        connection: Any = sender._handler._connection
        listen = connection.listen
        listened = asyncio.Event()

        async def recorded_listen(*args: Any, **kwargs: Any) -> Any:
            listened.set()
            return await listen(*args, **kwargs)

        connection.listen = recorded_listen
        try:
            await asyncio.wait_for(listened.wait(), timeout=5 * SDK_TICK_SECONDS)
        finally:
            connection.listen = listen
