"""Message counts of a queue or subscription by peeking over AMQP.

The administration client (runtime properties) speaks HTTP management, which neither our
emulator nor the official one serves; peeking works on all three and needs only the data-plane
role the operator tools already have. It reads every message, so each sub-queue is counted up
to a limit and shown as "limit+" beyond it.
"""

from __future__ import annotations

import asyncio

from azure.servicebus import ServiceBusMessageState, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

from orders.adapters.servicebus_peek import PeekReceivers
from orders.service.ports import EntityCounts
from orders.service.subscribers import Source

PEEK_PAGE = 250


class ServiceBusEntityCounter:
    """`EntityCounter` over one Service Bus client."""

    def __init__(self, client: ServiceBusClient, peeks: PeekReceivers | None = None) -> None:
        self._peeks = peeks or PeekReceivers(client)

    async def _states(
        self, source: Source, sub_queue: ServiceBusSubQueue | None, limit: int
    ) -> list[ServiceBusMessageState | None]:
        states: list[ServiceBusMessageState | None] = []
        next_sequence = 1
        while len(states) < limit:
            page = await self._peeks.peek(
                source,
                sub_queue,
                max_message_count=min(PEEK_PAGE, limit - len(states)),
                from_sequence=next_sequence,
            )
            if not page:
                break
            states.extend(message.state for message in page)
            next_sequence = (page[-1].sequence_number or 0) + 1
        return states

    async def count(self, source: Source, limit: int) -> EntityCounts:
        # Both sub-queues at once: each has a receiver of its own.
        main, dead = await asyncio.gather(
            self._states(source, None, limit),
            self._states(source, ServiceBusSubQueue.DEAD_LETTER, limit),
        )
        scheduled = sum(1 for state in main if state == ServiceBusMessageState.SCHEDULED)
        # Deferred messages count as active, as Service Bus's own active count does.
        return EntityCounts(source, len(main) - scheduled, scheduled, len(dead), limit)
