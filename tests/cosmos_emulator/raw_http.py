"""Raw sockets for what no HTTP client sends: broken framing, floods, stalls.

Also the emulator process's resident memory, read from /proc, for tests whose point is memory.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


def read_until_closed(sock: socket.socket, deadline_s: float = 5.0) -> bytes:
    """Everything the server sends until it closes (or the deadline passes, or a reset)."""
    data = b""
    deadline = time.monotonic() + deadline_s
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    return data


def exchange(port: int, payload: bytes, deadline_s: float = 5.0) -> bytes:
    """Send `payload` on a fresh connection, half-close, and return all that comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=deadline_s) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may close first: what it answered is still readable
        return read_until_closed(sock, deadline_s)


def parse_responses(raw: bytes) -> list[RawResponse]:
    """Every complete HTTP/1.1 response in `raw`; ValueError on anything malformed."""
    responses: list[RawResponse] = []
    rest = raw
    while rest:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        if not sep:
            raise ValueError(f"incomplete response head: {head[:200]!r}")
        lines = head.decode("latin-1").split("\r\n")
        version, status, _reason = lines[0].split(" ", 2)
        if version != "HTTP/1.1" or not status.isdigit():
            raise ValueError(f"bad status line {lines[0]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"bad header line {line!r}")
            headers[name.strip().lower()] = value.strip()
        length = int(headers["content-length"])
        if len(rest) < length:
            raise ValueError("truncated body")
        body, rest = rest[:length], rest[length:]
        responses.append(RawResponse(int(status), headers, body))
    return responses


def one_response(raw: bytes) -> RawResponse:
    responses = parse_responses(raw)
    assert len(responses) == 1, responses
    return responses[0]


def readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def wait_until(condition: Any, deadline_s: float = 5.0, what: str = "condition") -> None:
    """Poll `condition()` until it is true; fail after the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} not reached within {deadline_s}s")


@dataclass
class EmulatorProcess:
    """`python -m cosmos_emulator` running as a process of its own (the `emulator_process`
    fixture): its pid, for memory readings, and where it listens."""

    pid: int
    port: int
    url: str
