"""Topics and subscriptions through the sync SDK: fan-out, per-subscription locks, delivery
counts, dead-letter queues, TTL, MaxDeliveryCount, duplicate detection on the topic."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import ServiceBusError
from sb_receive import receive_one
from sb_support import sql_rule, subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator, start_in_background

TOPIC = "events"


@pytest.fixture
def make_topic() -> Iterator[Callable[..., RunningEmulator]]:
    started: list[RunningEmulator] = []

    def make(*subscriptions: dict[str, Any], **topic_properties: Any) -> RunningEmulator:
        emu = start_in_background(
            config=topic_config(topic_entry(TOPIC, *subscriptions, **topic_properties))
        )
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.stop()


def peek_all(client: ServiceBusClient, subscription: str, dead_letter: bool = False) -> list[Any]:
    sub_queue = ServiceBusSubQueue.DEAD_LETTER if dead_letter else None
    with client.get_subscription_receiver(TOPIC, subscription, sub_queue=sub_queue) as receiver:
        return list(receiver.peek_messages(max_message_count=50, sequence_number=1))


def test_every_subscription_gets_its_own_copy_with_its_own_lock_and_count(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(subscription_entry("a"), subscription_entry("b"))
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage("hello", message_id="m1"))
        with (
            client.get_subscription_receiver(TOPIC, "a") as ra,
            client.get_subscription_receiver(TOPIC, "b") as rb,
        ):
            first_a = receive_one(ra)
            first_b = receive_one(rb)
            assert str(first_a) == str(first_b) == "hello"
            assert first_a.message_id == first_b.message_id == "m1"
            assert first_a.lock_token != first_b.lock_token
            ra.abandon_message(first_a)  # only a's copy counts a failed attempt
            again_a = receive_one(ra)
            assert again_a.delivery_count == 1
            rb.complete_message(first_b)  # b's copy is gone, a's stays locked
            assert first_b.delivery_count == 0
            ra.complete_message(again_a)
        assert peek_all(client, "a") == [] and peek_all(client, "b") == []


def test_max_delivery_count_and_dead_letter_queue_are_per_subscription(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(subscription_entry("once", MaxDeliveryCount=1), subscription_entry("thrice"))
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage("x", message_id="m1"))
        with client.get_subscription_receiver(TOPIC, "once") as receiver:
            receiver.abandon_message(receive_one(receiver))
        with client.get_subscription_receiver(
            TOPIC, "once", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dlq:
            dead = receive_one(dlq)
            assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
            assert dead.message_id == "m1"
            dlq.complete_message(dead)
        with client.get_subscription_receiver(TOPIC, "thrice") as receiver:
            receiver.abandon_message(receive_one(receiver))
            survivor = receive_one(receiver)
            assert survivor.delivery_count == 1  # still in its subscription, not dead-lettered
            receiver.dead_letter_message(survivor, reason="manual", error_description="why")
        (manual,) = peek_all(client, "thrice", dead_letter=True)
        assert manual.dead_letter_reason == "manual"
        assert peek_all(client, "once", dead_letter=True) == []


def test_ttl_expiry_follows_each_subscriptions_settings(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(
        subscription_entry(
            "short", DefaultMessageTimeToLive="PT1S", DeadLetteringOnMessageExpiration=True
        ),
        subscription_entry("long"),
    )
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage("ttl", message_id="m1"))
        with client.get_subscription_receiver(
            TOPIC, "short", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dlq:
            expired = receive_one(dlq, wait=10)
            assert expired.dead_letter_reason == "TTLExpiredException"
        with client.get_subscription_receiver(TOPIC, "long") as receiver:
            kept = receive_one(receiver)
            assert str(kept) == "ttl" and kept.time_to_live is not None
            assert kept.time_to_live.total_seconds() == 3600
            receiver.complete_message(kept)
        assert peek_all(client, "short") == []


def test_topic_ttl_caps_the_subscriptions(make_topic: Callable[..., RunningEmulator]) -> None:
    emu = make_topic(subscription_entry("s"), DefaultMessageTimeToLive="PT30M")
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage("x"))
        (peeked,) = peek_all(client, "s")
        assert peeked.time_to_live is not None and peeked.time_to_live.total_seconds() == 1800


def test_duplicate_detection_happens_on_the_topic(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(subscription_entry("a"), subscription_entry("b"))
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage("first", message_id="dup"))
            sender.send_messages(ServiceBusMessage("second", message_id="dup"))
            sender.send_messages(ServiceBusMessage("other", message_id="other"))
        for subscription in ("a", "b"):
            assert [str(m) for m in peek_all(client, subscription)] == ["first", "other"]


def test_without_duplicate_detection_both_copies_arrive(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(subscription_entry("a"), RequiresDuplicateDetection=False)
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage("first", message_id="dup"))
            sender.send_messages(ServiceBusMessage("second", message_id="dup"))
        assert [str(m) for m in peek_all(client, "a")] == ["first", "second"]


def test_receiving_from_a_topic_and_sending_to_a_subscription_are_refused(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(subscription_entry("a"))
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with pytest.raises(ServiceBusError), client.get_queue_receiver(TOPIC) as receiver:
            receiver.receive_messages(max_wait_time=1)
        with (
            pytest.raises(ServiceBusError),
            client.get_queue_sender(f"{TOPIC}/Subscriptions/a") as sender,
        ):
            sender.send_messages(ServiceBusMessage("no"))
        with (
            pytest.raises(ServiceBusError),
            client.get_subscription_receiver(TOPIC, "missing") as missing,
        ):
            missing.receive_messages(max_wait_time=1)
        assert peek_all(client, "a") == []


def test_scheduled_message_to_a_topic_activates_in_each_subscription(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(subscription_entry("a"), subscription_entry("b"))
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        message = ServiceBusMessage("later", message_id="s1")
        message.scheduled_enqueue_time_utc = datetime.now(UTC) + timedelta(seconds=3)
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(message)
        for subscription in ("a", "b"):
            (peeked,) = peek_all(client, subscription)
            assert peeked.state.name == "SCHEDULED"
        for subscription in ("a", "b"):
            with client.get_subscription_receiver(TOPIC, subscription) as receiver:
                received = receive_one(receiver, wait=10)
                assert str(received) == "later"
                receiver.complete_message(received)


def test_topic_sequence_numbers_are_shared_by_the_subscriptions(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(
        subscription_entry("all"),
        subscription_entry("odd", sql_rule("odd", "n % 2 = 1")),
    )
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(
                [ServiceBusMessage(str(n), application_properties={"n": n}) for n in range(4)]
            )
        assert [m.sequence_number for m in peek_all(client, "all")] == [1, 2, 3, 4]
        assert [m.sequence_number for m in peek_all(client, "odd")] == [2, 4]  # gaps, as in SB


def test_topic_sender_schedules_and_cancels_in_every_subscription(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(
        subscription_entry("a"),
        subscription_entry("b"),
        DuplicateDetectionHistoryTimeWindow="PT1M",
    )
    later = datetime.now(UTC) + timedelta(minutes=5)
    # No retries: the refused second cancel answers at once.
    with ServiceBusClient.from_connection_string(emu.connection_string, retry_total=0) as client:
        with client.get_topic_sender(TOPIC) as sender:
            keep, drop = sender.schedule_messages(
                [ServiceBusMessage("keep", message_id="k"), ServiceBusMessage("drop")], later
            )
            assert (keep, drop) == (1, 2)
            sender.cancel_scheduled_messages(drop)
            with pytest.raises(ServiceBusError):
                sender.cancel_scheduled_messages(drop)  # gone from every subscription
            assert sender.schedule_messages(ServiceBusMessage("dup", message_id="k"), later) == [0]
        for subscription in ("a", "b"):
            (peeked,) = peek_all(client, subscription)
            assert (str(peeked), peeked.sequence_number) == ("keep", keep)
            assert peeked.state.name == "SCHEDULED"


def test_defer_renew_and_receive_deferred_in_a_subscription(
    make_topic: Callable[..., RunningEmulator],
) -> None:
    emu = make_topic(subscription_entry("a"), subscription_entry("b"))
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages(ServiceBusMessage("later", message_id="d1"))
        with client.get_subscription_receiver(TOPIC, "a") as receiver:
            msg = receive_one(receiver)
            before = msg.locked_until_utc
            assert receiver.renew_message_lock(msg) >= before  # type: ignore[operator]
            receiver.defer_message(msg)
            (deferred,) = receiver.receive_deferred_messages([msg.sequence_number or 0])
            assert str(deferred) == "later"
            receiver.complete_message(deferred)
            assert receiver.peek_messages(5, sequence_number=1) == []
        (untouched,) = peek_all(client, "b")  # b's copy was never deferred
        assert untouched.state.name == "ACTIVE"
