"""A client that asks for large replies and never reads them cannot grow the broker's memory.

Peeks of ~250 KB messages requested on a raw connection that never reads: the emulator must
stop reading that connection once its output backs up (its memory, read from /proc, stays
bounded) and keep serving SDK clients meanwhile.
"""

from __future__ import annotations

import socket
import uuid

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from sb_process import (
    PROCESS_OTHER_QUEUE,
    PROCESS_QUEUE,
    RSS_MARGIN,
    EmulatorProcess,
    assert_serves_sdk_client,
)
from sb_raw_amqp import RawClient, message_bytes

from servicebus_emulator import frames as F
from servicebus_emulator.codec import encode
from servicebus_emulator.connection import MAX_REPLY_BACKLOG

MANAGEMENT = f"{PROCESS_OTHER_QUEUE}/$management"
LARGE_BODY = 250 * 1024
PEEK_REQUESTS = 1000  # answered in full, ~250 MB of replies


def peek_request(message_id: str) -> bytes:
    properties = F.described_list(0x73, [message_id, None, None, None, MANAGEMENT])
    application = b"\x00\x53\x74" + encode({"operation": "com.microsoft:peek-message"})
    body = b"\x00\x53\x77" + encode({"from-sequence-number": 1, "message-count": 1})
    return properties + application + body


def _send_large_messages(conn_str: str, count: int) -> None:
    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_queue_sender(PROCESS_OTHER_QUEUE) as sender,
    ):
        for i in range(count):
            body = bytes([65 + i]) * LARGE_BODY
            sender.send_messages(ServiceBusMessage(body, message_id=f"large-{uuid.uuid4()}"))


def _assert_memory_bounded(proc: EmulatorProcess, baseline: int) -> None:
    assert proc.alive(), proc.stderr()
    grown = proc.rss_bytes() - baseline
    assert grown < RSS_MARGIN, f"emulator memory grew by {grown // 2**20} MiB"


def _sdk_client_is_served_and_peeks(conn_str: str) -> None:
    assert_serves_sdk_client(conn_str, PROCESS_QUEUE)
    with (
        ServiceBusClient.from_connection_string(conn_str) as client,
        client.get_queue_receiver(PROCESS_OTHER_QUEUE) as receiver,
    ):
        (peeked,) = receiver.peek_messages(max_message_count=1, sequence_number=1)
        assert len(b"".join(peeked.body)) == LARGE_BODY


def test_non_reading_client_asking_for_large_peeks_is_paused_not_buffered(
    emulator_process: EmulatorProcess,
) -> None:
    _send_large_messages(emulator_process.connection_string, 2)
    baseline = emulator_process.rss_bytes()
    hog = RawClient(emulator_process.host, emulator_process.port)
    hog.handshake()
    hog.attach_sender(MANAGEMENT, 0)
    hog.attach_receiver(MANAGEMENT, 1, credit=100_000)
    hog.sock.settimeout(0.5)
    sent = 0
    try:
        for delivery_id in range(PEEK_REQUESTS):
            hog.transfer(0, delivery_id, peek_request(f"peek-{delivery_id}"))
            sent += 1
            if delivery_id % 100 == 0:
                _assert_memory_bounded(emulator_process, baseline)
    except TimeoutError:
        pass  # the emulator stopped reading us and the socket buffers are full: backpressure
    assert sent > 0
    # While the hog's replies sit unread, SDK clients are served (sends, receives, peeks).
    _sdk_client_is_served_and_peeks(emulator_process.connection_string)
    _assert_memory_bounded(emulator_process, baseline)
    # The hog starts reading: its replies flow again, the emulator reads its remaining requests.
    hog.sock.settimeout(10)
    received = 0
    while received < 3 * LARGE_BODY:
        received += len(hog.sock.recv(1 << 20))
    hog.sock.shutdown(socket.SHUT_RDWR)
    hog.close()
    _assert_memory_bounded(emulator_process, baseline)
    assert_serves_sdk_client(emulator_process.connection_string, PROCESS_QUEUE)
    stderr = emulator_process.stderr()
    assert "Traceback" not in stderr, stderr


def test_requests_without_reply_credit_are_refused_beyond_the_backlog(
    emulator_process: EmulatorProcess,
) -> None:
    _send_large_messages(emulator_process.connection_string, 1)
    baseline = emulator_process.rss_bytes()
    raw = RawClient(emulator_process.host, emulator_process.port)
    raw.handshake()
    raw.attach_sender(MANAGEMENT, 0)
    raw.attach_receiver(MANAGEMENT, 1, credit=0)  # replies can never be sent
    requests = MAX_REPLY_BACKLOG // LARGE_BODY + 20
    outcomes: list[str] = []
    for delivery_id in range(requests):
        raw.transfer(0, delivery_id, peek_request(f"no-credit-{delivery_id}"))
        state = raw.read_until(F.DISPOSITION)[4]
        if F.described_code(state) == F.ACCEPTED:
            outcomes.append("accepted")
        else:
            outcomes.append(str(state.value[0].value[0]))
    accepted = outcomes.count("accepted")
    assert 0 < accepted <= MAX_REPLY_BACKLOG // LARGE_BODY + 1
    assert outcomes[accepted:] == ["amqp:resource-limit-exceeded"] * (requests - accepted)
    _assert_memory_bounded(emulator_process, baseline)
    # Other links of that connection still work.
    raw.attach_sender(PROCESS_QUEUE, 2)
    raw.transfer(2, requests, message_bytes(b"still", f"still-{uuid.uuid4()}"))
    assert F.described_code(raw.read_until(F.DISPOSITION)[4]) == F.ACCEPTED
    raw.close()
    assert_serves_sdk_client(emulator_process.connection_string, PROCESS_QUEUE)
