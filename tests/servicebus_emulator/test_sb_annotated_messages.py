"""`AmqpAnnotatedMessage` round trips: every section and body kind the SDK can send.

The SDK's encoder writes delivery annotations after the body and footer; Service Bus accepts
that and hands them back, so the emulator must too. Each body kind is sent with header,
delivery annotations, message annotations, properties, application properties of many AMQP
types and a footer, sync and aio, by `send_messages` (one and a list) and in a batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.amqp import (
    AmqpAnnotatedMessage,
    AmqpMessageBodyType,
    AmqpMessageHeader,
    AmqpMessageProperties,
)

from servicebus_emulator import RunningEmulator
from servicebus_emulator.codec import DecodeError, encode
from servicebus_emulator.message import parse_message

BODIES: dict[str, dict[str, Any]] = {
    "data-one": {"data_body": b"one"},
    "data-many": {"data_body": [b"a", b"bb", b"ccc"]},
    "sequence-one": {"sequence_body": [[1, "two", 3.5, True]]},
    "sequence-many": {"sequence_body": [[1, 2], ["x", None]]},
    "value-map": {"value_body": {"k": [1, {"nested": None}], "n": -5}},
    "value-int": {"value_body": 42},
    "value-string": {"value_body": "text"},
    "value-none": {"value_body": None},
}
APPLICATION_PROPERTIES: dict[str, Any] = {
    "str": "text",
    "int": 7,
    "negative": -3,
    "float": 1.5,
    "bool": True,
    "bytes": b"\x00\x01",
    "uuid": uuid.UUID(int=5),
    "none": None,
}
# Which sections a message carries besides its body (the SDK writes delivery annotations last).
SHAPES: dict[str, set[str]] = {
    "all-sections": {"header", "delivery", "annotations", "properties", "application", "footer"},
    "delivery-annotations-right-after-the-body": {"delivery", "properties"},
    "footer-then-delivery-annotations": {"footer", "delivery", "properties"},
}


def _plain(value: Any) -> Any:
    """The SDK hands back AMQP strings as bytes: compare in that form."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _annotated(body: str, shape: str, message_id: str) -> AmqpAnnotatedMessage:
    sections = SHAPES[shape]
    return AmqpAnnotatedMessage(
        **BODIES[body],
        header=(
            AmqpMessageHeader(priority=7, durable=True, time_to_live=120_000)
            if "header" in sections
            else None
        ),
        properties=AmqpMessageProperties(
            message_id=message_id,
            subject="subject",
            correlation_id="correlation",
            content_type="application/x-test",
            reply_to="reply-here",
            group_id="group",
        ),
        delivery_annotations={"delann_key": "delann_value", "x-opt-lock-token": "forged"}
        if "delivery" in sections
        else None,
        annotations={"ann_key": "ann_value", "x-opt-sequence-number": 999}
        if "annotations" in sections
        else None,
        application_properties=APPLICATION_PROPERTIES if "application" in sections else None,
        footer={"footer_key": "footer_value"} if "footer" in sections else None,
    )


def _outgoing() -> dict[str, tuple[str, str]]:
    """message id -> (body kind, shape) for one message per combination."""
    return {
        f"{body}.{shape}.{uuid.uuid4().hex[:6]}": (body, shape)
        for body in BODIES
        for shape in SHAPES
    }


def _check(received: ServiceBusReceivedMessage, body: str, shape: str) -> None:
    amqp = received.raw_amqp_message
    sections = SHAPES[shape]
    expected_kind = {"data": AmqpMessageBodyType.DATA, "sequence": AmqpMessageBodyType.SEQUENCE}
    assert amqp.body_type == expected_kind.get(body.split("-")[0], AmqpMessageBodyType.VALUE)
    sent = next(iter(BODIES[body].values()))
    if amqp.body_type == AmqpMessageBodyType.DATA:
        assert list(amqp.body) == (sent if isinstance(sent, list) else [sent])
    elif amqp.body_type == AmqpMessageBodyType.SEQUENCE:
        assert list(amqp.body) == _plain(sent)
    else:
        assert amqp.body == _plain(sent)
    if "header" in sections:
        assert amqp.header is not None
        assert (amqp.header.priority, amqp.header.durable) == (7, True)
        assert amqp.header.time_to_live == 120_000
    # The sender's delivery annotations come back; the broker's own keys are the broker's.
    if "delivery" in sections:
        assert amqp.delivery_annotations == {b"delann_key": b"delann_value"}
    else:
        assert not amqp.delivery_annotations
    assert received.lock_token is not None and str(received.lock_token) != "forged"
    annotations = amqp.annotations
    assert annotations is not None
    assert annotations[b"x-opt-sequence-number"] == received.sequence_number != 999
    assert received.enqueued_time_utc is not None and received.locked_until_utc is not None
    if "annotations" in sections:
        assert annotations[b"ann_key"] == b"ann_value"
    # Dead-lettering adds its reason and description, as Service Bus does.
    application = {
        k: v
        for k, v in (amqp.application_properties or {}).items()
        if k not in (b"DeadLetterReason", b"DeadLetterErrorDescription")
    }
    assert application == (_plain(APPLICATION_PROPERTIES) if "application" in sections else {})
    if "footer" in sections:
        assert amqp.footer == {b"footer_key": b"footer_value"}
    else:
        assert not amqp.footer
    assert received.subject == "subject" and received.correlation_id == "correlation"
    assert received.content_type == "application/x-test" and received.reply_to == "reply-here"


def _send_sync(client: ServiceBusClient, queue: str, how: str, messages: list[Any]) -> None:
    with client.get_queue_sender(queue) as sender:
        if how == "one-by-one":
            for message in messages:
                sender.send_messages(message)
        elif how == "list":
            sender.send_messages(messages)
        else:
            batch = sender.create_message_batch()
            for message in messages:
                batch.add_message(message)
            sender.send_messages(batch)


