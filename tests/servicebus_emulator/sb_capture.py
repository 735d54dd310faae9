"""Capture the bytes the real SDK sends: a TCP proxy that records each client's stream."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType


class RecordingProxy:
    """Forwards 127.0.0.1 connections to the emulator; `streams` holds what each client sent."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.streams: list[bytearray] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="recording-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self._target)
            recorded = bytearray()
            with self._lock:
                self.streams.append(recorded)
                self._sockets += [client, upstream]
            for source, sink, record in ((client, upstream, recorded), (upstream, client, None)):
                threading.Thread(target=_pump, args=(source, sink, record), daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _pump(source: socket.socket, sink: socket.socket, record: bytearray | None) -> None:
    try:
        while chunk := source.recv(65536):
            if record is not None:
                record += chunk
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def split_frames(stream: bytes) -> list[bytes]:
    """A client's stream as protocol headers and whole frames, in order."""
    chunks: list[bytes] = []
    pos = 0
    while pos < len(stream):
        size = 8 if stream[pos : pos + 4] == b"AMQP" else struct.unpack_from(">I", stream, pos)[0]
        chunks.append(bytes(stream[pos : pos + size]))
        pos += size
    return chunks
