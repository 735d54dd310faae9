"""A minimal raw AMQP client for robustness tests: it sends exactly the bytes a test wants."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from servicebus_emulator import frames as F
from servicebus_emulator.codec import Described, Symbol, UInt, ULong


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the emulator")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def read_frame(self) -> tuple[int, list[Any], bytes]:
        """Next non-empty frame: (performative code, fields, payload)."""
        while True:
            size = struct.unpack(">I", self.recv_exact(4))[0]
            rest = self.recv_exact(size - 4)
            body = rest[4 + (rest[0] * 4 - 8) :]
            if body:
                code, fields, end = F.decode_performative(body)
                return code, fields, body[end:]

    def read_until(self, code: int) -> list[Any]:
        while True:
            got, fields, _ = self.read_frame()
            if got == code:
                return fields

    def closed_by_peer(self) -> bool:
        """True once the emulator has closed the socket (reads EOF)."""
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def collect_until_closed(
        self, timeout: float, while_waiting: Callable[[], None] = lambda: None
    ) -> bytes:
        """Everything the emulator sends until it closes the socket, within `timeout` seconds.

        `while_waiting` runs between short reads (e.g. to fail fast on the emulator's memory).
        """
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.05)
        received = bytearray(self._buf)
        self._buf = b""
        while True:
            while_waiting()
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not closed within {timeout} s") from None
                continue
            except (ConnectionResetError, BrokenPipeError):
                return bytes(received)
            if not chunk:
                return bytes(received)
            received += chunk

    def frame(self, code: int, fields: list[Any], payload: bytes = b"", channel: int = 0) -> None:
        self.send(F.performative_frame(channel, code, fields, payload))

    def handshake(self, *, begin: bool = True) -> None:
        self.send(F.SASL_HEADER)
        assert self.recv_exact(8) == F.SASL_HEADER
        self.read_frame()  # sasl-mechanisms
        self.send(
            F.frame(0, F.described_list(F.SASL_INIT, [Symbol("ANONYMOUS"), b"", "h"]), F.FRAME_SASL)
        )
        code, fields, _ = self.read_frame()
        assert code == F.SASL_OUTCOME and fields[0] == 0
        self.send(F.AMQP_HEADER)
        assert self.recv_exact(8) == F.AMQP_HEADER
        self.frame(F.OPEN, ["raw-client", "127.0.0.1", UInt(65536)])
        assert self.read_frame()[0] == F.OPEN
        if begin:
            self.frame(F.BEGIN, [None, UInt(0), UInt(5000), UInt(5000)])
            assert self.read_frame()[0] == F.BEGIN

    def attach_sender(self, queue: str, handle: int = 0) -> None:
        target = Described(ULong(F.TARGET), [queue])
        source = Described(ULong(F.SOURCE), ["raw-source"])
        self.frame(F.ATTACH, [f"raw-{handle}", UInt(handle), False, None, None, source, target])
        assert self.read_until(F.ATTACH)[1] == handle
        self.read_until(F.FLOW)

    def attach_receiver(self, address: str, handle: int, credit: int) -> None:
        """A link the emulator sends on (deliveries or replies), with `credit` granted."""
        source = Described(ULong(F.SOURCE), [address])
        target = Described(ULong(F.TARGET), ["raw-target"])
        self.frame(F.ATTACH, [f"raw-{handle}", UInt(handle), True, None, None, source, target])
        assert self.read_until(F.ATTACH)[1] == handle
        if credit:
            flow = [UInt(0), UInt(5000), UInt(1), UInt(5000), UInt(handle), UInt(0), UInt(credit)]
            self.frame(F.FLOW, flow)

    def transfer(
        self,
        handle: int,
        delivery_id: int,
        payload: bytes,
        *,
        more: bool = False,
        first: bool = True,
    ) -> None:
        fields: list[Any] = [
            UInt(handle),
            UInt(delivery_id) if first else None,
            struct.pack(">I", delivery_id) if first else None,
            UInt(0),
            False,
            more,
        ]
        self.frame(F.TRANSFER, fields, payload)


def message_bytes(body: bytes, message_id: str | None = None) -> bytes:
    """An encoded message: optional properties.message-id and one data section."""
    out = b""
    if message_id is not None:
        out += F.described_list(0x73, [message_id])
    data = bytearray(b"\x00\x53\x75")
    from servicebus_emulator.codec import encode_value

    encode_value(data, body)
    return out + bytes(data)


def frames_in(data: bytes) -> list[tuple[int, list[Any]]]:
    """The performatives in a byte stream from the emulator (protocol headers skipped)."""
    out: list[tuple[int, list[Any]]] = []
    pos = 0
    while pos + 8 <= len(data):
        if data[pos : pos + 4] == b"AMQP":
            pos += 8
            continue
        size = struct.unpack_from(">I", data, pos)[0]
        if size < 8 or pos + size > len(data):
            break
        body = data[pos + data[pos + 4] * 4 : pos + size]
        pos += size
        if body:
            code, fields, _ = F.decode_performative(body)
            out.append((code, fields))
    return out


def close_condition(data: bytes) -> str | None:
    """The error condition of the close frame in `data` (None: no close, or one without error)."""
    for code, fields in frames_in(data):
        if code == F.CLOSE:
            error = fields[0] if fields else None
            return str(error.value[0]) if isinstance(error, Described) else None
    return None
