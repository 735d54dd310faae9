"""The operators' dead-letter tools through the real SDK on our emulator: on a topic's
subscription list and purge work, resubmit refuses unless sent to the topic on purpose; on
plain and session queues and a session subscription, a resubmitted copy is the whole message."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from fakes import LAYOUT, FakeEntityCounter, FakeOrderReader, FakeOrderStore
from servers import CosmosServer

from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters
from orders.bootstrap import ConsoleRuntime, HttpRuntime
from orders.domain.dead_letters import Selection
from orders.entrypoints.http_api import create_app
from orders.entrypoints.http_hosts import AllowedHosts
from orders.exceptions import ResubmitUnsupportedError
from orders.service.console import OperationsConsole
from orders.service.subscribers import Source
from servicebus_emulator import RunningEmulator, start_in_background

TOPIC, BILLING, SHIPPING = "order-events", "billing", "shipping"


def subscription(name: str) -> dict[str, Any]:
    return {
        "Name": name,
        "Properties": {
            "DeadLetteringOnMessageExpiration": False,
            "DefaultMessageTimeToLive": "PT1H",
            "LockDuration": "PT30S",
            "MaxDeliveryCount": 3,
            "RequiresSession": False,
        },
    }


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    topic = {
        "Name": TOPIC,
        "Properties": {
            "DefaultMessageTimeToLive": "PT1H",
            "DuplicateDetectionHistoryTimeWindow": "PT20S",
            "RequiresDuplicateDetection": True,
        },
        "Subscriptions": [subscription(BILLING), subscription(SHIPPING)],
    }
    config = {
        "UserConfig": {
            "Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [topic]}],
            "Logging": {"Type": "Console"},
        }
    }
    running = start_in_background(config=config)
    yield running
    running.stop()


async def test_a_subscriptions_dead_letters_are_listed_and_purged_never_resubmitted(
    emulator: RunningEmulator,
) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_topic_sender(TOPIC) as sender:
            await sender.send_messages(ServiceBusMessage(b"{}", message_id="evt-1"))
        async with client.get_subscription_receiver(TOPIC, BILLING) as receiver:
            [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.dead_letter_message(message, reason="PaymentRefused")
        billing = ServiceBusDeadLetters(client, Source(topic=TOPIC, subscription=BILLING))
        shipping = ServiceBusDeadLetters(client, Source(topic=TOPIC, subscription=SHIPPING))

        [listed] = await billing.browse(10)
        with pytest.raises(ResubmitUnsupportedError, match="every subscription"):
            await billing.resubmit(
                Selection(everything=True), lambda dead: None, by="ops", now=datetime.now(UTC)
            )
        still = await billing.browse(10)
        purged = await billing.purge(Selection(reason="PaymentRefused"))

        assert listed.message_id == "evt-1" and listed.reason == "PaymentRefused"
        assert [dead.message_id for dead in still] == ["evt-1"]
        assert purged.done == [listed.sequence_number]
        assert await billing.browse(10) == []
        assert await shipping.browse(10) == []  # the other subscription's DLQ was never touched


# --- Resubmit keeps the message whole (issue 22.3) -------------------------------------------

PLAIN_QUEUE, SESSION_QUEUE = "orders", "order-status-sessions"
SESSION_TOPIC, SESSION_SUBSCRIPTION, OTHER_SUBSCRIPTION = "status-events", "audit", "mirror"


def entity_properties(*, sessions: bool) -> dict[str, Any]:
    # No duplicate detection: the copy keeps the MessageId and is sent at once.
    return {
        "DeadLetteringOnMessageExpiration": False,
        "DefaultMessageTimeToLive": "PT1H",
        "LockDuration": "PT30S",
        "MaxDeliveryCount": 3,
        "RequiresSession": sessions,
    }


@pytest.fixture
def sessions_emulator() -> Iterator[RunningEmulator]:
    """A plain queue, a session queue, and a topic with a session subscription beside a plain
    one."""
    topic = {
        "Name": SESSION_TOPIC,
        "Properties": {"DefaultMessageTimeToLive": "PT1H"},
        "Subscriptions": [
            {"Name": SESSION_SUBSCRIPTION, "Properties": entity_properties(sessions=True)},
            {"Name": OTHER_SUBSCRIPTION, "Properties": entity_properties(sessions=False)},
        ],
    }
    queues = [
        {"Name": PLAIN_QUEUE, "Properties": entity_properties(sessions=False)},
        {"Name": SESSION_QUEUE, "Properties": entity_properties(sessions=True)},
    ]
    config = {
        "UserConfig": {
            "Namespaces": [{"Name": "sbemulatorns", "Queues": queues, "Topics": [topic]}],
            "Logging": {"Type": "Console"},
        }
    }
    running = start_in_background(config=config)
    yield running
    running.stop()


SOURCES = {
    "plain queue": (Source(queue=PLAIN_QUEUE), None),
    "session queue": (Source(queue=SESSION_QUEUE), "order-7"),
    "session subscription": (
        Source(topic=SESSION_TOPIC, subscription=SESSION_SUBSCRIPTION),
        "order-7",
    ),
}


def produced(session_id: str | None) -> ServiceBusMessage:
    """A message with every property a producer can set."""
    return ServiceBusMessage(
        b'{"orderId": "order-7"}',
        message_id="order-7:shipped:3",
        session_id=session_id,
        partition_key=session_id or "pk-7",
        reply_to="replies",
        reply_to_session_id="caller-1",
        to="status-handler",
        time_to_live=timedelta(minutes=30),
        content_type="application/json",
        subject="StatusUpdate",
        correlation_id="corr-7",
        application_properties={"tenant": "t1", "attempt": 3, "urgent": True},
    )


def receiver_for(
    client: ServiceBusClient, source: Source, session_id: str | None
) -> ServiceBusReceiver:
    if source.queue is not None:
        return client.get_queue_receiver(source.queue, session_id=session_id)
    assert source.topic is not None and source.subscription is not None
    return client.get_subscription_receiver(
        source.topic, source.subscription, session_id=session_id
    )


async def send_and_dead_letter(
    client: ServiceBusClient, source: Source, session: str | None
) -> None:
    sender = (
        client.get_queue_sender(source.queue)
        if source.queue is not None
        else client.get_topic_sender(SESSION_TOPIC)
    )
    async with sender:
        await sender.send_messages(produced(session))
    async with receiver_for(client, source, session) as receiver:
        [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
        await receiver.dead_letter_message(message, reason="MaxDeliveryCountExceeded")


async def receive_copy(
    client: ServiceBusClient, source: Source, session: str | None
) -> ServiceBusReceivedMessage:
    async with receiver_for(client, source, session) as receiver:
        [copy] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
        await receiver.complete_message(copy)
    return copy


def text_properties(message: ServiceBusReceivedMessage) -> dict[str, Any]:
    return {
        (key.decode() if isinstance(key, bytes) else key): (
            value.decode() if isinstance(value, bytes) else value
        )
        for key, value in (message.application_properties or {}).items()
    }


def assert_whole_copy(copy: ServiceBusReceivedMessage, session: str | None, by: str) -> None:
    """Every property `produced` set, the audit properties (ResubmittedBy starting with `by`),
    none of the dead-letter ones."""
    assert b"".join(copy.body) == b'{"orderId": "order-7"}'
    assert (copy.message_id, copy.session_id) == ("order-7:shipped:3", session)
    assert copy.partition_key == (session or "pk-7")
    assert (copy.reply_to, copy.reply_to_session_id, copy.to) == (
        "replies",
        "caller-1",
        "status-handler",
    )
    assert copy.time_to_live == timedelta(minutes=30)
    assert (copy.content_type, copy.subject, copy.correlation_id) == (
        "application/json",
        "StatusUpdate",
        "corr-7",
    )
    properties = text_properties(copy)
    assert (properties["tenant"], properties["attempt"], properties["urgent"]) == ("t1", 3, True)
    assert properties["ResubmittedBy"].startswith(by) and properties["ResubmitCount"] == 1
    assert "ResubmittedAt" in properties and "DeadLetterReason" not in properties


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SOURCES))
async def test_resubmit_sends_the_whole_message_back_sessions_included(
    sessions_emulator: RunningEmulator, name: str
) -> None:
    source, session = SOURCES[name]
    async with ServiceBusClient.from_connection_string(
        sessions_emulator.connection_string
    ) as client:
        await send_and_dead_letter(client, source, session)
        dead_letters = ServiceBusDeadLetters(client, source)
        # Given the dead letter, when it is resubmitted (a subscription's: to its topic)
        outcome = await dead_letters.resubmit(
            Selection(everything=True),
            lambda dead: None,
            by="ops@host",
            now=datetime.now(UTC),
            to_topic=source.queue is None,
        )
        # then the copy reaches the entity again, whole, under its session
        copy = await receive_copy(client, source, session)
        left = await dead_letters.browse(10)

    assert len(outcome.done) == 1 and outcome.refused == {}
    assert_whole_copy(copy, session, "ops@host")
    assert left == []


@pytest.mark.slow
async def test_a_subscriptions_copy_sent_to_the_topic_reaches_every_subscription(
    sessions_emulator: RunningEmulator,
) -> None:
    """The price of `--to-topic`: the other subscription gets the copy too (its consumer's
    dedup by MessageId must drop it)."""
    source, session = SOURCES["session subscription"]
    async with ServiceBusClient.from_connection_string(
        sessions_emulator.connection_string
    ) as client:
        await send_and_dead_letter(client, source, session)
        mirror = Source(topic=SESSION_TOPIC, subscription=OTHER_SUBSCRIPTION)
        first = await receive_copy(client, mirror, None)
        await ServiceBusDeadLetters(client, source).resubmit(
            Selection(everything=True),
            lambda dead: None,
            by="ops@host",
            now=datetime.now(UTC),
            to_topic=True,
        )
        again = await receive_copy(client, mirror, None)

    assert first.message_id == again.message_id == "order-7:shipped:3"
    assert text_properties(again)["ResubmitCount"] == 1


@pytest.mark.slow
async def test_a_copy_the_sdk_cannot_send_is_kept_with_its_reason(
    sessions_emulator: RunningEmulator,
) -> None:
    """A producer's property the SDK refuses to send again (a SessionId over 128 characters)
    is reported per dead letter; the dead letter stays, and the others are still resubmitted."""
    source = Source(queue=PLAIN_QUEUE)
    async with ServiceBusClient.from_connection_string(
        sessions_emulator.connection_string
    ) as client:
        async with client.get_queue_sender(PLAIN_QUEUE) as sender:
            fine = ServiceBusMessage(b"{}", message_id="fine")
            odd = ServiceBusMessage(b"{}", message_id="odd")
            assert odd.raw_amqp_message.properties is not None
            odd.raw_amqp_message.properties.group_id = b"s" * 200  # bypasses the SDK's check
            await sender.send_messages([fine, odd])
        async with client.get_queue_receiver(PLAIN_QUEUE) as receiver:
            for message in await receiver.receive_messages(max_message_count=2, max_wait_time=10):
                await receiver.dead_letter_message(message, reason="Manual")
        dead_letters = ServiceBusDeadLetters(client, source)
        outcome = await dead_letters.resubmit(
            Selection(everything=True), lambda dead: None, by="ops", now=datetime.now(UTC)
        )
        left = await dead_letters.browse(10)

    assert len(outcome.done) == 1 and len(outcome.refused) == 1
    assert "cannot be sent again" in next(iter(outcome.refused.values()))
    assert [dead.message_id for dead in left] == ["odd"]


@pytest.mark.slow
async def test_a_dead_letter_locked_elsewhere_stays_and_the_others_are_purged(
    sessions_emulator: RunningEmulator,
) -> None:
    """A command ends when a peek shows the dead-letter queue holds only what it locked. A
    peek sees a dead letter another receiver holds too: the command then receives once more,
    finds nothing, and ends with the others taken and that one left where it is."""
    source = Source(queue=PLAIN_QUEUE)
    async with ServiceBusClient.from_connection_string(
        sessions_emulator.connection_string
    ) as client:
        async with client.get_queue_sender(PLAIN_QUEUE) as sender:
            await sender.send_messages(
                [ServiceBusMessage(b"{}", message_id=f"m{i}") for i in range(3)]
            )
        async with client.get_queue_receiver(PLAIN_QUEUE) as receiver:
            received: list[ServiceBusReceivedMessage] = []
            while len(received) < 3:
                page = await receiver.receive_messages(max_message_count=3, max_wait_time=10)
                assert page, "a sent message never arrived"
                received += page
            for message in received:
                await receiver.dead_letter_message(message, reason="Manual")
        dead_letters = ServiceBusDeadLetters(client, source)
        async with client.get_queue_receiver(
            PLAIN_QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as elsewhere:
            [held] = await elsewhere.receive_messages(max_message_count=1, max_wait_time=10)
            outcome = await dead_letters.purge(Selection(everything=True))
            await elsewhere.abandon_message(held)
        left = await dead_letters.browse(10)

    others = {message.sequence_number for message in received} - {held.sequence_number}
    assert set(outcome.done) == others and outcome.refused == {}
    assert [dead.message_id for dead in left] == [held.message_id]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["session queue", "session subscription"])
async def test_the_cli_resubmits_a_session_dead_letter_whole(
    sessions_emulator: RunningEmulator, python_cosmos: CosmosServer, name: str
) -> None:
    source, session = SOURCES[name]
    where = (
        ["--queue", source.queue]
        if source.queue is not None
        else ["--topic", SESSION_TOPIC, "--subscription", SESSION_SUBSCRIPTION, "--to-topic"]
    )
    async with ServiceBusClient.from_connection_string(
        sessions_emulator.connection_string
    ) as client:
        await send_and_dead_letter(client, source, session)
        resubmitted = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "orders", "dlq", "resubmit", "--all", "--by", "ops@cli",
             "--duplicate-window", "0", *where],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "ServiceBusConnection": sessions_emulator.connection_string,
                 "COSMOS_ENDPOINT": python_cosmos.endpoint, "COSMOS_KEY": python_cosmos.key},
        )  # fmt: skip
        copy = await receive_copy(client, source, session)

    assert resubmitted.returncode == 0, resubmitted.stderr
    assert "resubmitted 1" in resubmitted.stdout
    assert_whole_copy(copy, session, "ops@cli")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["plain queue", "session queue"])
async def test_the_consoles_resubmit_sends_the_whole_message_back(
    sessions_emulator: RunningEmulator, name: str
) -> None:
    """The console's confirmation page and form, over the real dead-letter adapter."""
    source, session = SOURCES[name]
    async with ServiceBusClient.from_connection_string(
        sessions_emulator.connection_string
    ) as client:
        await send_and_dead_letter(client, source, session)
        [dead] = await ServiceBusDeadLetters(client, source).browse(1)
        console = OperationsConsole(
            [source],
            FakeEntityCounter({}),
            lambda chosen: ServiceBusDeadLetters(client, chosen),
            FakeOrderReader(FakeOrderStore()),
            None,
            layout=LAYOUT,
            duplicate_window=timedelta(0),
        )

        async def no_api() -> HttpRuntime:
            raise AssertionError("the console alone is used")

        async def console_runtime() -> ConsoleRuntime:
            return ConsoleRuntime(console)

        app = create_app(no_api, console_factory=console_runtime, allowed_hosts=AllowedHosts())
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as browser:
            form = {"source": str(source), "sequence": str(dead.sequence_number)}
            confirm = await browser.get(
                "/console/dead-letters/confirm", params=form | {"action": "resubmit"}
            )
            token = re.search(r'name="csrf" value="(\w+)"', confirm.text)
            assert token is not None, confirm.text
            done = await browser.post(
                "/console/dead-letters/resubmit",
                data=form | {"confirm": "yes", "csrf": token.group(1)},
                headers={"Origin": "http://127.0.0.1:8000", "Sec-Fetch-Site": "same-origin"},
            )
        copy = await receive_copy(client, source, session)

    assert f"Resubmitted: {dead.sequence_number}." in done.text
    assert_whole_copy(copy, session, "console:")
