"""The core's worker (`exactly_once.worker`) on our Service Bus emulator through the real SDK,
with handlers of a user's own: a decision type that is not the core's, a subscription instead
of a queue, and the sessions of a session-enabled queue. (The guide's test runs the README's
worker on a queue; tests/integration/test_worker.py the loop's stop, grace and slots.)"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from exactly_once.worker import WorkerOptions, WorkerStats, run_session_worker, run_worker
from servicebus_emulator import RunningEmulator, start_in_background

TOPIC, SUBSCRIPTION, SESSIONS = "events", "audit", "by-user"


def entity(name: str, *, sessions: bool = False) -> dict[str, Any]:
    return {
        "Name": name,
        "Properties": {
            "DeadLetteringOnMessageExpiration": True,
            "DefaultMessageTimeToLive": "PT1H",
            "LockDuration": "PT30S",
            "MaxDeliveryCount": 10,
            "RequiresSession": sessions,
        },
    }


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    """A topic with one subscription, and a session-enabled queue."""
    topic = {"Name": TOPIC, "Properties": {}, "Subscriptions": [entity(SUBSCRIPTION)]}
    namespace = {
        "Name": "sbemulatorns",
        "Queues": [entity(SESSIONS, sessions=True)],
        "Topics": [topic],
    }
    config = {"UserConfig": {"Namespaces": [namespace], "Logging": {"Type": "Console"}}}
    running = start_in_background(config=config)
    yield running
    running.stop()


@dataclass(frozen=True)
class Verdict:
    """A user's own decision type: not the core's `Decision`, but `Settleable`."""

    settlement: str
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"{what} not within {within} s"
        await asyncio.sleep(0.1)  # polling the broker's state, bounded by the deadline


async def peeked(receiver: ServiceBusReceiver) -> list[ServiceBusReceivedMessage]:
    return list(await receiver.peek_messages(max_message_count=50, sequence_number=1))


async def test_a_subscription_with_a_decision_type_of_the_users_own(
    emulator: RunningEmulator,
) -> None:
    handled: list[str] = []

    async def handle(message: ServiceBusReceivedMessage) -> Verdict:
        body = b"".join(message.body).decode()
        handled.append(body)
        if body == "not for us":
            return Verdict("dead_letter", "NotForUs", f"{message.message_id} is not ours")
        return Verdict("complete")

    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_topic_sender(TOPIC) as sender:
            await sender.send_messages(
                [ServiceBusMessage(body) for body in ("one", "not for us", "two")]
            )
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(
                client,
                topic_name=TOPIC,
                subscription_name=SUBSCRIPTION,
                handle=handle,
                options=WorkerOptions(concurrency=2),
                stop=stop,
            )
        )
        async with (
            client.get_subscription_receiver(TOPIC, SUBSCRIPTION) as active,
            client.get_subscription_receiver(
                TOPIC, SUBSCRIPTION, sub_queue=ServiceBusSubQueue.DEAD_LETTER
            ) as dead,
        ):

            async def settled() -> bool:
                return not await peeked(active) and len(await peeked(dead)) == 1

            await until(settled, "every message settled")
            [letter] = await peeked(dead)
        stop.set()
        stats = await asyncio.wait_for(worker, 30)

    assert sorted(handled) == ["not for us", "one", "two"]
    assert (letter.dead_letter_reason, b"".join(letter.body)) == ("NotForUs", b"not for us")
    assert stats == WorkerStats(received=3, settled=3, settlement_failures=0)


async def test_sessions_are_decided_one_message_at_a_time_in_order(
    emulator: RunningEmulator,
) -> None:
    users = [f"user-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    handled: dict[str, list[int]] = {user: [] for user in users}
    deciding: set[str] = set()
    overlapped: list[str] = []

    async def handle(message: ServiceBusReceivedMessage) -> Verdict:
        session = str(message.session_id)
        if session in deciding:
            overlapped.append(session)
        deciding.add(session)
        await asyncio.sleep(0)  # give another task of the same session a turn, if there were one
        handled[session].append(int(b"".join(message.body)))
        deciding.discard(session)
        return Verdict("complete")

    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(SESSIONS) as sender:
            await sender.send_messages(
                [
                    ServiceBusMessage(str(number), session_id=user)
                    for number in range(4)
                    for user in users
                ]
            )
        stop = asyncio.Event()
        worker = asyncio.create_task(
            run_session_worker(
                client,
                queue_name=SESSIONS,
                handle=handle,
                options=WorkerOptions(concurrency=2, receive_wait_seconds=0.5),
                stop=stop,
            )
        )

        async def all_handled() -> bool:
            assert not worker.done(), "the session worker ended before `stop`"
            return all(len(numbers) == 4 for numbers in handled.values())

        await until(all_handled, "every session's messages decided")
        stop.set()
        stats = await asyncio.wait_for(worker, 30)

    assert handled == {user: [0, 1, 2, 3] for user in users}
    assert overlapped == []
    # Settled means the broker confirmed each completion (the SDK waits for it).
    assert stats == WorkerStats(received=12, settled=12, settlement_failures=0)


async def test_a_worker_needs_a_queue_or_a_topic_with_a_subscription() -> None:
    async def handle(message: ServiceBusReceivedMessage) -> Verdict:
        return Verdict("complete")

    client = ServiceBusClient.from_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey=v;"
        "UseDevelopmentEmulator=true;"
    )
    stop = asyncio.Event()
    async with client:
        with pytest.raises(ValueError, match="a queue, or for a topic"):
            await run_worker(client, handle=handle, stop=stop, topic_name=TOPIC)
        with pytest.raises(ValueError, match="a queue, or for a topic"):
            await run_worker(client, handle=handle, stop=stop, queue_name="q", topic_name=TOPIC)
        with pytest.raises(ValueError, match="a queue, or for a topic"):
            await run_worker(client, handle=handle, stop=stop)
