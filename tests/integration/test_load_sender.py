"""The load's sender over our Service Bus emulator, which holds every message it receives to
256 KB as Service Bus does, management requests (a schedule) included: a load of any size is
sent and scheduled in requests that fit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusMessageState
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessageSizeExceededError

from orders.adapters.servicebus_load import ServiceBusLoadSender, to_message
from orders.domain.load_plan import LoadMix, PlannedSend, plan_load
from servicebus_emulator import RunningEmulator

# Enough orders that their messages, together, are well over one 256 KB request.
ORDERS = 2500
LIMIT = 262144


def sends() -> list[PlannedSend]:
    planned = list(plan_load(ORDERS, LoadMix(0, 0, 0, 0, 0, 0), seed=2, run_id="big").sends)
    assert sum(len(send.body) for send in planned) > 2 * LIMIT
    return planned


async def peek_all(client: ServiceBusClient, queue: str) -> dict[str, ServiceBusMessageState]:
    found: dict[str, ServiceBusMessageState] = {}
    async with client.get_queue_receiver(queue) as receiver:
        next_sequence = 1
        while page := await receiver.peek_messages(
            max_message_count=250, sequence_number=next_sequence
        ):
            found.update({str(message.message_id): message.state for message in page})
            next_sequence = (page[-1].sequence_number or 0) + 1
    return found


async def test_a_schedule_over_one_requests_limit_goes_out_in_requests_that_fit(
    orders_queue_emulator: RunningEmulator,
) -> None:
    planned = sends()
    at = datetime.now(UTC) + timedelta(hours=1)
    async with ServiceBusClient.from_connection_string(
        orders_queue_emulator.connection_string
    ) as client:
        # What the load did before: one request for the whole run, refused by the broker.
        async with client.get_queue_sender("orders") as raw:
            with pytest.raises(MessageSizeExceededError):
                await raw.schedule_messages([to_message(send) for send in planned], at)
        assert await peek_all(client, "orders") == {}

        async with ServiceBusLoadSender(client, "orders") as sender:
            await sender.schedule(planned, at)
        found = await peek_all(client, "orders")
    assert found.keys() == {send.message_id for send in planned}
    assert set(found.values()) == {ServiceBusMessageState.SCHEDULED}


async def test_a_send_over_one_batchs_limit_goes_out_in_batches_that_fit(
    orders_queue_emulator: RunningEmulator,
) -> None:
    planned = sends()
    async with ServiceBusClient.from_connection_string(
        orders_queue_emulator.connection_string
    ) as client:
        async with ServiceBusLoadSender(client, "orders") as sender:
            await sender.send(planned)
        found = await peek_all(client, "orders")
    assert found.keys() == {send.message_id for send in planned}
    assert set(found.values()) == {ServiceBusMessageState.ACTIVE}