SEND_MODES = ["one-by-one", "list", "batch"]


@pytest.mark.parametrize("how", SEND_MODES)
def test_annotated_messages_round_trip_sync(
    make_emulator: Callable[..., RunningEmulator], queue_name: str, how: str
) -> None:
    emulator = make_emulator(queue_name, LockDuration="PT30S")
    outgoing = _outgoing()
    messages = [_annotated(*combo, message_id) for message_id, combo in outgoing.items()]
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        _send_sync(client, queue_name, how, messages)
        with client.get_queue_receiver(queue_name) as receiver:
            seen: set[str] = set()
            while len(seen) < len(outgoing):
                batch = receiver.receive_messages(
                    max_message_count=len(outgoing) - len(seen), max_wait_time=5
                )
                assert batch, f"missing {sorted(set(outgoing) - seen)}"
                for received in batch:
                    _check(received, *outgoing[str(received.message_id)])
                    seen.add(str(received.message_id))
                    receiver.complete_message(received)
            assert receiver.peek_messages(max_message_count=1, sequence_number=1) == []


@pytest.mark.parametrize("how", SEND_MODES)
async def test_annotated_messages_round_trip_aio(
    make_emulator: Callable[..., RunningEmulator], queue_name: str, how: str
) -> None:
    emulator = make_emulator(queue_name, LockDuration="PT30S")
    outgoing = _outgoing()
    messages = [_annotated(*combo, message_id) for message_id, combo in outgoing.items()]
    async with AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(queue_name) as sender:
            if how == "one-by-one":
                for message in messages:
                    await sender.send_messages(message)
            elif how == "list":
                await sender.send_messages(messages)
            else:
                batch = await sender.create_message_batch()
                for message in messages:
                    batch.add_message(message)
                await sender.send_messages(batch)
        async with client.get_queue_receiver(queue_name) as receiver:
            seen: set[str] = set()
            while len(seen) < len(outgoing):
                received_batch = await receiver.receive_messages(
                    max_message_count=len(outgoing) - len(seen), max_wait_time=5
                )
                assert received_batch, f"missing {sorted(set(outgoing) - seen)}"
                for received in received_batch:
                    _check(received, *outgoing[str(received.message_id)])
                    seen.add(str(received.message_id))
                    await receiver.complete_message(received)


def test_peeked_and_dead_lettered_copies_keep_every_section(
    make_emulator: Callable[..., RunningEmulator], queue_name: str
) -> None:
    emulator = make_emulator(queue_name, LockDuration="PT30S")
    message_id = "keep-sections"
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue_name) as sender:
            sender.send_messages(_annotated("sequence-many", "all-sections", message_id))
        with client.get_queue_receiver(queue_name) as receiver:
            (peeked,) = receiver.peek_messages(max_message_count=1, sequence_number=1)
            assert peeked.raw_amqp_message.delivery_annotations == {b"delann_key": b"delann_value"}
            assert peeked.raw_amqp_message.footer == {b"footer_key": b"footer_value"}
            (received,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.dead_letter_message(received, reason="kept")
        with client.get_queue_receiver(queue_name, sub_queue="deadletter") as dlq:
            (dead,) = dlq.receive_messages(max_message_count=1, max_wait_time=5)
            _check(dead, "sequence-many", "all-sections")
            assert dead.dead_letter_reason == "kept"
            dlq.complete_message(dead)


# ------------------------------------------------------------------ section order, unit level

_H = b"\x00\x53\x70" + encode([True])
_DA = b"\x00\x53\x71" + encode({"d": 1})
_MA = b"\x00\x53\x72" + encode({"m": 1})
_P = b"\x00\x53\x73" + encode(["id-1"])
_AP = b"\x00\x53\x74" + encode({"a": 1})
_DATA = b"\x00\x53\x75" + encode(b"body")
_SEQ = b"\x00\x53\x76" + encode([1])
_VALUE = b"\x00\x53\x77" + encode(1)
_FOOTER = b"\x00\x53\x78" + encode({"f": 1})

ACCEPTED_ORDERS = {
    "specification order": _H + _DA + _MA + _P + _AP + _DATA + _FOOTER,
    "SDK order: delivery annotations after the footer": _H + _MA + _P + _AP + _DATA + _FOOTER + _DA,
    "SDK order: delivery annotations after the body": _P + _SEQ + _SEQ + _DA,
    "SDK order: no body, delivery annotations last": _P + _AP + _DA,
    "several data sections": _DATA + _DATA + _DATA,
}
REFUSED_ORDERS = {
    "a section after out-of-place delivery annotations": _P + _DATA + _DA + _FOOTER,
    "delivery annotations twice": _DA + _DATA + _DA,
    "properties after the body": _DATA + _P,
    "header after properties": _P + _H,
    "two value sections": _VALUE + _VALUE,
    "data and sequence mixed": _DATA + _SEQ,
    "value then data": _VALUE + _DATA,
    "footer twice": _DATA + _FOOTER + _FOOTER,
}


@pytest.mark.parametrize("name", sorted(ACCEPTED_ORDERS))
def test_section_orders_the_sdk_writes_are_accepted(name: str) -> None:
    parsed = parse_message(ACCEPTED_ORDERS[name])
    if _DA in ACCEPTED_ORDERS[name]:
        assert parsed.delivery_annotation_count == 2
        assert _DA not in parsed.body_raw  # delivered in its own place, not as part of the body


@pytest.mark.parametrize("name", sorted(REFUSED_ORDERS))
def test_truly_malformed_section_sequences_are_refused(name: str) -> None:
    with pytest.raises(DecodeError):
        parse_message(REFUSED_ORDERS[name])
