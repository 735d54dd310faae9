"""Auto-forwarding through the sync SDK: `ForwardTo` and `ForwardDeadLetteredMessagesTo` on
queues and subscriptions, to queues and topics, and the chains refused when the config loads."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import ServiceBusError
from sb_receive import receive_one
from sb_support import (
    queue_config,
    queue_entry,
    sql_rule,
    subscription_entry,
    topic_config,
    topic_entry,
)

from servicebus_emulator import ConfigError, RunningEmulator
from servicebus_emulator.config import load_namespace


def peek(client: ServiceBusClient, queue: str) -> list[ServiceBusReceivedMessage]:
    with client.get_queue_receiver(queue) as receiver:
        return list(receiver.peek_messages(max_message_count=50, sequence_number=1))


def test_a_message_sent_to_a_forwarding_queue_arrives_in_the_target_unchanged(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    emu = make_config_emulator(
        queue_config(queue_entry("inbox", ForwardTo="work"), queue_entry("work"))
    )
    message = ServiceBusMessage(
        b"body-bytes",
        message_id="m-1",
        subject="OrderPlaced",
        correlation_id="c-1",
        content_type="application/json",
        application_properties={"tenant": "t1", "lines": 3},
    )
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_queue_sender("work") as sender:
            sender.send_messages(ServiceBusMessage("direct"))  # takes sequence number 1 there
        with client.get_queue_sender("inbox") as sender:
            sender.send_messages(ServiceBusMessage("first"))
            sender.send_messages(message)
        with client.get_queue_receiver("work") as receiver:
            got = [receive_one(receiver) for _ in range(3)]
            for received in got:
                receiver.complete_message(received)
    direct, first, forwarded = got
    assert (str(direct), str(first)) == ("direct", "first")
    assert b"".join(forwarded.body) == b"body-bytes"
    assert forwarded.message_id == "m-1" and forwarded.subject == "OrderPlaced"
    assert forwarded.correlation_id == "c-1" and forwarded.content_type == "application/json"
    assert forwarded.application_properties == {b"tenant": b"t1", b"lines": 3}
    # The target numbers it; x-opt-enqueue-sequence-number keeps its number in the source.
    assert forwarded.sequence_number == 3 and forwarded.enqueued_sequence_number == 2
    assert direct.enqueued_sequence_number is None
    assert forwarded.delivery_count == 0 and forwarded.dead_letter_source is None


def test_a_receiver_on_a_forwarding_entity_is_refused_as_service_bus_does(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    config = queue_config(
        queue_entry("inbox", ForwardTo="work", ForwardDeadLetteredMessagesTo="errors"),
        queue_entry("work"),
        queue_entry("errors"),
    )
    emu = make_config_emulator(config)
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_queue_sender("inbox") as sender:
            sender.send_messages(ServiceBusMessage("x"))
        for sub_queue in (None, ServiceBusSubQueue.DEAD_LETTER):
            with (
                pytest.raises(ServiceBusError, match="auto-forwarding"),
                client.get_queue_receiver("inbox", sub_queue=sub_queue) as receiver,
            ):
                receiver.receive_messages(max_message_count=1, max_wait_time=1)
        assert [str(m) for m in peek(client, "work")] == ["x"]


def test_subscriptions_forward_their_own_copies_with_rule_actions_applied(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    billing = subscription_entry(
        "billing", sql_rule("big", "lines > 2", "SET routed = 'billing'"), ForwardTo="billing-q"
    )
    config = topic_config(
        topic_entry("events", billing, subscription_entry("audit")),
        queues=(queue_entry("billing-q"),),
    )
    emu = make_config_emulator(config)
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("small", application_properties={"lines": 1}),
                    ServiceBusMessage("big", application_properties={"lines": 5}),
                ]
            )
        (billed,) = peek(client, "billing-q")
        with client.get_subscription_receiver("events", "audit") as receiver:
            audited = receiver.peek_messages(max_message_count=10, sequence_number=1)
    assert str(billed) == "big"
    assert (billed.application_properties or {})[b"routed"] == b"billing"
    assert (billed.application_properties or {})[b"RuleName"] == b"big"
    assert [str(m) for m in audited] == ["small", "big"]


def test_a_queue_forwards_to_a_topic_and_duplicate_detection_applies_at_the_target(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    # `inbox` does not detect duplicates itself: the topic it forwards to does.
    config = topic_config(
        topic_entry("events", subscription_entry("a"), subscription_entry("b")),
        queues=(queue_entry("inbox", ForwardTo="events", RequiresDuplicateDetection=False),),
    )
    emu = make_config_emulator(config)
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_queue_sender("inbox") as sender:
            sender.send_messages(ServiceBusMessage("one", message_id="same"))
            sender.send_messages(ServiceBusMessage("again", message_id="same"))
            sender.send_messages(ServiceBusMessage("two", message_id="other"))
        for subscription in ("a", "b"):
            with client.get_subscription_receiver("events", subscription) as receiver:
                peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
                assert [str(m) for m in peeked] == ["one", "two"]
                assert [m.enqueued_sequence_number for m in peeked] == [1, 3]


def test_a_four_hop_chain_delivers_to_its_end(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    chain = [queue_entry(f"hop{i}", ForwardTo=f"hop{i + 1}") for i in range(4)]
    emu = make_config_emulator(queue_config(*chain, queue_entry("hop4")))
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_queue_sender("hop0") as sender:
            sender.send_messages(ServiceBusMessage("far", message_id="m"))
        with client.get_queue_receiver("hop4") as receiver:
            got = receive_one(receiver)
            receiver.complete_message(got)
    assert str(got) == "far" and got.message_id == "m" and got.enqueued_sequence_number == 1


def test_a_scheduled_message_waits_in_the_source_and_is_forwarded_when_it_activates(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    emu = make_config_emulator(
        queue_config(queue_entry("inbox", ForwardTo="work"), queue_entry("work"))
    )
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_queue_sender("inbox") as sender:
            soon = datetime.now(UTC) + timedelta(seconds=1)
            later = datetime.now(UTC) + timedelta(hours=1)
            (cancelled,) = sender.schedule_messages(ServiceBusMessage("cancelled"), later)
            sender.schedule_messages(ServiceBusMessage("soon"), soon)
            sender.cancel_scheduled_messages(cancelled)  # still in the source: cancellable
        with client.get_queue_receiver("work") as receiver:
            got = receive_one(receiver)
            receiver.complete_message(got)
        assert peek(client, "work") == []  # the cancelled one never arrives
    assert str(got) == "soon"


DEAD_LETTER_SOURCE = queue_entry(
    "inbox",
    ForwardDeadLetteredMessagesTo="errors",
    MaxDeliveryCount=1,
    DeadLetteringOnMessageExpiration=True,
)


@pytest.mark.parametrize("how", ["explicit", "max-delivery-count", "ttl-expiry"])
def test_dead_letters_are_forwarded_with_their_reason_and_source(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator], how: str
) -> None:
    emu = make_config_emulator(queue_config(DEAD_LETTER_SOURCE, queue_entry("errors")))
    ttl = timedelta(seconds=1) if how == "ttl-expiry" else None
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_queue_sender("inbox") as sender:
            sender.send_messages(
                ServiceBusMessage(
                    "bad", message_id="m-dl", application_properties={"k": "v"}, time_to_live=ttl
                )
            )
        if how != "ttl-expiry":
            with client.get_queue_receiver("inbox") as receiver:
                received = receive_one(receiver)
                if how == "explicit":
                    receiver.dead_letter_message(
                        received, reason="poison", error_description="cannot parse"
                    )
                else:
                    receiver.abandon_message(received)  # MaxDeliveryCount 1: dead-lettered
        with client.get_queue_receiver("errors") as receiver:
            got = receive_one(receiver)
            receiver.complete_message(got)
        assert peek(client, "inbox") == []  # nothing left in the source
    reasons = {
        "explicit": ("poison", "cannot parse"),
        "max-delivery-count": (
            "MaxDeliveryCountExceeded",
            "Message could not be consumed after 1 delivery attempts.",
        ),
        "ttl-expiry": ("TTLExpiredException", "The message expired and was dead lettered."),
    }
    assert (got.dead_letter_reason, got.dead_letter_error_description) == reasons[how]
    assert got.dead_letter_source == "inbox" and got.message_id == "m-dl"
    assert (got.application_properties or {})[b"k"] == b"v"
    assert str(got) == "bad" and got.delivery_count == 0


def test_a_subscriptions_dead_letters_are_forwarded_to_a_topic(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    config = topic_config(
        topic_entry("events", subscription_entry("s", ForwardDeadLetteredMessagesTo="failures")),
        topic_entry("failures", subscription_entry("ops")),
    )
    emu = make_config_emulator(config)
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage("bad", message_id="m-s"))
        with client.get_subscription_receiver("events", "s") as receiver:
            receiver.dead_letter_message(receive_one(receiver), reason="nope")
        with client.get_subscription_receiver("failures", "ops") as receiver:
            got = receive_one(receiver)
            receiver.complete_message(got)
    assert got.dead_letter_source == "events/Subscriptions/s"
    assert got.dead_letter_reason == "nope" and got.message_id == "m-s"


def test_forwarding_to_a_session_queue_needs_a_session_id_at_the_source(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    config = queue_config(
        queue_entry("inbox", ForwardTo="status"), queue_entry("status", RequiresSession=True)
    )
    emu = make_config_emulator(config)
    with ServiceBusClient.from_connection_string(emu.connection_string) as client:
        with client.get_queue_sender("inbox") as sender:
            with pytest.raises(ServiceBusError, match="SessionId"):
                sender.send_messages(ServiceBusMessage("no session"))
            sender.send_messages(ServiceBusMessage("in session", session_id="order-1"))
        with client.get_queue_receiver("status", session_id="order-1") as receiver:
            got = receive_one(receiver)
            receiver.complete_message(got)
    assert str(got) == "in session" and got.session_id == "order-1"


def _q(name: str, **properties: Any) -> dict[str, Any]:
    return queue_entry(name, **properties)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (queue_config(_q("a", ForwardTo="missing")), "ForwardTo 'missing' names no queue"),
        (queue_config(_q("a", ForwardTo="a")), "ForwardTo names itself"),
        (
            queue_config(_q("a", ForwardDeadLetteredMessagesTo="A")),
            "ForwardDeadLetteredMessagesTo names itself",
        ),
        (
            topic_config(
                topic_entry("t", subscription_entry("s")),
                queues=(_q("a", ForwardTo="t/Subscriptions/s"),),
            ),
            "names no queue or topic",
        ),
        (queue_config(_q("a", ForwardTo="b"), _q("b", ForwardTo="a")), "loop a -> b -> a"),
        (
            queue_config(_q("a", ForwardTo="b"), _q("b", ForwardDeadLetteredMessagesTo="a")),
            "loop a -> b -> a",
        ),
        (
            topic_config(topic_entry("t", subscription_entry("s", ForwardTo="t"))),
            "loop t -> t/Subscriptions/s -> t",
        ),
        (
            queue_config(*[_q(f"h{i}", ForwardTo=f"h{i + 1}") for i in range(5)], _q("h5")),
            "h0 -> h1 -> h2 -> h3 -> h4 -> h5 has 5 hops; Service Bus allows at most 4",
        ),
        (
            topic_config(
                topic_entry("t", subscription_entry("s", ForwardTo="h0")),
                queues=(*[_q(f"h{i}", ForwardTo=f"h{i + 1}") for i in range(4)], _q("h4")),
            ),
            "t -> t/Subscriptions/s -> h0 -> h1 -> h2 -> h3 -> h4 has 5 hops",
        ),
        (
            queue_config(
                _q("a", ForwardDeadLetteredMessagesTo="b"),
                _q("b", ForwardTo="sessions"),
                _q("sessions", RequiresSession=True),
            ),
            "'a': ForwardDeadLetteredMessagesTo 'b' leads to an entity that requires sessions",
        ),
        (queue_config(_q("a", ForwardTo=5)), "ForwardTo must be a queue or topic name"),
        (queue_config(_q("a", ForwardTo=["b"])), "ForwardTo must be a queue or topic name"),
        (queue_config(_q("a", ForwardTo="b/$deadletterqueue")), "must be a queue or topic"),
        (
            queue_config(_q("a", ForwardDeadLetteredMessagesTo="x" * 10_000 + " ")),
            "ForwardDeadLetteredMessagesTo must be a queue or topic name",
        ),
    ],
    ids=[
        "missing",
        "itself",
        "itself-dead-letters",
        "subscription-target",
        "loop",
        "loop-through-dead-letters",
        "subscription-to-own-topic",
        "five-hops",
        "five-hops-through-a-subscription",
        "dead-letters-to-sessions",
        "not-a-string",
        "a-list",
        "a-sub-queue",
        "long-and-bad",
    ],
)
def test_forwarding_that_service_bus_would_refuse_or_fail_is_refused_at_load(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_namespace(config=config)


def test_four_hops_and_session_dead_letters_into_session_entities_load() -> None:
    namespace = load_namespace(
        config=topic_config(
            topic_entry("t", subscription_entry("s", ForwardTo="h1")),
            queues=(
                *[_q(f"h{i}", ForwardTo=f"h{i + 1}") for i in range(1, 4)],
                _q("h4"),
                _q("in-session", RequiresSession=True, ForwardDeadLetteredMessagesTo="sessions"),
                _q("sessions", RequiresSession=True),
            ),
        )
    )
    forwards = {q.name: q.forward_to for q in namespace.queues}
    assert forwards["h1"] == "h2" and forwards["h4"] is None
    assert namespace.topics[0].subscriptions[0].queue.forward_to == "h1"
