"""What one client may cost the HTTP server: sizes, counts, timeouts and a shared body budget."""

from __future__ import annotations

from dataclasses import dataclass

# Cosmos limits an item to 2 MB of UTF-8, measured after decoding. The SDKs send JSON with
# every non-ASCII character escaped (`\uXXXX`, 12 bytes for a 4-byte character), so a
# valid 2 MB item can arrive three times as long: the body cap allows that, and the item's
# own size is checked once it is decoded (items.py).
MAX_REQUEST_BODY_BYTES = 6 * 1024 * 1024


@dataclass(frozen=True)
class HttpLimits:
    """Every limit a request meets before authentication, so no client can exhaust the server.

    Worst case with the defaults: `max_connections` heads (each at most `max_header_bytes`
    plus a 2 x 16 KiB read buffer) and `max_buffered_body_bytes` of bodies, about 100 MiB.
    """

    max_request_line_bytes: int = 8 * 1024  # longer: 414 (the target is what grows)
    max_header_line_bytes: int = 16 * 1024  # longer: 431
    max_header_count: int = 100  # the SDK sends about 20; more: 431
    max_header_bytes: int = 64 * 1024  # all header lines together; more: 431
    max_body_bytes: int = MAX_REQUEST_BODY_BYTES  # more: 413
    max_chunks: int = 4096  # chunked bodies: each chunk costs a loop turn, so they are few
    # Bodies being received or handled, over all connections: one more gets 503.
    max_buffered_body_bytes: int = 64 * 1024 * 1024
    max_connections: int = 256  # one more is answered 503 and closed at once
    idle_timeout_s: float = 30.0  # waiting for the next request line: closed silently
    header_timeout_s: float = 10.0  # receiving the header block: 408
    body_timeout_s: float = 30.0  # receiving the whole body: 408
    write_timeout_s: float = 30.0  # a client that does not read its response: dropped
    # After an error answer, what the client still sends is read and dropped for a moment,
    # so the kernel does not reset the connection and destroy the answer before it is read.
    linger_s: float = 1.0
    linger_bytes: int = 4 * 1024 * 1024

    @property
    def read_buffer_bytes(self) -> int:
        """The stream reader's line limit: the longest line any limit allows, plus CRLF."""
        return max(self.max_request_line_bytes, self.max_header_line_bytes) + 2


class BodyBudget:
    """Bytes of request bodies held at once; reserved before a body is read, released after."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0

    def reserve(self, size: int) -> bool:
        if self.in_use + size > self.capacity:
            return False
        self.in_use += size
        return True

    def release(self, size: int) -> None:
        self.in_use = max(0, self.in_use - size)
