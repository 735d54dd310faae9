"""Receive one message with a deadline (sync and aio): the positive synchronisation point the
emulator tests wait on instead of sleeping."""

from __future__ import annotations

import time

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiver
from azure.servicebus.aio import ServiceBusReceiver as AsyncServiceBusReceiver


def receive_one(receiver: ServiceBusReceiver, wait: float = 5) -> ServiceBusReceivedMessage:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=1)
        if got:
            return got[0]
    raise AssertionError("no message arrived in time")


async def receive_one_async(
    receiver: AsyncServiceBusReceiver, wait: float = 5
) -> ServiceBusReceivedMessage:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        got = await receiver.receive_messages(max_message_count=1, max_wait_time=1)
        if got:
            return got[0]
    raise AssertionError("no message arrived in time")


def receive_all(receiver: ServiceBusReceiver, wait: float) -> list[ServiceBusReceivedMessage]:
    """Receive and complete until a peek shows the entity empty; returns what came, in order.

    A peek sees every message there, locked or not, and answers at once, so the end is known
    without a receive waiting `wait` for nothing (and without the SDK draining the credit
    such a receive leaves on the link when it closes). Each receive asks for what the peek
    showed; `wait` bounds their arrival, and a peeked message that cannot be received (locked
    elsewhere, deferred) ends the loop after it, as an empty receive always did."""
    got: list[ServiceBusReceivedMessage] = []
    while there := receiver.peek_messages(max_message_count=50, sequence_number=1):
        batch = receiver.receive_messages(max_message_count=len(there), max_wait_time=wait)
        if not batch:
            break
        for message in batch:
            receiver.complete_message(message)
        got += batch
    return got
