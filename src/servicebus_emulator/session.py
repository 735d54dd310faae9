"""Sessions and links of one connection, as the broker tracks them.

A link is named from the client's side of the wire: on an `InboundLink` the client sends
(messages, CBS and management requests); on an `OutboundLink` it receives (deliveries,
replies). `OutboundLink` is the consumer a `Queue` hands messages to.
"""

from __future__ import annotations

import struct
import uuid
from collections import deque
from typing import Any, Protocol

from . import frames as F
from .broker import node_path
from .codec import Described, UInt
from .message import StoredMessage
from .queue import MessageSession, Queue
from .topic import Topic

WINDOW = 2**31 - 1  # session windows: large enough that flow control is done by link credit


class FrameWriter(Protocol):
    """What a session needs from its connection."""

    remote_max_frame_size: int
    # Bytes of replies waiting for credit on reply links (the connection bounds it).
    reply_backlog: int

    @property
    def backed_up(self) -> bool:
        """True while the peer does not read: nothing more should be written for it."""
        ...

    def write(self, data: bytes) -> None: ...

    def send(self, channel: int, code: int, fields: list[Any], frame_type: int = ...) -> None: ...


def address_of(terminus: Any) -> str | None:
    if isinstance(terminus, Described) and isinstance(terminus.value, list) and terminus.value:
        address = terminus.value[0]
        if isinstance(address, bytes):
            return address.decode("utf-8", "replace")
        return address if isinstance(address, str) else None
    return None


class Link:
    __slots__ = (
        "address",
        "handle",
        "kind",
        "name",
        "path",
        "queue",
        "rcv_settle_mode",
        "session",
        "snd_settle_mode",
        "topic",
    )

    def __init__(self, session: Session, name: str, handle: int, address: str) -> None:
        self.session = session
        self.name = name
        self.handle = handle
        self.address = address
        self.path = node_path(address)
        self.queue: Queue | None = None
        self.topic: Topic | None = None  # a sender's topic, or the topic of a `$management` node
        self.kind = "entity"
        self.snd_settle_mode = 0
        self.rcv_settle_mode = 0


class InboundLink(Link):
    """The client sends on it: messages for a queue, CBS or management requests."""

    __slots__ = (
        "credit",
        "delivery_count",
        "oversize",
        "partial",
        "partial_format",
        "partial_id",
        "partial_settled",
    )

    def __init__(self, session: Session, name: str, handle: int, address: str) -> None:
        super().__init__(session, name, handle, address)
        self.credit = 0
        self.delivery_count = 0
        self.partial: bytearray | None = None
        self.partial_id = 0
        self.partial_settled = False
        self.partial_format = 0
        self.oversize = False


class OutboundLink(Link):
    """The client receives on it: queue deliveries, or CBS / management replies."""

    __slots__ = ("credit", "delivery_count", "drain", "message_session", "pending", "waiting")

    def __init__(self, session: Session, name: str, handle: int, address: str) -> None:
        super().__init__(session, name, handle, address)
        self.credit = 0
        self.delivery_count = 0
        self.waiting = False
        self.drain = False
        self.pending: deque[bytes] = deque()
        # The Service Bus message session this receiver holds the lock of (session entities).
        self.message_session: MessageSession | None = None

    def session_lock_lost(self) -> None:
        """The queue ended this receiver's session lock: detach it with session-lock-lost."""
        session = self.session
        if not session.alive or session.outbound.get(self.handle) is not self:
            return
        del session.outbound[self.handle]
        session.detaching.add(self.handle)
        session.connection.send(
            session.channel,
            F.DETACH,
            [
                UInt(self.handle),
                True,
                F.error_value(
                    "com.microsoft:session-lock-lost",
                    "The session lock has expired on the MessageSession. "
                    "Accept a new MessageSession.",
                ),
            ],
        )

    # Consumer protocol used by Queue.pump
    def can_take(self) -> bool:
        session = self.session
        return (
            self.credit > 0
            and session.remote_incoming_window > 0
            and session.alive
            and not session.connection.backed_up
        )

    def take(self, queue: Queue, msg: StoredMessage) -> None:
        session = self.session
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
        if self.snd_settle_mode == 1:  # ReceiveAndDelete: the message is gone once sent
            queue.take_deleting(msg)
            payload = msg.encode(lock=False)
            tag = uuid.uuid4().bytes_le
            settled = True
        else:
            token = queue.lock(msg, self)
            payload = msg.encode(lock=True)
            tag = token.bytes_le
            settled = False
            session.unsettled[delivery_id] = (queue, token)
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        session.send_transfer(self.handle, delivery_id, tag, settled, payload)

    def send_reply(self, payload: bytes) -> None:
        self.pending.append(payload)
        self.session.connection.reply_backlog += len(payload)
        self.flush_replies()

    def drop_pending(self) -> int:
        """Forget replies never sent; returns their size in bytes."""
        size = sum(map(len, self.pending))
        self.pending.clear()
        return size

    def flush_replies(self) -> None:
        session = self.session
        conn = session.connection
        while self.pending and self.credit > 0 and session.alive and not conn.backed_up:
            payload = self.pending.popleft()
            conn.reply_backlog -= len(payload)
            delivery_id = session.next_delivery_id
            session.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
            session.send_transfer(
                self.handle, delivery_id, struct.pack(">I", delivery_id), True, payload
            )


