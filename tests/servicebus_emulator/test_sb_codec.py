"""The codec against the SDK's own AMQP codec (`_pyamqp`, used here only as a test oracle)."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus._common.utils import transform_outbound_messages
from azure.servicebus._pyamqp._decode import _DECODE_BY_CONSTRUCTOR, decode_payload
from azure.servicebus._pyamqp._encode import encode_value as sdk_encode_value
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from hypothesis import given, settings
from hypothesis import strategies as st

from servicebus_emulator.codec import DecodeError, decode_value, encode, encode_value, skip_value
from servicebus_emulator.message import StoredMessage, parse_message


def _values(int_bits: int) -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2 ** (int_bits - 1)), max_value=2 ** (int_bits - 1) - 1)
        | st.floats(allow_nan=False)
        | st.text(max_size=300)
        | st.binary(max_size=300)
        | st.uuids()
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=6)
            | st.dictionaries(st.text(max_size=20), children, max_size=6)
        ),
        max_leaves=25,
    )


# The SDK writes Python ints as AMQP int (32 bits); the emulator writes them as long.
sdk_values = _values(32)
our_values = _values(64)


def _plain(value: Any) -> Any:
    """Compare across codecs: text as bytes, containers recursively."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


@settings(max_examples=150, deadline=None)
@given(sdk_values)
def test_decodes_what_the_sdk_encodes(value: Any) -> None:
    out = bytearray()
    sdk_encode_value(out, value)
    decoded, end = decode_value(bytes(out))
    assert end == len(out)
    assert skip_value(bytes(out), 0) == len(out)
    assert _plain(decoded) == _plain(value)


@settings(max_examples=150, deadline=None)
@given(our_values)
def test_the_sdk_decodes_what_we_encode(value: Any) -> None:
    out = bytearray()
    encode_value(out, value)
    buffer = memoryview(bytes(out))
    rest, decoded = _DECODE_BY_CONSTRUCTOR[buffer[0]](buffer[1:])
    assert len(rest) == 0
    assert _plain(decoded) == _plain(value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_decode_error(data: bytes) -> None:
    for parse in (
        lambda: decode_value(data),
        lambda: skip_value(data, 0),
        lambda: parse_message(data),
    ):
        with contextlib.suppress(DecodeError):
            parse()


def _sdk_encoded(message: ServiceBusMessage) -> bytes:
    outgoing = transform_outbound_messages(
        message, ServiceBusMessage, PyamqpTransport.to_outgoing_amqp_message
    )
    assert isinstance(outgoing, ServiceBusMessage)
    return bytes(PyamqpTransport.encode_message(outgoing))


def test_delivery_as_the_sdk_reads_it() -> None:
    sent = ServiceBusMessage(
        b"payload",
        message_id="order-42",
        correlation_id="c-1",
        content_type="application/json",
        subject="orders",
        application_properties={"tenant": "t1", "attempt": 3, "flag": True},
    )
    parsed = parse_message(_sdk_encoded(sent))
    assert parsed.message_id == "order-42"
    stored = StoredMessage(parsed, seq=7, now_ms=1_700_000_000_000, ttl_ms=60_000)
    stored.lock_token = uuid.uuid4()
    stored.locked_until_ms = 1_700_000_030_000
    stored.delivery_count = 2
    stored.add_application_properties({"DeadLetterReason": "why"})

    received = ServiceBusReceivedMessage(
        decode_payload(memoryview(stored.encode(lock=True))), receiver=None
    )
    assert b"".join(received.body) == b"payload"
    assert received.message_id == "order-42"
    assert received.correlation_id == "c-1"
    assert received.content_type == "application/json"
    assert received.subject == "orders"
    assert received.application_properties == {
        b"tenant": b"t1",
        b"attempt": 3,
        b"flag": True,
        b"DeadLetterReason": b"why",
    }
    assert received.sequence_number == 7
    assert received.delivery_count == 2
    assert received.enqueued_time_utc is not None
    assert received.enqueued_time_utc.timestamp() == 1_700_000_000
    assert received.locked_until_utc is not None
    assert received.locked_until_utc.timestamp() == 1_700_000_030
    assert received.time_to_live is not None
    assert received.time_to_live.total_seconds() == 60
    assert received.dead_letter_reason == "why"


@settings(max_examples=300, deadline=None)
@given(our_values, st.data())
def test_corrupted_encodings_only_ever_raise_decode_error(value: Any, data: st.DataObject) -> None:
    out = bytearray()
    encode_value(out, value)
    cut = data.draw(st.integers(min_value=0, max_value=len(out)))
    corrupted = bytearray(out[:cut])
    if corrupted:
        at = data.draw(st.integers(min_value=0, max_value=len(corrupted) - 1))
        corrupted[at] = data.draw(st.integers(min_value=0, max_value=255))
    raw = bytes(corrupted)
    for parse in (lambda: decode_value(raw), lambda: skip_value(raw, 0)):
        with contextlib.suppress(DecodeError):
            parse()
    with contextlib.suppress(DecodeError):
        parse_message(b"\x00\x53\x77" + raw)


@given(
    st.booleans(),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.text(max_size=400),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.binary(min_size=0, max_size=32),
)
def test_hand_built_frames_equal_generic_encoding(
    flag: bool, number: int, description: str, handle: int, tag: bytes
) -> None:
    from servicebus_emulator import frames as F
    from servicebus_emulator.codec import UInt

    for state in (
        F.outcome(F.ACCEPTED),
        F.outcome(F.REJECTED, [F.error_value("a:b", description)]),
    ):
        assert F.settled_disposition(7, flag, number, encode(state)) == F.performative_frame(
            7, F.DISPOSITION, [flag, UInt(number), None, True, state]
        )
    for more in (None, True, False):
        fields = [UInt(handle), UInt(number), tag, UInt(0), flag]
        if more is not None:
            fields.append(more)
        assert F.transfer_head(7, handle, number, tag, flag, more, 3) + b"abc" == (
            F.performative_frame(7, F.TRANSFER, fields, b"abc")
        )
