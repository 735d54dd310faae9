"""The HTTP layer: keep-alive, malformed input, and a server that survives both."""

from __future__ import annotations

import http.client
import socket

from cosmos_emulator import RunningCosmosEmulator


def test_keep_alive_serves_many_requests_on_one_connection(
    cosmos_emulator: RunningCosmosEmulator,
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", cosmos_emulator.port, timeout=5)
    try:
        for _ in range(5):
            conn.request("GET", "/_emulator/health")
            response = conn.getresponse()
            assert response.status == 200
            assert response.getheader("Connection") == "keep-alive"
            response.read()
    finally:
        conn.close()


def test_malformed_requests_get_400_and_the_server_keeps_serving(
    cosmos_emulator: RunningCosmosEmulator,
) -> None:
    for garbage in (
        b"NONSENSE\r\n\r\n",
        b"GET / HTTP/1.1\r\nbroken header\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", cosmos_emulator.port), timeout=5) as sock:
            sock.sendall(garbage)
            reply = sock.recv(4096)
            assert reply.startswith(b"HTTP/1.1 400"), reply
    with socket.create_connection(("127.0.0.1", cosmos_emulator.port), timeout=5) as sock:
        sock.sendall(b'POST /dbs/ HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"id"')
    conn = http.client.HTTPConnection("127.0.0.1", cosmos_emulator.port, timeout=5)
    try:
        conn.request("GET", "/_emulator/health")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_connection_close_is_honoured(cosmos_emulator: RunningCosmosEmulator) -> None:
    with socket.create_connection(("127.0.0.1", cosmos_emulator.port), timeout=5) as sock:
        sock.sendall(
            b"GET /_emulator/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" in data
