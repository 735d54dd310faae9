"""What a resubmit or purge does to the dead letters it was not asked to touch, through the real
SDK on our emulator: those after the selected ones are never locked; those before them are
locked and given back (Service Bus cannot receive one by its sequence number), and the command
says so before it runs and asks for confirmation."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient
from servers import CosmosServer

from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters
from orders.domain.dead_letters import Selection
from orders.service.subscribers import Source
from servicebus_emulator import RunningEmulator

QUEUE = "orders"
SOURCE = Source(queue=QUEUE)


async def refused_on_first_delivery(client: ServiceBusClient, count: int) -> list[int]:
    """`count` messages, each dead-lettered on its first delivery: their sequence numbers."""
    async with client.get_queue_sender(QUEUE) as sender:
        await sender.send_messages(
            [ServiceBusMessage(b"{oops", message_id=f"m{i}") for i in range(count)]
        )
    received: list[ServiceBusReceivedMessage] = []
    async with client.get_queue_receiver(QUEUE) as receiver:
        while len(received) < count:
            page = await receiver.receive_messages(max_message_count=count, max_wait_time=10)
            assert page, "a sent message never arrived"
            received += page
        for message in received:
            await receiver.dead_letter_message(message, reason="InvalidJson")
    return sorted(message.sequence_number or 0 for message in received)


async def delivery_counts(dead_letters: ServiceBusDeadLetters) -> dict[int, int]:
    return {dead.sequence_number: dead.delivery_count for dead in await dead_letters.browse(50)}


@pytest.mark.parametrize("action", ["purge", "resubmit"])
async def test_acting_on_the_oldest_dead_letter_touches_no_other(
    orders_queue_emulator: RunningEmulator, action: str
) -> None:
    async with ServiceBusClient.from_connection_string(
        orders_queue_emulator.connection_string
    ) as client:
        first, *others = await refused_on_first_delivery(client, 3)
        dead_letters = ServiceBusDeadLetters(client, SOURCE)
        before = await delivery_counts(dead_letters)
        selection = Selection(frozenset({first}))
        if action == "purge":
            outcome = await dead_letters.purge(selection)
        else:
            now = datetime.now(UTC)
            outcome = await dead_letters.resubmit(selection, lambda dead: None, by="t", now=now)
        after = await delivery_counts(dead_letters)

    assert outcome.done == [first] and outcome.passed_over == []
    assert after == {number: before[number] for number in others}  # counts unchanged


async def test_only_the_dead_letters_before_the_selected_one_are_passed_over(
    orders_queue_emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(
        orders_queue_emulator.connection_string
    ) as client:
        numbers = await refused_on_first_delivery(client, 4)
        dead_letters = ServiceBusDeadLetters(client, SOURCE)
        before = await delivery_counts(dead_letters)
        plan = await dead_letters.plan(Selection(frozenset({numbers[2]})), lambda dead: None)
        outcome = await dead_letters.purge(Selection(frozenset({numbers[2]})))
        after = await delivery_counts(dead_letters)

    assert plan.passed_over == tuple(numbers[:2])
    assert outcome.done == [numbers[2]] and sorted(outcome.passed_over) == numbers[:2]
    assert after == {
        numbers[0]: before[numbers[0]] + 1,
        numbers[1]: before[numbers[1]] + 1,
        numbers[3]: before[numbers[3]],  # after the selected one: never locked
    }


def orders_dlq(
    emulator: RunningEmulator, cosmos: CosmosServer, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orders", "dlq", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "ServiceBusConnection": emulator.connection_string,
             "COSMOS_ENDPOINT": cosmos.endpoint, "COSMOS_KEY": cosmos.key},
    )  # fmt: skip


@pytest.mark.slow
async def test_the_cli_says_what_it_will_do_to_the_others_and_asks_first(
    orders_queue_emulator: RunningEmulator, python_cosmos: CosmosServer
) -> None:
    async with ServiceBusClient.from_connection_string(
        orders_queue_emulator.connection_string
    ) as client:
        first, second, last = await refused_on_first_delivery(client, 3)
        dead_letters = ServiceBusDeadLetters(client, SOURCE)
        before = await delivery_counts(dead_letters)
        unconfirmed = await asyncio.to_thread(
            orders_dlq,
            orders_queue_emulator,
            python_cosmos,
            "resubmit",
            str(last),
            "--duplicate-window",
            "0",
        )
        untouched = await delivery_counts(dead_letters)
        confirmed = await asyncio.to_thread(
            orders_dlq, orders_queue_emulator, python_cosmos, "purge", str(last), "--yes"
        )
        after = await delivery_counts(dead_letters)

    assert unconfirmed.returncode == 2, unconfirmed.stderr
    assert f"[{first}, {second}]" in unconfirmed.stderr and "--yes" in unconfirmed.stderr
    assert untouched == before  # nothing was locked before the confirmation
    assert confirmed.returncode == 0, confirmed.stderr
    assert f"[{first}, {second}]" in confirmed.stderr  # said before it ran
    assert f"purged 1: [{last}]" in confirmed.stdout
    assert f"passed over 2: [{first}, {second}]" in confirmed.stdout
    assert after == {first: before[first] + 1, second: before[second] + 1}
