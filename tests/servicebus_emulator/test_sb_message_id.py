"""Service Bus gives every message sent without a MessageId one (a GUID as 32 hex digits)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageProperties
from sb_support import subscription_entry, topic_config, topic_entry

from servicebus_emulator import RunningEmulator
from servicebus_emulator.message import assign_message_id, parse_message

GUID_N = re.compile(r"[0-9a-f]{32}")


def _receive_all(
    client: ServiceBusClient, queue: str, count: int
) -> list[ServiceBusReceivedMessage]:
    got: list[ServiceBusReceivedMessage] = []
    with client.get_queue_receiver(queue, prefetch_count=count) as receiver:
        while len(got) < count:
            batch = receiver.receive_messages(max_message_count=count, max_wait_time=5)
            assert batch, f"only {len(got)} of {count} messages arrived"
            for message in batch:
                receiver.complete_message(message)
            got += batch
    return got


def _without_id(body: str, **properties: str) -> AmqpAnnotatedMessage:
    # The Python SDK's ServiceBusMessage sets a MessageId itself; an AmqpAnnotatedMessage (and
    # the JavaScript SDK's messages) need not, which is where the broker's id matters.
    return AmqpAnnotatedMessage(
        data_body=body.encode(),
        properties=AmqpMessageProperties(**properties) if properties else None,  # type: ignore[arg-type]
    )


def test_every_send_path_gives_a_message_without_id_a_guid_and_keeps_the_rest(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, DuplicateDetectionHistoryTimeWindow="PT1M")
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(
                _without_id("plain", correlation_id="c-1", subject="s", content_type="text/plain")
            )
            batch = sender.create_message_batch()
            batch.add_message(_without_id("batched-1"))
            batch.add_message(_without_id("batched-2"))
            sender.send_messages(batch)
            sender.send_messages(ServiceBusMessage("own-id", message_id="mine"))
        with client.get_queue_receiver(queue_name) as receiver:
            peeked = {str(m): m.message_id for m in receiver.peek_messages(10, sequence_number=1)}
        got = {str(m): m for m in _receive_all(client, queue_name, 4)}
    assert set(got) == {"plain", "batched-1", "batched-2", "own-id"}
    assert got["own-id"].message_id == "mine"
    assigned = [got[body].message_id for body in got if body != "own-id"]
    assert all(GUID_N.fullmatch(str(message_id)) for message_id in assigned), assigned
    assert len(set(assigned)) == len(assigned)
    assert peeked == {body: message.message_id for body, message in got.items()}
    plain = got["plain"]
    assert (plain.correlation_id, plain.subject, plain.content_type) == ("c-1", "s", "text/plain")


def test_duplicate_detection_never_matches_an_assigned_id_but_remembers_it(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, DuplicateDetectionHistoryTimeWindow="PT1M")
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages([_without_id("same"), _without_id("same")])
        first, second = _receive_all(client, queue_name, 2)
        assert first.message_id != second.message_id
        with client.get_queue_sender(queue_name) as sender:
            # A copy that carries the id the broker assigned is a duplicate within the window.
            sender.send_messages(ServiceBusMessage("copy", message_id=first.message_id))
            sender.send_messages(_without_id("after"))
        assert [str(m) for m in _receive_all(client, queue_name, 1)] == ["after"]


def test_every_subscription_copy_carries_the_one_assigned_id(
    make_config_emulator: Callable[[dict[str, Any]], RunningEmulator],
) -> None:
    emulator = make_config_emulator(
        topic_config(topic_entry("events", subscription_entry("a"), subscription_entry("b")))
    )
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages(_without_id("fan-out"))
        ids = []
        for name in ("a", "b"):
            with client.get_subscription_receiver("events", name) as receiver:
                (message,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
                receiver.complete_message(message)
                ids.append(message.message_id)
    assert GUID_N.fullmatch(str(ids[0])) and ids[0] == ids[1]


@pytest.mark.parametrize(
    "properties",
    [
        b"",  # no properties section
        b"\x00\x53\x73\x45",  # an empty list
        b"\x00\x53\x73\x40",  # null where the list belongs
        b"\x00\x53\x73\xc0\x05\x02\x40\xa1\x01c",  # [null, "c"]: the user-id field is kept
        b"\x00\xa3\x14amqp:properties:list\xc0\x05\x02\x40\xa1\x01c",  # symbolic descriptor
    ],
)
def test_the_assigned_id_replaces_only_the_message_id_field(properties: bytes) -> None:
    body = b"\x00\x53\x75\xa0\x02hi"
    parsed = parse_message(properties + body)
    assign_message_id(parsed)
    assert GUID_N.fullmatch(str(parsed.message_id))
    again = parse_message(parsed.properties_raw + body)
    assert again.message_id == parsed.message_id
    if properties.endswith(b"c"):
        assert again.properties[1] == "c"
