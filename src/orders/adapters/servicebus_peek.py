"""Peeking at a queue or subscription (or its dead-letter sub-queue) through receivers kept
open: the console's pages and the operator tools peek on every request.

Opening and closing a receiver costs the SDK about a second, nearly all of it its own link
polling, while a peek on an open receiver costs milliseconds. So each
entity and sub-queue gets one receiver, opened on its first peek and kept until `close()` (or
until its client closes, which closes every receiver it made). Peeks on one receiver take
turns; one that fails drops its receiver, and the next peek opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from orders.service.subscribers import Source

_Key = tuple[str, ServiceBusSubQueue | None]


def receiver_for(
    client: ServiceBusClient, source: Source, sub_queue: ServiceBusSubQueue | None = None
) -> ServiceBusReceiver:
    if source.queue is not None:
        return client.get_queue_receiver(source.queue, sub_queue=sub_queue)
    assert source.topic is not None and source.subscription is not None
    return client.get_subscription_receiver(source.topic, source.subscription, sub_queue=sub_queue)


class PeekReceivers:
    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self._open: dict[_Key, ServiceBusReceiver] = {}
        self._turns: dict[_Key, asyncio.Lock] = {}

    async def peek(
        self,
        source: Source,
        sub_queue: ServiceBusSubQueue | None,
        *,
        max_message_count: int,
        from_sequence: int,
    ) -> list[ServiceBusReceivedMessage]:
        """Up to `max_message_count` messages from sequence number `from_sequence` on, oldest
        first (no lock, nothing removed). The sequence number is always given: a receiver
        remembers where its last peek ended, and a shared one must not."""
        key = (str(source), sub_queue)
        async with self._turns.setdefault(key, asyncio.Lock()):
            receiver = self._open.get(key)
            if receiver is None:
                receiver = self._open[key] = receiver_for(self._client, source, sub_queue)
            try:
                return await receiver.peek_messages(
                    max_message_count=max_message_count, sequence_number=from_sequence
                )
            except BaseException:
                del self._open[key]
                with contextlib.suppress(Exception):
                    await receiver.close()
                raise

    async def close(self) -> None:
        """All at once: the SDK spends up to a second closing each one."""
        receivers, self._open = list(self._open.values()), {}
        await asyncio.gather(*(receiver.close() for receiver in receivers), return_exceptions=True)
