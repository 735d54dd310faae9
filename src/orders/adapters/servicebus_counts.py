"""Message counts of a queue or subscription by peeking over AMQP.

The administration client (runtime properties) speaks HTTP management, which neither our
emulator nor the official one serves; peeking works on all three and needs only the data-plane
role the operator tools already have. It reads every message, so each sub-queue is counted up
to a limit and shown as "limit+" beyond it.
"""

from __future__ import annotations

import asyncio

from azure.servicebus import ServiceBusMessageState, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from orders.service.ports import EntityCounts
from orders.service.subscribers import Source

PEEK_PAGE = 250


class ServiceBusEntityCounter:
    """`EntityCounter` over one Service Bus client."""

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client

    def _receiver(self, source: Source, sub_queue: ServiceBusSubQueue | None) -> ServiceBusReceiver:
        if source.queue is not None:
            return self._client.get_queue_receiver(source.queue, sub_queue=sub_queue)
        assert source.topic is not None and source.subscription is not None
        return self._client.get_subscription_receiver(
            source.topic, source.subscription, sub_queue=sub_queue
        )

    async def _states(
        self, source: Source, sub_queue: ServiceBusSubQueue | None, limit: int
    ) -> list[ServiceBusMessageState | None]:
        states: list[ServiceBusMessageState | None] = []
        async with self._receiver(source, sub_queue) as receiver:
            next_sequence = 1
            while len(states) < limit:
                page = await receiver.peek_messages(
                    max_message_count=min(PEEK_PAGE, limit - len(states)),
                    sequence_number=next_sequence,
                )
                if not page:
                    break
                states.extend(message.state for message in page)
                next_sequence = (page[-1].sequence_number or 0) + 1
        return states

    async def count(self, source: Source, limit: int) -> EntityCounts:
        # Both sub-queues at once: opening a receiver link is most of a small count's time.
        main, dead = await asyncio.gather(
            self._states(source, None, limit),
            self._states(source, ServiceBusSubQueue.DEAD_LETTER, limit),
        )
        scheduled = sum(1 for state in main if state == ServiceBusMessageState.SCHEDULED)
        # Deferred messages count as active, as Service Bus's own active count does.
        return EntityCounts(source, len(main) - scheduled, scheduled, len(dead), limit)
