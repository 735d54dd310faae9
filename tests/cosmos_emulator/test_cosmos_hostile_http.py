"""Hostile HTTP before authentication: every size, count and time a client controls is bounded."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from azure.cosmos import CosmosClient, PartitionKey
from raw_http import (
    EmulatorProcess,
    exchange,
    one_response,
    read_until_closed,
    readable,
    rss_bytes,
    wait_until,
)

from cosmos_emulator import WELL_KNOWN_KEY, HttpLimits, RunningCosmosEmulator, start_in_background
from cosmos_emulator.http_limits import MAX_REQUEST_BODY_BYTES

MiB = 1024 * 1024
HEALTH = b"GET /_emulator/health HTTP/1.1\r\nHost: localhost\r\n\r\n"


def _assert_error(raw: bytes, status: int, code: str) -> None:
    response = one_response(raw)
    assert response.status == status, raw[:300]
    assert response.headers["connection"] == "close"
    assert response.json()["code"] == code
    assert response.json()["message"]


def _assert_healthy(port: int) -> None:
    assert one_response(exchange(port, HEALTH)).status == 200


# -- head limits -------------------------------------------------------------------------------
def test_too_many_header_fields_are_431(cosmos_emulator: RunningCosmosEmulator) -> None:
    fields = b"".join(b"x-h%d: v\r\n" % i for i in range(101))
    raw = exchange(cosmos_emulator.port, b"GET / HTTP/1.1\r\n" + fields + b"\r\n")
    _assert_error(raw, 431, "RequestHeaderFieldsTooLarge")
    _assert_healthy(cosmos_emulator.port)


def test_a_too_long_header_line_is_431(cosmos_emulator: RunningCosmosEmulator) -> None:
    raw = exchange(cosmos_emulator.port, b"GET / HTTP/1.1\r\nx-big: " + b"a" * 20000 + b"\r\n\r\n")
    _assert_error(raw, 431, "RequestHeaderFieldsTooLarge")


def test_too_many_header_bytes_are_431(cosmos_emulator: RunningCosmosEmulator) -> None:
    fields = b"".join(b"x-h%d: %s\r\n" % (i, b"a" * 8000) for i in range(10))
    raw = exchange(cosmos_emulator.port, b"GET / HTTP/1.1\r\n" + fields + b"\r\n")
    _assert_error(raw, 431, "RequestHeaderFieldsTooLarge")


def test_a_too_long_target_is_414(cosmos_emulator: RunningCosmosEmulator) -> None:
    raw = exchange(cosmos_emulator.port, b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\n\r\n")
    _assert_error(raw, 414, "RequestUriTooLong")


@pytest.mark.parametrize(
    "line",
    [b"GET", b"GET / HTTP/2.0", b"GET  / HTTP/1.1", b"G\x00T / HTTP/1.1", b"GET /\x7f HTTP/1.1"],
)
def test_a_malformed_request_line_is_400(
    cosmos_emulator: RunningCosmosEmulator, line: bytes
) -> None:
    raw = exchange(cosmos_emulator.port, line + b"\r\n\r\n")
    _assert_error(raw, 400, "BadRequest")


@pytest.mark.parametrize(
    "head",
    [
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x10\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
        b"GET / HTTP/1.1\r\n folded: value\r\n\r\n",
        b"GET / HTTP/1.1\r\nname : value\r\n\r\n",
        b"GET / HTTP/1.1\r\nx: a\x01b\r\n\r\n",
    ],
)
def test_ambiguous_framing_is_400(cosmos_emulator: RunningCosmosEmulator, head: bytes) -> None:
    _assert_error(exchange(cosmos_emulator.port, head), 400, "BadRequest")


def test_an_unknown_transfer_coding_is_501(cosmos_emulator: RunningCosmosEmulator) -> None:
    raw = exchange(cosmos_emulator.port, b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")
    _assert_error(raw, 501, "NotImplemented")


def test_a_header_flood_is_cut_off_and_memory_stays_flat(
    emulator_process: EmulatorProcess,
) -> None:
    """Distinct header lines streamed without end: answered 431 long before memory grows."""
    _assert_healthy(emulator_process.port)
    before = rss_bytes(emulator_process.pid)
    batch = b"".join(b"x-flood-%07d: v\r\n" % i for i in range(4000))  # ~84 KB
    answered = b""
    with socket.create_connection(("127.0.0.1", emulator_process.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n")
        sent = 0
        while sent < 16 * MiB and not readable(sock):
            try:
                sock.sendall(batch)
            except OSError:
                break  # closed by the server: its answer is already on the way
            sent += len(batch)
        grown = rss_bytes(emulator_process.pid) - before
        answered = read_until_closed(sock)
    _assert_error(answered, 431, "RequestHeaderFieldsTooLarge")
    assert grown < 32 * MiB, f"emulator grew by {grown / MiB:.0f} MiB"
    _assert_healthy(emulator_process.port)


# -- bodies ------------------------------------------------------------------------------------
# The body cap is three 2 MB items' worth: an SDK sends non-ASCII text escaped, so a valid item
# can arrive that long (the item's own 2 MB limit is checked in UTF-8 once it is decoded).
def test_a_body_over_the_cap_is_413_before_it_is_sent(
    cosmos_emulator: RunningCosmosEmulator,
) -> None:
    head = b"POST /dbs HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_REQUEST_BODY_BYTES + 1)
    _assert_error(exchange(cosmos_emulator.port, head), 413, "RequestEntityTooLarge")


def test_a_chunked_body_over_the_cap_is_413(cosmos_emulator: RunningCosmosEmulator) -> None:
    chunk = b"%x\r\n%s\r\n" % (MiB, b"a" * MiB)
    raw = exchange(
        cosmos_emulator.port,
        b"POST /dbs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunk * (MAX_REQUEST_BODY_BYTES // MiB + 1),
    )
    _assert_error(raw, 413, "RequestEntityTooLarge")


def test_many_unfinished_bodies_keep_memory_bounded(emulator_process: EmulatorProcess) -> None:
    """120 connections each declare a body just under the limit and never finish it."""
    port = emulator_process.port
    _assert_healthy(port)
    before = rss_bytes(emulator_process.pid)
    length = MAX_REQUEST_BODY_BYTES - 1
    head = b"POST /dbs HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length
    almost = b"a" * (length - 1)
    sockets: list[socket.socket] = []
    try:
        for _ in range(120):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sockets.append(sock)
            with contextlib.suppress(OSError):  # refused while the body was on its way
                sock.sendall(head + almost)
        grown = rss_bytes(emulator_process.pid) - before
        assert grown < 128 * MiB, f"emulator grew by {grown / MiB:.0f} MiB"
        print(f"grown {grown / MiB:.0f} MiB")
        # The shared body budget ran out and said so to the latecomers.
        wait_until(lambda: sum(map(readable, sockets)) >= 60, what="busy answers")
    finally:
        for sock in sockets:
            sock.close()
    wait_until(lambda: one_response(exchange(port, HEALTH)).status == 200, what="health")
    client = CosmosClient(emulator_process.url, WELL_KNOWN_KEY)
    container = client.create_database("d").create_container("c", PartitionKey("/pk"))
    assert container.create_item({"id": "1", "pk": "a"})["id"] == "1"


# -- connections and time ----------------------------------------------------------------------
@pytest.fixture
def strict_emulator() -> Iterator[RunningCosmosEmulator]:
    limits = HttpLimits(
        max_connections=4,
        idle_timeout_s=0.3,
        header_timeout_s=0.3,
        body_timeout_s=0.3,
        max_buffered_body_bytes=1000,
    )
    with start_in_background("127.0.0.1", 0, limits=limits) as emu:
        yield emu


def test_connections_over_the_cap_are_503_and_closed(
    strict_emulator: RunningCosmosEmulator,
) -> None:
    port = strict_emulator.port
    held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4)]
    try:
        # The fifth is answered at once, even before it sends anything.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
            response = one_response(read_until_closed(extra))
        assert response.status == 503
        assert response.headers["retry-after"] == "1"
        assert response.json()["code"] == "ServiceUnavailable"
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: one_response(exchange(port, HEALTH)).status == 200, what="a free slot")


def test_an_idle_connection_is_closed_silently(strict_emulator: RunningCosmosEmulator) -> None:
    with socket.create_connection(("127.0.0.1", strict_emulator.port), timeout=5) as sock:
        assert sock.recv(1) == b""  # closed well within the 5 s socket timeout (else it raises)


@pytest.mark.parametrize(
    "partial",
    [
        b"GET / HTTP/1.1\r\nx-slow: ",  # headers that never end
        b"POST /dbs HTTP/1.1\r\nContent-Length: 100\r\n\r\n{",  # a body that never ends
        b"POST /dbs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    ],
)
def test_a_stalled_request_is_408_and_closed(
    strict_emulator: RunningCosmosEmulator, partial: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", strict_emulator.port), timeout=5) as sock:
        sock.sendall(partial)
        raw = read_until_closed(sock, deadline_s=5)
    _assert_error(raw, 408, "RequestTimeout")


def test_bodies_over_the_shared_budget_are_503() -> None:
    limits = HttpLimits(max_buffered_body_bytes=1000)
    small = b"POST /dbs HTTP/1.1\r\nContent-Length: 200\r\n\r\n" + b"x" * 200
    with (
        start_in_background("127.0.0.1", 0, limits=limits) as emu,
        socket.create_connection(("127.0.0.1", emu.port), timeout=5) as holder,
    ):
        holder.sendall(b"POST /dbs HTTP/1.1\r\nContent-Length: 900\r\n\r\n{")
        busy: list[Any] = []

        def refused() -> bool:
            busy[:] = [one_response(exchange(emu.port, small))]
            return bool(busy[0].status == 503)

        wait_until(refused, what="the holder's reservation")
        assert busy[0].headers["x-ms-retry-after-ms"] == "1000"
        assert busy[0].json()["code"] == "ServiceUnavailable"
        holder.close()  # its reservation is returned when its connection ends
        wait_until(lambda: one_response(exchange(emu.port, small)).status != 503, what="release")