class Session:
    __slots__ = (
        "alive",
        "channel",
        "connection",
        "detaching",
        "inbound",
        "next_delivery_id",
        "next_incoming_id",
        "next_outgoing_id",
        "outbound",
        "remote_channel",
        "remote_incoming_window",
        "unsettled",
    )

    def __init__(
        self,
        connection: FrameWriter,
        channel: int,
        remote_channel: int,
        next_incoming_id: int,
        remote_incoming_window: int,
    ) -> None:
        self.connection = connection
        self.channel = channel
        self.remote_channel = remote_channel
        self.alive = True
        self.next_incoming_id = next_incoming_id
        self.next_outgoing_id = 1
        self.next_delivery_id = 0
        self.remote_incoming_window = remote_incoming_window
        self.inbound: dict[int, InboundLink] = {}
        self.outbound: dict[int, OutboundLink] = {}
        # delivery id -> (queue, lock token) for PeekLock deliveries not yet settled
        self.unsettled: dict[int, tuple[Queue, uuid.UUID]] = {}
        # Handles we detached (refused links) whose detach the peer has not answered yet:
        # frames the peer sent on them before seeing our detach are ignored.
        self.detaching: set[int] = set()

    def link_slots(self) -> int:
        """Links the session holds state for, refused ones awaiting the peer's detach included."""
        return len(self.inbound) + len(self.outbound) + len(self.detaching)

    def send_transfer(
        self, handle: int, delivery_id: int, tag: bytes, settled: bool, payload: bytes
    ) -> None:
        conn = self.connection
        head = F.transfer_head(self.channel, handle, delivery_id, tag, settled, None, len(payload))
        if len(head) + len(payload) <= conn.remote_max_frame_size:
            conn.write(head + payload)
            self.next_outgoing_id += 1
            self.remote_incoming_window -= 1
            return
        # Larger than the peer's frame size: split, `more` set on all but the last frame.
        room = max(conn.remote_max_frame_size - len(head) - 1, 1)
        for start in range(0, len(payload), room):
            chunk = payload[start : start + room]
            more = start + room < len(payload)
            conn.write(
                F.transfer_head(self.channel, handle, delivery_id, tag, settled, more, len(chunk))
                + chunk
            )
            self.next_outgoing_id += 1
            self.remote_incoming_window -= 1

    def flow(self, link: InboundLink | OutboundLink | None = None, *, echo: bool = False) -> None:
        fields: list[Any] = [
            UInt(self.next_incoming_id),
            UInt(WINDOW),
            UInt(self.next_outgoing_id),
            UInt(WINDOW),
        ]
        if link is not None:
            fields += [UInt(link.handle), UInt(link.delivery_count), UInt(max(link.credit, 0))]
            if isinstance(link, OutboundLink):
                fields += [None, link.drain, echo]
        self.connection.send(self.channel, F.FLOW, fields)
