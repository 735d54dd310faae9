"""`list_queue_sessions` / `list_subscription_sessions` (`com.microsoft:get-message-sessions`)
through the sync and aio SDKs: the sessions with messages or state, the `state_updated_after`
filter, and the SDK's skip/top paging."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiver
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from sb_support import queue_entry, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, start_in_background

QUEUE = "sessions"
PLAIN = "plain"
TOPIC = "events"
SUBSCRIPTION = "by-order"


@pytest.fixture
def session_emulator() -> Iterator[RunningEmulator]:
    config = topic_config(
        topic_entry(TOPIC, subscription_entry(SUBSCRIPTION, RequiresSession=True)),
        queues=(
            queue_entry(QUEUE, RequiresSession=True, LockDuration="PT30S"),
            queue_entry(PLAIN),
        ),
    )
    with start_in_background(config=config) as emu:
        yield emu


def _settle_sessions(client: ServiceBusClient, entity: tuple[str, ...]) -> datetime:
    """Session `c` keeps a state and no message, session `d` neither; returns a time before
    `c`'s state was set. `entity` is (queue,) or (topic, subscription)."""

    def receiver_of(session_id: str) -> ServiceBusReceiver:
        if len(entity) == 1:
            return client.get_queue_receiver(entity[0], session_id=session_id)
        return client.get_subscription_receiver(entity[0], entity[1], session_id=session_id)

    before_state = datetime.now(UTC)
    for session_id in ("c", "d"):
        with receiver_of(session_id) as receiver:
            (message,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            if session_id == "c":
                receiver.session.set_state(b"progress")
            receiver.complete_message(message)
    return before_state


def test_queue_sessions_with_messages_or_state_and_the_updated_since_filter(
    session_emulator: RunningEmulator,
) -> None:
    with ServiceBusClient.from_connection_string(session_emulator.connection_string) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage("m", session_id=s) for s in "badc"])
        before_state = _settle_sessions(client, (QUEUE,))
        assert list(client.list_queue_sessions(QUEUE)) == ["a", "b", "c"]
        assert list(client.list_queue_sessions(QUEUE, state_updated_after=before_state)) == ["c"]
        assert list(client.list_queue_sessions(QUEUE, state_updated_after=datetime.now(UTC))) == []
        # A queue without sessions has none to list.
        assert list(client.list_queue_sessions(PLAIN)) == []


def test_subscription_sessions_are_listed_page_by_page(session_emulator: RunningEmulator) -> None:
    # 150 sessions: the SDK asks for 100 (top) and then skips them for the rest.
    ids = [f"order-{n:03}" for n in range(150)]
    with ServiceBusClient.from_connection_string(session_emulator.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            batch = sender.create_message_batch()
            for session_id in [*ids, "c", "d"]:
                batch.add_message(ServiceBusMessage("m", session_id=session_id))
            sender.send_messages(batch)
        _settle_sessions(client, (TOPIC, SUBSCRIPTION))
        listed = list(client.list_subscription_sessions(TOPIC, SUBSCRIPTION))
    assert listed == sorted([*ids, "c"])


def test_sessions_are_listed_through_the_aio_sdk(session_emulator: RunningEmulator) -> None:
    async def scenario() -> None:
        async with AsyncServiceBusClient.from_connection_string(
            session_emulator.connection_string
        ) as client:
            async with client.get_queue_sender(QUEUE) as sender:
                await sender.send_messages([ServiceBusMessage("m", session_id=s) for s in "xy"])
            before_state = datetime.now(UTC)
            async with client.get_queue_receiver(QUEUE, session_id="y") as receiver:
                await receiver.session.set_state(b"seen")
            assert [s async for s in client.list_queue_sessions(QUEUE)] == ["x", "y"]
            updated = client.list_queue_sessions(QUEUE, state_updated_after=before_state)
            assert [s async for s in updated] == ["y"]
            subscription = client.list_subscription_sessions(TOPIC, SUBSCRIPTION)
            assert [s async for s in subscription] == []

    asyncio.run(scenario())
