"""The console's kept-open peek receivers, through the real SDK on our emulator: one receiver
per entity and sub-queue however many pages peek, every peek from the sequence number asked
for (a reused receiver would carry on where its last peek ended), and a receiver that failed
is replaced on the next peek."""

from __future__ import annotations

from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from orders.adapters.servicebus_counts import ServiceBusEntityCounter
from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters
from orders.adapters.servicebus_peek import PeekReceivers
from orders.service.subscribers import Source
from servicebus_emulator import RunningEmulator

QUEUE = "orders"
SOURCE = Source(queue=QUEUE)


class CountingClient(ServiceBusClient):
    """Remembers every receiver the code under test asks it for."""

    made: list[ServiceBusReceiver]

    def get_queue_receiver(self, queue_name: str, **kwargs: Any) -> ServiceBusReceiver:
        receiver = super().get_queue_receiver(queue_name, **kwargs)
        self.made.append(receiver)
        return receiver


def counting_client(orders_queue_emulator: RunningEmulator) -> CountingClient:
    client = CountingClient.from_connection_string(orders_queue_emulator.connection_string)
    assert isinstance(client, CountingClient)
    client.made = []
    return client


async def send(client: ServiceBusClient, bodies: list[str]) -> None:
    async with client.get_queue_sender(QUEUE) as sender:
        await sender.send_messages([ServiceBusMessage(body) for body in bodies])


async def test_pages_share_one_receiver_per_sub_queue_and_always_start_where_asked(
    orders_queue_emulator: RunningEmulator,
) -> None:
    client = counting_client(orders_queue_emulator)
    async with client:
        peeks = PeekReceivers(client)
        counter = ServiceBusEntityCounter(client, peeks)
        await send(client, ["a", "b", "c"])
        first = await counter.count(SOURCE, limit=100)
        await send(client, ["d", "e"])
        second = await counter.count(SOURCE, limit=100)
        async with client.get_queue_receiver(QUEUE) as receiver:
            [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.dead_letter_message(message, reason="Test")
        made_before_browsing = len(client.made)
        dead_letters = ServiceBusDeadLetters(client, SOURCE, peeks)
        browsed = [await dead_letters.browse(10) for _ in range(3)]
        third = await counter.count(SOURCE, limit=100)
        await peeks.close()

    assert (first.active, second.active, third.active) == (3, 5, 4)
    assert [len(page) for page in browsed] == [1, 1, 1] and third.dead_lettered == 1
    # The main queue's and the dead-letter queue's peek receivers, and the test's own receiver:
    # three counts and three browses opened nothing more.
    assert made_before_browsing == 3 and len(client.made) == 3
    assert {receiver.entity_path for receiver in client.made[:2]} == {
        QUEUE,
        f"{QUEUE}/$DeadLetterQueue",
    }


async def test_a_failed_peek_drops_its_receiver_and_the_next_peek_opens_another(
    orders_queue_emulator: RunningEmulator,
) -> None:
    client = counting_client(orders_queue_emulator)
    async with client:
        peeks = PeekReceivers(client)
        await send(client, ["a"])
        before = await peeks.peek(SOURCE, None, max_message_count=10, from_sequence=1)
        await client.made[0].close()  # the link is gone under the kept receiver
        with pytest.raises(ValueError):
            await peeks.peek(SOURCE, None, max_message_count=10, from_sequence=1)
        after = await peeks.peek(SOURCE, None, max_message_count=10, from_sequence=1)
        dead = await peeks.peek(
            SOURCE, ServiceBusSubQueue.DEAD_LETTER, max_message_count=10, from_sequence=1
        )
        await peeks.close()

    assert [str(m) for m in before] == ["a"] and [str(m) for m in after] == ["a"]
    assert dead == [] and len(client.made) == 3
