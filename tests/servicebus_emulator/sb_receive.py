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
