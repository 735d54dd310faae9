"""Hostile frames against the emulator in its own process: each one costs only its connection.

Every case is sent on a fresh raw connection after the SASL and AMQP handshakes. The emulator
must close that connection with the right AMQP error within seconds while its resident memory
stays bounded (read from /proc), and keep serving everybody else.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest
from sb_process import (
    PROCESS_QUEUE,
    RSS_MARGIN,
    EmulatorProcess,
    assert_serves_sdk_client,
)
from sb_raw_amqp import RawClient, close_condition, frames_in, message_bytes

from servicebus_emulator import frames as F
from servicebus_emulator.codec import MAX_DEPTH, Described, Symbol, UInt, ULong, encode
from servicebus_emulator.connection import (
    HANDLE_MAX,
    MAX_FRAME_SIZE,
    MAX_LINKS_PER_CONNECTION,
    MAX_MESSAGE_SIZE,
    MAX_PARTIAL_BYTES,
)

# The issue's frame: a begin whose one field is an array32 of null with count 0x7FFFFFFF.
MEMORY_BOMB = bytes.fromhex("0000001802000000005311c00b01f0000000057fffffff40")
CLOSE_DEADLINE = 10.0


def amqp_frame(body: bytes, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, F.FRAME_AMQP, channel) + body


def performative(code: int, *encoded_fields: bytes) -> bytes:
    """A described list with already-encoded fields (so the fields can be anything)."""
    items = b"".join(encoded_fields)
    return (
        b"\x00\x53"
        + bytes((code,))
        + b"\xd0"
        + struct.pack(">II", 4 + len(items), len(encoded_fields))
        + items
    )


def array32(count: int, element: int, elements: bytes = b"") -> bytes:
    body = struct.pack(">I", count) + bytes((element,)) + elements
    return b"\xf0" + struct.pack(">I", len(body)) + body


def compound32(code: int, count: int, items: bytes, size: int | None = None) -> bytes:
    body = struct.pack(">I", count) + items
    return bytes((code,)) + struct.pack(">I", len(body) if size is None else size) + body


def nested_lists(depth: int) -> bytes:
    heads = []
    inner_size = 1
    for _ in range(depth):
        heads.append(b"\xd0" + struct.pack(">II", 4 + inner_size, 1))
        inner_size += 9
    return b"".join(reversed(heads)) + b"\x45"


def colliding_uuid_map(entries: int) -> bytes:
    mersenne = 2**61 - 1  # uuid hashes as its integer: all these keys share one hash
    items = b"".join(
        b"\x98" + uuid.UUID(int=3 + k * mersenne).bytes + b"\x40" for k in range(entries)
    )
    return compound32(0xD1, 2 * entries, items)


def _begin(*encoded_fields: bytes) -> bytes:
    return amqp_frame(performative(F.BEGIN, *encoded_fields))


# name -> (send a begin first?, frame bytes, expected close condition)
HOSTILE: dict[str, tuple[bool, bytes, str]] = {
    "issue-memory-bomb": (False, MEMORY_BOMB, "amqp:decode-error"),
    **{
        f"array32-of-{name}-count-2**32-1": (
            False,
            _begin(array32(0xFFFFFFFF, code)),
            "amqp:decode-error",
        )
        for name, code in {
            "null": 0x40,
            "true": 0x41,
            "false": 0x42,
            "uint0": 0x43,
            "ulong0": 0x44,
            "list0": 0x45,
        }.items()
    },
    "array8-of-null-count-255": (False, _begin(b"\xe0\x01\xff\x40"), "amqp:decode-error"),
    "array32-of-long-count-beyond-bytes": (
        False,
        _begin(array32(0x10000000, 0x81, b"\x00" * 8)),
        "amqp:decode-error",
    ),
    "performative-list32-count-2**31": (
        False,
        amqp_frame(b"\x00\x53\x11" + compound32(0xD0, 0x7FFFFFFF, b"\x40\x40")),
        "amqp:decode-error",
    ),
    "map32-count-2**32-1": (
        False,
        _begin(b"\x40", compound32(0xD1, 0xFFFFFFFF, b"\x40\x40")),
        "amqp:decode-error",
    ),
    "list32-size-beyond-frame": (
        False,
        _begin(compound32(0xD0, 1, b"\x40", size=0xFFFFFFF0)),
        "amqp:decode-error",
    ),
    "binary32-size-beyond-frame": (
        False,
        _begin(b"\xb0" + struct.pack(">I", 0x7FFFFFFF) + b"x"),
        "amqp:decode-error",
    ),
    "lists-nested-5000-deep": (False, _begin(nested_lists(5000)), "amqp:decode-error"),
    "lists-nested-one-past-the-limit": (
        False,
        _begin(nested_lists(MAX_DEPTH)),  # the performative's own list is one more level
        "amqp:decode-error",
    ),
    "descriptors-nested-20000-deep": (
        False,
        amqp_frame(b"\x00" * 20000 + b"\x53\x11\x45" + b"\x45" * 20000),
        "amqp:decode-error",
    ),
    "colliding-uuid-map-keys": (
        False,
        _begin(
            b"\x40", b"\x43", b"\x43", b"\x43", b"\x40", b"\x40", b"\x40", colliding_uuid_map(2500)
        ),
        "amqp:decode-error",
    ),
    "truncated-performative": (
        False,
        amqp_frame(b"\x00\x53\x11\xc0\x10\x03\x40"),
        "amqp:decode-error",
    ),
    "truncated-descriptor": (False, amqp_frame(b"\x00\x80\x00\x00"), "amqp:decode-error"),
    "body-not-described": (False, amqp_frame(b"\x45"), "amqp:decode-error"),
    "frame-size-0": (False, struct.pack(">IBBH", 0, 2, 0, 0), "amqp:connection:framing-error"),
    "frame-size-7": (False, struct.pack(">IBBH", 7, 2, 0, 0), "amqp:connection:framing-error"),
    "frame-size-max-plus-1": (
        False,
        struct.pack(">IBBH", MAX_FRAME_SIZE + 1, 2, 0, 0),
        "amqp:connection:framing-error",
    ),
    "frame-size-2**32-1": (
        False,
        struct.pack(">IBBH", 0xFFFFFFFF, 2, 0, 0),
        "amqp:connection:framing-error",
    ),
    "data-offset-0": (
        False,
        struct.pack(">IBBH", 11, 0, 0, 0) + b"\x00\x53\x11",
        "amqp:connection:framing-error",
    ),
    "data-offset-past-frame": (
        False,
        struct.pack(">IBBH", 11, 200, 0, 0) + b"\x00\x53\x11",
        "amqp:connection:framing-error",
    ),
    "descriptor-is-a-list": (False, amqp_frame(b"\x00\x45\x45"), "amqp:not-implemented"),
    "descriptor-ulong-2**64-1": (
        False,
        amqp_frame(b"\x00\x80" + b"\xff" * 8 + b"\x45"),
        "amqp:not-implemented",
    ),
    "descriptor-unknown-symbol": (
        False,
        amqp_frame(b"\x00" + encode(Symbol("amqp:nonsense:list")) + b"\x45"),
        "amqp:not-implemented",
    ),
    "descriptor-described": (
        False,
        amqp_frame(b"\x00\x00\x53\x11\x53\x11\x45"),
        "amqp:not-implemented",
    ),
    "attach-handle-beyond-handle-max": (
        True,
        F.performative_frame(
            0,
            F.ATTACH,
            ["big-handle", UInt(HANDLE_MAX + 1), False, None, None, None, None],
        ),
        "amqp:connection:framing-error",
    ),
}


def _rss_guard(proc: EmulatorProcess, baseline: int) -> Callable[[], None]:
    def check() -> None:
        assert proc.alive(), proc.stderr()
        grown = proc.rss_bytes() - baseline
        assert grown < RSS_MARGIN, f"emulator memory grew by {grown // 2**20} MiB"

    return check


def _assert_still_serves_raw_clients(proc: EmulatorProcess, tag: str) -> None:
    probe = RawClient(proc.host, proc.port)
    probe.handshake()
    probe.attach_sender(PROCESS_QUEUE)
    probe.transfer(0, 0, message_bytes(tag.encode(), f"probe-{tag}-{uuid.uuid4()}"))
    assert F.described_code(probe.read_until(F.DISPOSITION)[4]) == F.ACCEPTED
    probe.close()


def _no_internal_errors(proc: EmulatorProcess) -> None:
    assert "Traceback" not in proc.stderr(), proc.stderr()


def _send_and_expect_close(
    proc: EmulatorProcess, begin: bool, frame_bytes: bytes, condition: str
) -> None:
    baseline = proc.rss_bytes()
    raw = RawClient(proc.host, proc.port)
    raw.handshake(begin=begin)
    raw.send(frame_bytes)
    received = raw.collect_until_closed(CLOSE_DEADLINE, _rss_guard(proc, baseline))
    raw.close()
    assert close_condition(received) == condition


def test_issue_memory_bomb_closes_that_connection_and_the_sdk_is_still_served(
    emulator_process: EmulatorProcess,
) -> None:
    assert len(MEMORY_BOMB) == 24
    bystander = RawClient(emulator_process.host, emulator_process.port)
    bystander.handshake()
    bystander.attach_sender(PROCESS_QUEUE)
    _send_and_expect_close(emulator_process, False, MEMORY_BOMB, "amqp:decode-error")
    # A connection opened before the attack still works, and so does a new SDK client.
    bystander.transfer(0, 0, message_bytes(b"bystander", f"bystander-{uuid.uuid4()}"))
    assert F.described_code(bystander.read_until(F.DISPOSITION)[4]) == F.ACCEPTED
    bystander.close()
    assert_serves_sdk_client(emulator_process.connection_string, PROCESS_QUEUE)
    _no_internal_errors(emulator_process)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_frame_closes_only_its_connection(
    emulator_process: EmulatorProcess, name: str
) -> None:
    begin, frame_bytes, condition = HOSTILE[name]
    assert len(frame_bytes) <= MAX_FRAME_SIZE or name.startswith("frame-size")
    _send_and_expect_close(emulator_process, begin, frame_bytes, condition)
    _assert_still_serves_raw_clients(emulator_process, name)
    _no_internal_errors(emulator_process)


def test_too_many_links_on_one_connection_close_it(emulator_process: EmulatorProcess) -> None:
    baseline = emulator_process.rss_bytes()
    raw = RawClient(emulator_process.host, emulator_process.port)
    raw.handshake()
    target = Described(ULong(F.TARGET), ["$cbs"])
    for handle in range(MAX_LINKS_PER_CONNECTION + 1):
        raw.frame(F.ATTACH, [f"link-{handle}", UInt(handle), False, None, None, None, target])
    received = raw.collect_until_closed(CLOSE_DEADLINE, _rss_guard(emulator_process, baseline))
    raw.close()
    attached = [fields for code, fields in frames_in(received) if code == F.ATTACH]
    assert len(attached) == MAX_LINKS_PER_CONNECTION
    assert close_condition(received) == "amqp:resource-limit-exceeded"
    _assert_still_serves_raw_clients(emulator_process, "links")
    _no_internal_errors(emulator_process)


def test_incomplete_messages_beyond_the_budget_close_the_connection(
    emulator_process: EmulatorProcess,
) -> None:
    raw = RawClient(emulator_process.host, emulator_process.port)
    raw.handshake()
    links = MAX_PARTIAL_BYTES // MAX_MESSAGE_SIZE + 1
    for handle in range(links):
        raw.attach_sender(PROCESS_QUEUE, handle)
    chunk = b"\x00\x53\x75\xb0" + struct.pack(">I", MAX_MESSAGE_SIZE - 100) + b"x" * 60_000
    baseline = emulator_process.rss_bytes()
    try:
        for offset in range(0, MAX_MESSAGE_SIZE - 60_000, 60_000):
            for handle in range(links):  # every link keeps a message open: none completes
                raw.transfer(handle, handle, chunk, more=True, first=offset == 0)
    except (ConnectionResetError, BrokenPipeError):
        pass  # closed by the emulator while we were still sending
    received = raw.collect_until_closed(CLOSE_DEADLINE, _rss_guard(emulator_process, baseline))
    raw.close()
    assert close_condition(received) == "amqp:resource-limit-exceeded"
    _assert_still_serves_raw_clients(emulator_process, "partial")
    _no_internal_errors(emulator_process)


def test_attach_echoing_values_outside_the_long_range_is_answered(
    emulator_process: EmulatorProcess,
) -> None:
    raw = RawClient(emulator_process.host, emulator_process.port)
    raw.handshake()
    # A ulong above 2**63 and a non-ASCII symbol inside the source the emulator echoes.
    source = Described(ULong(F.SOURCE), ["raw-source", ULong(2**64 - 1), Symbol("säure")])
    target = Described(ULong(F.TARGET), [PROCESS_QUEUE])
    raw.frame(F.ATTACH, ["echo", UInt(0), False, None, None, source, target])
    reply = raw.read_until(F.ATTACH)
    assert reply[5].value[1] == 2**64 - 1
    raw.close()
    _no_internal_errors(emulator_process)


def test_deeply_nested_message_is_rejected_and_the_link_keeps_working(
    emulator_process: EmulatorProcess,
) -> None:
    raw = RawClient(emulator_process.host, emulator_process.port)
    raw.handshake()
    raw.attach_sender(PROCESS_QUEUE)
    # Application properties whose value is 20000 described values deep: skipped, not decoded.
    deep = b"\x00" * 20000 + b"\x53\x01" + b"\x40" * 20000
    props = b"\x00\x53\x74" + compound32(0xD1, 2, encode("k") + deep)
    raw.transfer(0, 0, props + message_bytes(b"deep", "deep-1"))
    disposition = raw.read_until(F.DISPOSITION)
    assert F.described_code(disposition[4]) == F.REJECTED
    assert disposition[4].value[0].value[0] == "amqp:decode-error"
    raw.transfer(0, 1, message_bytes(b"fine", f"fine-{uuid.uuid4()}"))
    assert F.described_code(raw.read_until(F.DISPOSITION)[4]) == F.ACCEPTED
    raw.close()
    _no_internal_errors(emulator_process)


def test_management_requests_with_colliding_uuid_property_keys_stall_nobody(
    emulator_process: EmulatorProcess,
) -> None:
    management = f"{PROCESS_QUEUE}/$management"
    raw = RawClient(emulator_process.host, emulator_process.port)
    raw.handshake()
    raw.attach_sender(management, 0)
    raw.attach_receiver(management, 1, credit=100)
    # Application properties keyed by 13 900 uuids with one hash: quadratic to put in a dict.
    request = (
        F.described_list(0x73, ["collide", None, None, None, management])
        + b"\x00\x53\x74"
        + colliding_uuid_map(13_900)
        + b"\x00\x53\x77"
        + encode({"from-sequence-number": 1, "message-count": 1})
    )
    assert len(request) <= MAX_MESSAGE_SIZE
    requests = 4
    for delivery_id in range(requests):
        chunks = [request[i : i + 60_000] for i in range(0, len(request), 60_000)]
        for i, chunk in enumerate(chunks):
            raw.transfer(0, delivery_id, chunk, more=i < len(chunks) - 1, first=i == 0)
    # A client arriving meanwhile is served within its socket timeout (5 s).
    bystander = RawClient(emulator_process.host, emulator_process.port)
    bystander.handshake()
    bystander.close()
    settled = 0
    while settled < requests:
        settled += raw.read_frame()[0] == F.DISPOSITION
    raw.close()
    _no_internal_errors(emulator_process)
