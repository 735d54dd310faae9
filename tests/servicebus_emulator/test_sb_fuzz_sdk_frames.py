"""Structured fuzzing: the SDK's own frames, mutated, replayed against the emulator process.

The real SDK talks to the emulator through a recording proxy (a send, a batch, a PeekLock
receive, a lock renewal, a peek, completions). Each example replays one recorded connection
with one frame mutated where parsers are fragile (constructors, counts, sizes, truncation),
then checks that the emulator closed or served that connection within a deadline, that its
memory stayed bounded and that it still serves well-behaved clients, raw and SDK alike.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sb_capture import RecordingProxy, split_frames
from sb_process import (
    PROCESS_OTHER_QUEUE,
    PROCESS_QUEUE,
    RSS_MARGIN,
    EmulatorProcess,
    assert_serves_sdk_client,
)
from sb_raw_amqp import RawClient

from servicebus_emulator import connection_string

EXAMPLES = 150
SDK_CHECK_EVERY = 50  # examples between two full SDK round trips
CLOSE_DEADLINE = 10.0
BOUNDARY_U32 = (0, 1, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
# Constructors whose misuse stresses the decoder: described, zero-width, variable, compound.
CONSTRUCTORS: tuple[int, ...] = (0x00, 0x40, 0x41, 0x43, 0x45, 0x53, 0x98, 0xA0, 0xA1, 0xA3)
CONSTRUCTORS += (0xB0, 0xB1, 0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0)
_FIXED = {0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0, 0x56: 1, 0x60: 2, 0x61: 2}
_FIXED.update({code: 1 for code in range(0x50, 0x56)})
_FIXED.update({code: 4 for code in range(0x70, 0x75)})
_FIXED.update({code: 8 for code in range(0x80, 0x85)})
_FIXED.update({0x94: 16, 0x98: 16})


def _nested(depth: int) -> bytes:
    heads, inner = [], 1
    for _ in range(depth):
        heads.append(b"\xd0" + struct.pack(">II", 4 + inner, 1))
        inner += 9
    return b"".join(reversed(heads)) + b"\x45"


# Values that once hung or bloated a broker, spliced in place of a value the SDK wrote.
HOSTILE_VALUES = (
    *(b"\xf0\x00\x00\x00\x05\x7f\xff\xff\xff" + bytes((c,)) for c in range(0x40, 0x46)),
    b"\xe0\x01\xff\x40",
    b"\xd0\x00\x00\x00\x06\x7f\xff\xff\xff\x40\x40",
    b"\xd1\x00\x00\x00\x06\xff\xff\xff\xfe\x40\x40",
    b"\xb0\x7f\xff\xff\xff",
    _nested(40),
    _nested(3000),
    b"\x00" * 3000 + b"\x53\x01" + b"\x40" * 3000,
)


def value_spans(body: bytes) -> list[tuple[int, int]]:
    """(start, end) of every encoded value in a frame body, nested ones included, as far as
    the encoding is well formed. An independent walker: the fuzzer does not ask the codec
    under test where its targets are."""
    spans: list[tuple[int, int]] = []
    pos = 0
    try:
        while pos < len(body):
            pos = _walk(body, pos, spans, 0)
    except (ValueError, struct.error):
        pass
    return spans


def _walk(buf: bytes, pos: int, spans: list[tuple[int, int]], depth: int) -> int:
    if pos >= len(buf) or depth > 20:
        raise ValueError("out of range")
    code = buf[pos]
    first, count = 0, 0
    if code == 0x00:
        end = _walk(buf, _walk(buf, pos + 1, spans, depth + 1), spans, depth + 1)
    elif code in _FIXED:
        end = pos + 1 + _FIXED[code]
    elif code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
        end = pos + 2 + buf[pos + 1]
        if code in (0xC0, 0xC1):
            first, count = pos + 3, buf[pos + 2]
    elif code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
        end = pos + 5 + struct.unpack_from(">I", buf, pos + 1)[0]
        if code in (0xD0, 0xD1):
            first, count = pos + 9, struct.unpack_from(">I", buf, pos + 5)[0]
    else:
        raise ValueError("unknown constructor")
    if end > len(buf):
        raise ValueError("truncated")
    for _ in range(count):
        if first >= end:
            break
        first = _walk(buf, first, spans, depth + 1)
    spans.append((pos, end))
    return end


@pytest.fixture(scope="module")
def sdk_streams(emulator_process: EmulatorProcess) -> Iterator[list[list[bytes]]]:
    """What the SDK sent on each of its connections, split into headers and frames."""
    with RecordingProxy(emulator_process.host, emulator_process.port) as proxy:
        conn_str = connection_string("127.0.0.1", proxy.port)
        with ServiceBusClient.from_connection_string(conn_str) as client:
            with client.get_queue_sender(PROCESS_OTHER_QUEUE) as sender:
                sender.send_messages(
                    ServiceBusMessage(
                        "seed",
                        message_id="seed-1",
                        application_properties={"tenant": "t-1", "attempt": 1},
                        subject="fuzz",
                        correlation_id="c-1",
                        content_type="text/plain",
                    )
                )
                batch = sender.create_message_batch()
                for i in range(2):
                    batch.add_message(ServiceBusMessage(b"batched" * 20, message_id=f"b-{i}"))
                sender.send_messages(batch)
            with client.get_queue_receiver(PROCESS_OTHER_QUEUE) as receiver:
                received = receiver.receive_messages(max_message_count=3, max_wait_time=5)
                assert received
                receiver.renew_message_lock(received[0])
                receiver.peek_messages(max_message_count=3, sequence_number=1)
                for msg in received:
                    receiver.complete_message(msg)
        streams = [split_frames(bytes(stream)) for stream in proxy.streams if stream]
    assert len(streams) >= 2
    yield streams


def _mutate(frame: bytes, data: st.DataObject) -> bytes:
    mutated = bytearray(frame)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="mutations")):
        if not mutated:
            break
        at = data.draw(st.integers(min_value=0, max_value=len(mutated) - 1), label="at")
        kind = data.draw(
            st.sampled_from(
                ["value", "value", "count", "byte", "u32", "constructor", "truncate", "insert"]
            ),
            label="kind",
        )
        spans = value_spans(bytes(mutated[8:]))
        if kind in ("value", "count") and spans:
            start, end = data.draw(st.sampled_from(spans), label="value")
            start, end = start + 8, end + 8
            if kind == "value":
                mutated[start:end] = data.draw(st.sampled_from(HOSTILE_VALUES), label="hostile")
            elif mutated[start] in (0xD0, 0xD1, 0xF0, 0xB0, 0xB1, 0xB3):  # its size or count
                field = start + 1 + 4 * data.draw(st.integers(min_value=0, max_value=1))
                mutated[field : field + 4] = struct.pack(
                    ">I", data.draw(st.sampled_from(BOUNDARY_U32))
                )
            elif mutated[start] in (0xC0, 0xC1, 0xE0, 0xA0, 0xA1, 0xA3):
                field = start + 1 + data.draw(st.integers(min_value=0, max_value=1))
                mutated[field] = data.draw(st.sampled_from((0, 1, 0x7F, 0xFF)))
        elif kind == "byte":
            mutated[at] = data.draw(st.integers(min_value=0, max_value=255))
        elif kind == "u32":  # a count or size field set to a boundary value
            mutated[at : at + 4] = struct.pack(">I", data.draw(st.sampled_from(BOUNDARY_U32)))
        elif kind == "constructor":
            mutated[at] = data.draw(st.sampled_from(CONSTRUCTORS))
        elif kind == "truncate":
            del mutated[at:]
        elif kind == "insert":
            mutated[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    # Usually keep the frame header's size true, so the mutation reaches the decoders.
    if len(mutated) >= 8 and data.draw(st.sampled_from([True, True, True, False]), label="fix"):
        mutated[0:4] = struct.pack(">I", len(mutated))
    return bytes(mutated)


def _replay(proc: EmulatorProcess, stream: bytes, baseline: int) -> None:
    def memory_bounded() -> None:
        assert proc.alive(), proc.stderr()
        grown = proc.rss_bytes() - baseline
        assert grown < RSS_MARGIN, f"emulator memory grew by {grown // 2**20} MiB"

    raw = RawClient(proc.host, proc.port)
    try:
        raw.send(stream)
        raw.sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the emulator closed the connection before we were done: allowed
    raw.collect_until_closed(CLOSE_DEADLINE, memory_bounded)
    raw.close()


def test_mutated_sdk_frames_never_hang_crash_or_bloat_the_broker(
    emulator_process: EmulatorProcess, sdk_streams: list[list[bytes]]
) -> None:
    assert_serves_sdk_client(emulator_process.connection_string, PROCESS_QUEUE)
    baseline = emulator_process.rss_bytes()
    examples = 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def replay_one_mutated(data: st.DataObject) -> None:
        nonlocal examples
        chunks = data.draw(st.sampled_from(sdk_streams), label="connection")
        frames = [i for i, chunk in enumerate(chunks) if not chunk.startswith(b"AMQP")]
        index = data.draw(st.sampled_from(frames), label="frame")
        mutated = _mutate(chunks[index], data)
        stream = b"".join(chunks[:index]) + mutated + b"".join(chunks[index + 1 :])
        _replay(emulator_process, stream, baseline)
        # The broker still completes a fresh handshake at once ...
        probe = RawClient(emulator_process.host, emulator_process.port)
        probe.handshake()
        probe.close()
        examples += 1
        if examples % SDK_CHECK_EVERY == 0:  # ... and serves the SDK
            assert_serves_sdk_client(emulator_process.connection_string, PROCESS_QUEUE)

    replay_one_mutated()
    assert_serves_sdk_client(emulator_process.connection_string, PROCESS_QUEUE)
    stderr = emulator_process.stderr()
    assert "Traceback" not in stderr, stderr
