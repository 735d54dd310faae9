"""The least an AMQP peer must do for an SDK receiver to open and close, answered at once.

Test-only: it has no queues and never delivers. It answers each frame in the same read that
brought it (SASL, header, open, begin, attach, CBS put-token, detach, end, close) and grants
credit to the client's senders. Against it the SDK's receiver open and close take as long as
against the emulator: that time is the SDK's own (emulator README, "Receiver open and close").
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType
from typing import Any

from servicebus_emulator import frames as F
from servicebus_emulator.codec import Array, Int, UByte, UInt, UShort, encode
from servicebus_emulator.management import Request, encode_reply
from servicebus_emulator.session import address_of

_ACCEPTED = encode(F.outcome(F.ACCEPTED))
_CREDIT = 1000


class MinimalPeer:
    """Serves 127.0.0.1 on a free port, one thread per connection."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.connection_string = (
            f"Endpoint=sb://127.0.0.1:{self.port};SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
        )
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="minimal-amqp-peer", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.append(sock)
            threading.Thread(target=_serve, args=(sock,), daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> MinimalPeer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


def _serve(sock: socket.socket) -> None:
    with contextlib.suppress(OSError, ConnectionError), sock:
        if _read_exact(sock, 8) != F.SASL_HEADER:
            return
        # SASL: offer ANONYMOUS, take whatever the client picks.
        mechanisms = [Array("symbol", ["ANONYMOUS"])]
        sock.sendall(
            F.SASL_HEADER
            + F.frame(0, F.described_list(F.SASL_MECHANISMS, mechanisms), F.FRAME_SASL)
        )
        size = struct.unpack(">I", _read_exact(sock, 4))[0]
        _read_exact(sock, size - 4)  # sasl-init
        sock.sendall(F.frame(0, F.described_list(F.SASL_OUTCOME, [UByte(0)]), F.FRAME_SASL))
        if _read_exact(sock, 8) != F.AMQP_HEADER:
            return
        sock.sendall(F.AMQP_HEADER)
        # (channel, handle) -> node address, of the links the client sends / receives on
        sending: dict[tuple[int, int], str] = {}
        receiving: dict[tuple[int, int], str] = {}
        next_delivery: dict[int, int] = {}
        while True:
            size = struct.unpack(">I", _read_exact(sock, 4))[0]
            rest = _read_exact(sock, size - 4)
            channel = struct.unpack(">H", rest[2:4])[0]
            body = rest[rest[0] * 4 - 4 :]
            if not body:
                continue  # heartbeat
            code, fields, end = F.decode_performative(body)
            out = _answer(channel, code, fields, body[end:], (sending, receiving), next_delivery)
            if out:
                sock.sendall(out)
            if code == F.CLOSE:
                return


def _answer(
    channel: int,
    code: int,
    fields: list[Any],
    payload: bytes,
    links: tuple[dict[tuple[int, int], str], dict[tuple[int, int], str]],
    next_delivery: dict[int, int],
) -> bytes:
    sending, receiving = links
    if code == F.OPEN:
        return F.performative_frame(0, F.OPEN, ["minimal-peer", None, UInt(65536)])
    if code == F.BEGIN:
        window = UInt(2**31 - 1)
        return F.performative_frame(
            channel, F.BEGIN, [UShort(channel), UInt(1), window, window, UInt(1023)]
        )
    if code == F.ATTACH:
        name, handle, client_receives = fields[0], F.uint(fields, 1), bool(fields[2])
        source, target = F.field(fields, 5), F.field(fields, 6)
        reply = [name, UInt(handle), not client_receives, F.field(fields, 3), F.field(fields, 4)]
        reply += [source, target, None, None, UInt(0) if client_receives else None]
        out = F.performative_frame(channel, F.ATTACH, reply)
        if client_receives:
            receiving[(channel, handle)] = address_of(source) or ""
            return out
        sending[(channel, handle)] = address_of(target) or ""
        window = UInt(2**31 - 1)
        flow = [UInt(0), window, UInt(1), window, UInt(handle), UInt(0), UInt(_CREDIT)]
        return out + F.performative_frame(channel, F.FLOW, flow)
    if code == F.TRANSFER:  # a CBS put-token (or any request): accept it and answer 202
        request = Request(payload)
        node = sending.get((channel, F.uint(fields, 0)))
        reply_to = next((h for (c, h), a in receiving.items() if c == channel and a == node), None)
        out = F.settled_disposition(channel, True, F.uint(fields, 1), _ACCEPTED)
        if reply_to is not None:
            message = encode_reply(
                request.message_id, {"status-code": Int(202), "statusCode": Int(202)}, None
            )
            delivery = next_delivery.get(channel, 0)
            next_delivery[channel] = delivery + 1
            tag = struct.pack(">I", delivery)
            out = (
                F.transfer_head(channel, reply_to, delivery, tag, True, None, len(message))
                + message
                + out
            )
        return out
    if code == F.DETACH:
        sending.pop((channel, F.uint(fields, 0)), None)
        receiving.pop((channel, F.uint(fields, 0)), None)
        return F.performative_frame(channel, F.DETACH, [UInt(F.uint(fields, 0)), True])
    if code == F.END:
        return F.performative_frame(channel, F.END, [])
    if code == F.CLOSE:
        return F.performative_frame(0, F.CLOSE, [])
    return b""  # flow, disposition: nothing to answer


__all__ = ["MinimalPeer"]
