"""Garbage, truncated frames, oversize messages and vanishing clients cost one connection only."""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sb_raw_amqp import RawClient, message_bytes

from servicebus_emulator import RunningEmulator
from servicebus_emulator import frames as F
from servicebus_emulator.codec import UInt


def _round_trip_still_works(emulator: RunningEmulator, queue: str, expected: list[str]) -> None:
    """A normal SDK client can send and receive; `expected` accepted messages are all there."""
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("after-the-storm", message_id="final"))
        got: list[str] = []
        with client.get_queue_receiver(queue) as receiver:
            while len(got) < len(expected) + 1:
                msgs = receiver.receive_messages(max_message_count=10, max_wait_time=5)
                assert msgs, f"missing messages; got {got}"
                for msg in msgs:
                    got.append(b"".join(msg.body).decode())
                    receiver.complete_message(msg)
        assert sorted(got) == sorted([*expected, "after-the-storm"])


def test_garbage_header_is_answered_and_closed(emulator: RunningEmulator, queue_name: str) -> None:
    raw = RawClient(emulator.host, emulator.port)
    raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert raw.recv_exact(8) == F.AMQP_HEADER  # the spec's answer to a bad header
    assert raw.closed_by_peer()
    raw.close()
    _round_trip_still_works(emulator, queue_name, [])


MALFORMED = {
    "bad-constructor": (
        struct.pack(">IBBH", 8 + 3, 2, 0, 0) + b"\x00\x53\x99",
        "amqp:decode-error",
    ),
    "trailing-junk": (
        struct.pack(">IBBH", 8 + 5, 2, 0, 0) + b"\x00\x53\x13\x45\x00",
        "amqp:decode-error",
    ),
    "unknown-performative": (F.performative_frame(0, 0x7F, []), "amqp:not-implemented"),
    "oversize-frame": (struct.pack(">IBBH", 10_000_000, 2, 0, 0), "amqp:connection:framing-error"),
    "truncated-list": (
        struct.pack(">IBBH", 8 + 4, 2, 0, 0) + b"\x00\x53\x12\xc0",
        "amqp:decode-error",
    ),
    "lying-list-size": (
        struct.pack(">IBBH", 8 + 6, 2, 0, 0) + b"\x00\x53\x12\xc0\x09\x01",
        "amqp:decode-error",
    ),
    "transfer-on-unattached-handle": (
        F.performative_frame(0, F.TRANSFER, [UInt(42), UInt(0), b"t", UInt(0)], b"x"),
        "amqp:session:unattached-handle",
    ),
    "bad-data-offset": (
        struct.pack(">IBBH", 12, 1, 0, 0) + b"\x00\x00\x00\x00",
        "amqp:connection:framing-error",
    ),
}


def test_malformed_frames_close_that_connection_with_an_error(
    emulator: RunningEmulator, queue_name: str
) -> None:
    bystander = RawClient(emulator.host, emulator.port)
    bystander.handshake()
    bystander.attach_sender(queue_name)
    for delivery_id, (name, (frame_bytes, condition)) in enumerate(MALFORMED.items()):
        raw = RawClient(emulator.host, emulator.port)
        raw.handshake()
        raw.send(frame_bytes)
        close = raw.read_until(F.CLOSE)
        assert close[0].value[0] == condition, name
        assert raw.closed_by_peer(), name
        raw.close()
        # The other connection is unaffected.
        bystander.transfer(0, delivery_id, message_bytes(f"bystander-{name}".encode(), name))
        disposition = bystander.read_until(F.DISPOSITION)
        assert F.described_code(disposition[4]) == F.ACCEPTED, name
    bystander.close()
    _round_trip_still_works(emulator, queue_name, [f"bystander-{name}" for name in MALFORMED])


def test_oversize_message_is_rejected_and_the_link_keeps_working(
    emulator: RunningEmulator, queue_name: str
) -> None:
    raw = RawClient(emulator.host, emulator.port)
    raw.handshake()
    raw.attach_sender(queue_name)
    payload = message_bytes(os.urandom(300_000), "too-big")
    chunks = [payload[i : i + 60_000] for i in range(0, len(payload), 60_000)]
    for i, chunk in enumerate(chunks):
        raw.transfer(0, 0, chunk, more=i < len(chunks) - 1, first=i == 0)
    disposition = raw.read_until(F.DISPOSITION)
    assert F.described_code(disposition[4]) == F.REJECTED
    assert disposition[4].value[0].value[0] == "amqp:link:message-size-exceeded"
    raw.transfer(0, 1, message_bytes(b"small", "ok-1"))
    assert F.described_code(raw.read_until(F.DISPOSITION)[4]) == F.ACCEPTED
    raw.close()
    _round_trip_still_works(emulator, queue_name, ["small"])


def test_client_vanishing_mid_transfer_loses_nothing_accepted(
    emulator: RunningEmulator, queue_name: str
) -> None:
    raw = RawClient(emulator.host, emulator.port)
    raw.handshake()
    raw.attach_sender(queue_name)
    raw.transfer(0, 0, message_bytes(b"accepted", "acc-1"))
    assert F.described_code(raw.read_until(F.DISPOSITION)[4]) == F.ACCEPTED
    half = message_bytes(b"half" * 1000, "half-1")
    raw.transfer(0, 1, half[:100], more=True)
    raw.sock.shutdown(socket.SHUT_RDWR)
    raw.close()
    truncated = RawClient(emulator.host, emulator.port)
    truncated.handshake()
    truncated.send(struct.pack(">IBBH", 200, 2, 0, 0) + b"\x00\x53\x14")  # then vanishes
    truncated.close()
    _round_trip_still_works(emulator, queue_name, ["accepted"])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.binary(min_size=1, max_size=300))
def test_fuzzed_bytes_after_handshake_never_hurt_the_broker(
    emulator: RunningEmulator, junk: bytes
) -> None:
    raw = RawClient(emulator.host, emulator.port, timeout=2)
    raw.handshake()
    raw.send(junk)
    try:
        raw.sock.shutdown(socket.SHUT_WR)
        raw.closed_by_peer()
    except OSError:
        pass
    raw.close()
    # The broker still completes a fresh handshake and accepts a message.
    probe = RawClient(emulator.host, emulator.port)
    probe.handshake()
    probe.close()


def test_broker_serves_sdk_after_fuzzing(emulator: RunningEmulator, queue_name: str) -> None:
    for junk in (os.urandom(64), b"\x00" * 64, b"AMQP\x03\x01\x00\x00" + os.urandom(64)):
        raw = RawClient(emulator.host, emulator.port, timeout=2)
        raw.send(junk)
        raw.closed_by_peer()
        raw.close()
    _round_trip_still_works(emulator, queue_name, [])


IDLE_TIMEOUT_MS = 1000


def test_heartbeats_keep_an_idle_connection_alive(emulator: RunningEmulator) -> None:
    raw = RawClient(emulator.host, emulator.port, timeout=3)
    raw.send(F.AMQP_HEADER)
    assert raw.recv_exact(8) == F.AMQP_HEADER
    raw.frame(F.OPEN, ["raw-client", "127.0.0.1", UInt(65536), None, UInt(IDLE_TIMEOUT_MS)])
    assert raw.read_frame()[0] == F.OPEN
    # The peer announced an idle timeout: the emulator must send something (empty frames when
    # idle) more often than that, or the peer would close the connection as dead.
    arrivals = [time.monotonic()]
    for _ in range(4):
        assert raw.recv_exact(8) == F.EMPTY_FRAME
        arrivals.append(time.monotonic())
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert max(gaps) < IDLE_TIMEOUT_MS / 1000, gaps
    raw.close()
