"""One client connection: SASL, AMQP framing, sessions and links, on an asyncio Protocol.

Frames are parsed and handled synchronously in `data_received`; replies are buffered and
written once per event-loop turn, so a burst of frames costs one socket write.

Everything a peer can make the broker hold for its connection is bounded (see the limits
below): a peer that stops reading has its input left unread until its output drains, and a
peer that sends hostile bytes loses its own connection, never the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import uuid
from typing import Any

from . import frames as F
from .broker import MANAGEMENT_SUFFIX, Broker, node_path
from .codec import (
    Array,
    DecodeError,
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    decode_value,
    encode,
)
from .journal import JournalError
from .management import (
    Reply,
    Request,
    cbs_reply,
    encode_reply,
    execute,
    execute_on_topic,
    normalise,
    reply_application_properties,
    text,
)
from .message import BATCH_FORMAT, DATA, ParsedMessage, assign_message_id, parse_message
from .queue import (
    LockLostError,
    MessageSession,
    NoSessionAvailableError,
    Queue,
    SessionCannotBeLockedError,
    SessionIdMissingError,
)
from .session import WINDOW, InboundLink, OutboundLink, Session, address_of
from .topic import Topic

_LOG = logging.getLogger("servicebus_emulator")

MAX_FRAME_SIZE = 65536  # what Service Bus advertises; larger messages arrive in several frames
MAX_MESSAGE_SIZE = 262144  # Standard tier and the official emulator: 256 KB
CHANNEL_MAX = 4999
HANDLE_MAX = 1023  # per session; the SDK takes the lowest free handle, about five per connection
# Links (including refused ones awaiting the peer's detach) per connection: a link holds its
# name and address, so without a bound one connection could hold sessions x handles of them.
MAX_LINKS_PER_CONNECTION = 256
# Bytes of incomplete multi-frame messages per connection: room for four maximum-size
# messages arriving at once.
MAX_PARTIAL_BYTES = 4 * MAX_MESSAGE_SIZE
# Output backpressure: above the high mark the transport calls `pause_writing` and the
# connection stops reading, delivering and answering until it drains below the low mark.
OUTPUT_HIGH_WATER = 1024 * 1024
OUTPUT_LOW_WATER = 256 * 1024
# Management / CBS replies waiting for credit on their reply link, per connection; requests
# beyond it are refused rather than answered into an unbounded queue.
MAX_REPLY_BACKLOG = 1024 * 1024
# A connection we closed whose peer does not read our close frame is dropped after this long.
CLOSE_GRACE_SECONDS = 5.0
INBOUND_CREDIT = 1000
_frame_head = struct.Struct(">IBBH")
_u32 = struct.Struct(">I").unpack_from

# Service Bus's answer for a full entity; the SDKs raise their quota-exceeded error for it
# (azure-servicebus: ServiceBusQuotaExceededError, not retried). The emulator gives it for a
# full disk: the message is refused and nothing changed.
QUOTA_EXCEEDED = "amqp:resource-limit-exceeded"
# Management operations that store what a client sends: refused on a full disk, as messages are.
_STORING_OPERATIONS = frozenset(
    {"com.microsoft:schedule-message", "com.microsoft:set-session-state"}
)
# Phases whose output answers no link, so it acknowledges no change: it may go out even when
# the journal failed (a new connection then learns why from the close after its open).
_HANDSHAKE_PHASES = frozenset({"header", "sasl", "open", "refused"})

_ACCEPTED = F.outcome(F.ACCEPTED)
_RELEASED = F.outcome(F.RELEASED)
_ENCODED_STATES = {id(_ACCEPTED): encode(_ACCEPTED), id(_RELEASED): encode(_RELEASED)}


def _encoded_state(state: Described) -> bytes:
    """Encoded outcome; the two constant outcomes are encoded once."""
    cached = _ENCODED_STATES.get(id(state))
    return cached if cached is not None else encode(state)


class ProtocolError(Exception):
    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


# Open AMQP connections at once (`--max-connections`). The official emulator allows 10, but
# `orders up` and the demo hold more than 10 (one per sender and receiver), so the default
# leaves room for them while still bounding what clients can make the broker hold.
DEFAULT_MAX_CONNECTIONS = 100


class AmqpConnection(asyncio.Protocol):
    def __init__(
        self,
        broker: Broker,
        connections: set[AmqpConnection],
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.broker = broker
        self._connections = connections
        self._max_connections = max_connections
        self.opened = False  # past the AMQP open: counts towards max_connections
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._wbuf: list[bytes] = []
        self._wbuf_size = 0
        self._handling = False
        self._write_paused = False
        self._reading_paused = False
        self._link_count = 0
        self._partial_bytes = 0
        self.reply_backlog = 0
        # header -> sasl -> header -> open -> amqp (or refused) -> closed
        self._phase = "header"
        self._sasl_done = False
        self.remote_max_frame_size = 512
        self.sessions: dict[int, Session] = {}
        self._reply_links: dict[str, OutboundLink] = {}
        self._idle_handle: asyncio.TimerHandle | None = None
        self._heartbeat_interval = 0.0
        self._wrote_since_beat = False
        self.peer = "?"

    # ------------------------------------------------------------------ transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=OUTPUT_HIGH_WATER, low=OUTPUT_LOW_WATER)
        self._connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # replies are small and latency-bound
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer = str(transport.get_extra_info("peername"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = "closed"
        self._connections.discard(self)
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        for session in list(self.sessions.values()):
            self._drop_session(session)
        self.sessions.clear()
        # Unsettled PeekLock deliveries keep their locks until they expire, as in Service Bus;
        # a half-received transfer was never accepted, so dropping it loses nothing.

    def pause_writing(self) -> None:
        # The transport holds more than OUTPUT_HIGH_WATER bytes: the peer is not reading.
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        # Not from inside the transport's write callback: writing there re-enters it, and a
        # write that fails on a reset connection then reports the loss twice (asyncio 3.11).
        asyncio.get_running_loop().call_soon(self._resume)

    def _resume(self) -> None:
        if self._phase == "closed" or self.transport is None or self._write_paused:
            return
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
        self._handle_input()  # frames left unprocessed while the output was backed up
        if not self._write_paused:
            for session in list(self.sessions.values()):
                for link in list(session.outbound.values()):
                    self._kick(link)

    @property
    def backed_up(self) -> bool:
        """True while the peer does not take our output: produce nothing more for it."""
        return self._write_paused

    def write(self, data: bytes) -> None:
        # Frames written while handling input are flushed when that input is done; writes
        # triggered from elsewhere (another connection's send, a timer) flush on the next turn.
        if not self._wbuf and not self._handling:
            asyncio.get_running_loop().call_soon(self._flush)
        self._wbuf.append(data)
        self._wbuf_size += len(data)
        if self._wbuf_size >= OUTPUT_HIGH_WATER:
            self._flush()  # hand it to the transport now, so its backpressure can start

    def _flush(self) -> None:
        journal = self.broker.journal
        if journal is not None:  # what this output acknowledges is in the journal first
            try:
                journal.sync()
            except JournalError as exc:
                if self._phase not in _HANDSHAKE_PHASES:
                    self._close_unjournaled(str(exc))
                    return
        if self._wbuf and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self._wbuf))
            self._wrote_since_beat = True
        self._wbuf.clear()
        self._wbuf_size = 0

    def send(
        self, channel: int, code: int, fields: list[Any], frame_type: int = F.FRAME_AMQP
    ) -> None:
        body = F.described_list(code, fields)
        self.write(_frame_head.pack(8 + len(body), 2, frame_type, channel) + body)

    def close_with_error(self, condition: str, description: str) -> None:
        if self._phase == "closed" or self.transport is None:
            return
        _LOG.info("closing connection %s: %s %s", self.peer, condition, description)
        if self._phase == "amqp":
            self.send(0, F.CLOSE, [F.error_value(condition, description)])
        self._phase = "closed"
        self._flush()
        self._close_transport()

    def _close_unjournaled(self, description: str) -> None:
        """The journal failed beyond what its reserve saves: the buffered output may
        acknowledge changes that are not in it, so it is dropped, never sent; the peer gets
        an AMQP close that says why instead of a reset socket."""
        self._wbuf.clear()
        self._wbuf_size = 0
        if self._phase == "closed" or self.transport is None:
            return
        _LOG.info("closing connection %s: %s", self.peer, description)
        if self._phase == "amqp":
            body = F.described_list(F.CLOSE, [F.error_value("amqp:internal-error", description)])
            self.transport.write(_frame_head.pack(8 + len(body), 2, F.FRAME_AMQP, 0) + body)
        self._phase = "closed"
        self._close_transport()

    def _close_transport(self) -> None:
        """Close after the buffered output is written; drop it if the peer never reads it."""
        transport = self.transport
        if transport is None:
            return
        transport.close()
        asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, transport.abort)

    # ------------------------------------------------------------------ input

    def data_received(self, data: bytes) -> None:
        if self._phase == "closed":
            return
        self._buf += data
        self._handle_input()

    def _handle_input(self) -> None:
        if self._phase == "closed":
            return
        self._handling = True
        try:
            self._process()
        except ProtocolError as exc:
            self.close_with_error(exc.condition, exc.description)
        except DecodeError as exc:
            self.close_with_error("amqp:decode-error", str(exc))
        except F.InvalidField as exc:
            self.close_with_error("amqp:invalid-field", str(exc))
        except Exception as exc:  # a bug must cost one connection, never the broker
            _LOG.exception("internal error on connection %s", self.peer)
            self.close_with_error("amqp:internal-error", f"emulator error: {exc!r}")
        finally:
            self._handling = False
            self._flush()

    def _process(self) -> None:
        buf = self._buf
        pos = 0
        try:
            while self._phase != "closed":
                if self._write_paused:
                    # Leave the rest unread until the peer takes our output (resume_writing);
                    # the kernel's socket buffers then push back on the peer.
                    if not self._reading_paused and self.transport is not None:
                        self._reading_paused = True
                        self.transport.pause_reading()
                    break
                available = len(buf) - pos
                if self._phase == "header":
                    if available < 8:
                        break
                    self._on_protocol_header(bytes(buf[pos : pos + 8]))
                    pos += 8
                    continue
                if available < 8:
                    break
                size = _u32(buf, pos)[0]
                if size < 8 or size > MAX_FRAME_SIZE:
                    raise ProtocolError("amqp:connection:framing-error", f"bad frame size {size}")
                if available < size:
                    break
                doff = buf[pos + 4]
                frame_type = buf[pos + 5]
                channel = (buf[pos + 6] << 8) | buf[pos + 7]
                if doff < 2 or doff * 4 > size:
                    raise ProtocolError("amqp:connection:framing-error", "bad data offset")
                body = bytes(buf[pos + doff * 4 : pos + size])
                pos += size
                if not body:
                    continue  # heartbeat
                self._on_frame(frame_type, channel, body)
        finally:
            del buf[:pos]

    def _on_protocol_header(self, header: bytes) -> None:
        if header == F.SASL_HEADER and not self._sasl_done:
            self.write(F.SASL_HEADER)
            self.send(
                0,
                F.SASL_MECHANISMS,
                [Array("symbol", ["ANONYMOUS", "PLAIN", "MSSBCBS"])],
                F.FRAME_SASL,
            )
            self._phase = "sasl"
        elif header == F.AMQP_HEADER:
            self.write(F.AMQP_HEADER)
            self._phase = "open"
        else:
            # The spec's answer to an unsupported header: ours, then close.
            self.write(F.AMQP_HEADER)
            self._phase = "closed"
            self._flush()
            self._close_transport()

    def _on_frame(self, frame_type: int, channel: int, body: bytes) -> None:
        code, fields, end = F.decode_performative(body)
        if end != len(body) and code != F.TRANSFER:
            raise DecodeError("bytes after a performative that carries no payload")
        if self._phase == "refused":  # over the connection cap: wait for the peer's close
            if code == F.CLOSE:
                self._phase = "closed"
                self._close_transport()
            return
        if self._phase == "sasl":
            if frame_type != F.FRAME_SASL:
                raise ProtocolError("amqp:connection:framing-error", "expected a SASL frame")
            if code == F.SASL_INIT:
                # Any mechanism and credentials are accepted, like the official emulator.
                self.send(0, F.SASL_OUTCOME, [UInt(0)], F.FRAME_SASL)
                self._sasl_done = True
                self._phase = "header"
                return
            raise ProtocolError("amqp:not-allowed", f"unexpected SASL frame 0x{code:02x}")
        if frame_type != F.FRAME_AMQP:
            raise ProtocolError("amqp:connection:framing-error", "unexpected frame type")
        if self._phase == "open":
            if code != F.OPEN:
                raise ProtocolError("amqp:not-allowed", "the first frame must be open")
            self._on_open(fields)
            return
        handler = _HANDLERS.get(code)
        if handler is None:
            raise ProtocolError("amqp:not-implemented", f"unknown performative 0x{code:02x}")
        if code == F.BEGIN or code == F.CLOSE:
            handler(self, channel, fields, body, end)
            return
        session = self.sessions.get(channel)
        if session is None:
            raise ProtocolError(
                "amqp:session:unattached-handle" if code != F.END else "amqp:not-allowed",
                f"channel {channel} has no session",
            )
        handler(self, session, fields, body, end)

    # ------------------------------------------------------------------ connection level

    def _on_open(self, fields: list[Any]) -> None:
        self.remote_max_frame_size = max(min(F.uint(fields, 2, 2**32 - 1), 2**32 - 1), 512)
        idle_ms = F.uint(fields, 4, 0)
        hostname = F.field(fields, 1)
        self.send(
            0, F.OPEN, ["servicebus-emulator", hostname, UInt(MAX_FRAME_SIZE), UShort(CHANNEL_MAX)]
        )
        self._phase = "amqp"
        journal = self.broker.journal
        if journal is not None and journal.failed:
            self._refuse("amqp:internal-error", str(journal.refusal(0)))
            return
        if sum(1 for c in self._connections if c.opened) >= self._max_connections:
            self._refuse(
                "amqp:resource-limit-exceeded",
                f"The emulator allows {self._max_connections} concurrent connections and all "
                "are in use (close some, or start it with a higher --max-connections).",
            )
            return
        self.opened = True
        if isinstance(idle_ms, int) and idle_ms > 0:
            # The peer closes after idle_ms of silence. Ticking at a quarter of it and writing
            # when a whole tick passed in silence keeps every silence under half of it.
            self._heartbeat_interval = max(idle_ms / 4000.0, 0.025)
            self._schedule_heartbeat()

    def _refuse(self, condition: str, description: str) -> None:
        # AMQP refuses a connection by answering its open and closing at once. The socket
        # stays up until the peer's close (or a grace period): a client that pipelined
        # more frames behind its open reads the reason instead of a broken pipe.
        _LOG.info("refusing connection %s: %s", self.peer, description)
        self.send(0, F.CLOSE, [F.error_value(condition, description)])
        self._phase = "refused"
        asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, self._close_transport)

    def _schedule_heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        self._idle_handle = loop.call_later(self._heartbeat_interval, self._heartbeat)

    def _heartbeat(self) -> None:
        if self._phase == "closed":
            return
        if not self._wrote_since_beat and not self._write_paused:
            self.write(F.EMPTY_FRAME)
            # Now, not on the next turn: a flush after the reset below would count this beat
            # as traffic and skip the next one, doubling the silence the peer sees.
            self._flush()
        self._wrote_since_beat = False
        self._schedule_heartbeat()

    def _on_close(self, channel: int, fields: list[Any], body: bytes, end: int) -> None:
        self.send(0, F.CLOSE, [])
        self._phase = "closed"
        self._flush()
        self._close_transport()

    def _on_begin(self, channel: int, fields: list[Any], body: bytes, end: int) -> None:
        if channel in self.sessions:
            raise ProtocolError("amqp:not-allowed", f"channel {channel} already has a session")
        if channel > CHANNEL_MAX:
            raise ProtocolError("amqp:not-allowed", "channel-max exceeded")
        session = Session(self, channel, channel, F.uint(fields, 1), F.uint(fields, 2))
        self.sessions[channel] = session
        self.send(
            channel,
            F.BEGIN,
            [
                UShort(channel),
                UInt(session.next_outgoing_id),
                UInt(WINDOW),
                UInt(WINDOW),
                UInt(HANDLE_MAX),
            ],
        )

    def _on_end(self, session: Session, fields: list[Any], body: bytes, end: int) -> None:
        self._drop_session(session)
        del self.sessions[session.channel]
        self.send(session.channel, F.END, [])

    def _drop_session(self, session: Session) -> None:
        session.alive = False
        for link in session.outbound.values():
            self._forget_outbound(link)
        for inbound in session.inbound.values():
            self._drop_partial(inbound)
        self._link_count -= session.link_slots()
        session.inbound.clear()
        session.outbound.clear()

    def _forget_outbound(self, link: OutboundLink) -> None:
        self.reply_backlog -= link.drop_pending()
        if link.queue is not None:
            link.queue.remove_consumer(link)
        if self._reply_links.get(link.path.lower()) is link:
            del self._reply_links[link.path.lower()]

    # ------------------------------------------------------------------ links

    def _on_attach(self, session: Session, fields: list[Any], body: bytes, end: int) -> None:
        before = session.link_slots()
        try:
            self._attach(session, fields)
        finally:
            self._link_count += session.link_slots() - before

    def _attach(self, session: Session, fields: list[Any]) -> None:
        name = F.field(fields, 0, "")
        handle = F.uint(fields, 1)
        if handle > HANDLE_MAX:
            # The spec's answer to a handle beyond the handle-max we announced.
            raise ProtocolError("amqp:connection:framing-error", f"handle {handle} > handle-max")
        if self._link_count >= MAX_LINKS_PER_CONNECTION:
            raise ProtocolError(
                "amqp:resource-limit-exceeded",
                f"more than {MAX_LINKS_PER_CONNECTION} links on one connection",
            )
        client_is_receiver = bool(F.field(fields, 2, False))
        source = F.field(fields, 5)
        target = F.field(fields, 6)
        session.detaching.discard(handle)  # a peer may reuse a handle we refused
        if handle in session.inbound or handle in session.outbound:
            raise ProtocolError("amqp:session:handle-in-use", f"handle {handle} is in use")
        address = address_of(source if client_is_receiver else target) or ""
        link: InboundLink | OutboundLink
        if client_is_receiver:
            link = OutboundLink(session, str(name), handle, address)
        else:
            link = InboundLink(session, str(name), handle, address)
        link.snd_settle_mode = F.uint(fields, 3, 2) & 0xFF
        link.rcv_settle_mode = F.uint(fields, 4, 0) & 0xFF
        error = self._bind(link)
        properties: dict[Any, Any] | None = None
        if error is None and isinstance(link, OutboundLink):
            try:
                error, source, properties = self._accept_session(link, source)
            except NoSessionAvailableError:
                self._await_session(link, fields, source, target)
                return
        if error is not None:
            # A refused link: the spec's way is an attach without the terminus, then a detach
            # carrying the error.
            source, target = (None, target) if client_is_receiver else (source, None)
        reply: list[Any] = [
            name,
            UInt(handle),
            not client_is_receiver,
            UByte(link.snd_settle_mode),
            UByte(link.rcv_settle_mode),
            source,
            target,
        ]
        if client_is_receiver:
            reply += [None, None, UInt(0), ULong(MAX_MESSAGE_SIZE)]
            if properties is not None:
                reply += [None, None, properties]
        else:
            reply += [None, None, None, ULong(MAX_MESSAGE_SIZE)]
        self.send(session.channel, F.ATTACH, reply)
        if error is not None:
            self.send(session.channel, F.DETACH, [UInt(handle), True, F.error_value(*error)])
            session.detaching.add(handle)
            return
        if isinstance(link, OutboundLink):
            session.outbound[handle] = link
            if link.kind == "reply":
                self._reply_links[link.path.lower()] = link
        else:
            session.inbound[handle] = link
            link.credit = INBOUND_CREDIT
            session.flow(link)

    def _accept_session(
        self, link: OutboundLink, source: Any
    ) -> tuple[tuple[str, str] | None, Any, dict[Any, Any] | None]:
        """A receiver on a queue or subscription: a session receiver (a session filter on its
        source) locks a session; the attach echoes the session id and its locked-until."""
        queue = link.queue
        session_filter = _session_filter(source)
        if queue is None or link.kind != "entity" or queue.parent is not None:
            if session_filter is not None:
                return (
                    (
                        "amqp:not-allowed",
                        "It is not possible for an entity that does not require sessions to "
                        "create a sessionful message receiver.",
                    ),
                    source,
                    None,
                )
            return None, source, None
        if queue.sessions is None and session_filter is None:
            return None, source, None
        if session_filter is None:
            return (
                (
                    "amqp:not-allowed",
                    "It is not possible for an entity that requires sessions to create a "
                    "non-sessionful message receiver.",
                ),
                source,
                None,
            )
        if queue.sessions is None:
            return (
                (
                    "amqp:not-allowed",
                    "It is not possible for an entity that does not require sessions to create "
                    "a sessionful message receiver.",
                ),
                source,
                None,
            )
        wanted = session_filter[0]
        try:
            message_session = queue.accept_session(link, wanted)
        except SessionCannotBeLockedError as exc:
            return ("com.microsoft:session-cannot-be-locked", str(exc)), source, None
        source, properties = _session_terminus(source, message_session)
        return None, source, properties

    def _await_session(
        self, link: OutboundLink, fields: list[Any], source: Any, target: Any
    ) -> None:
        """A next-available session receiver when no session has messages: its attach is
        answered when a session gets one, or refused with com.microsoft:timeout after the
        link's `com.microsoft:timeout` property (milliseconds; Service Bus' 60 s without)."""
        queue = link.queue
        assert queue is not None
        session = link.session
        link_properties = F.field(fields, 13)
        timeout_ms = 60_000
        if isinstance(link_properties, dict):
            for key, value in link_properties.items():
                if text(key) == "com.microsoft:timeout" and isinstance(value, int) and value > 0:
                    timeout_ms = value
        session.outbound[link.handle] = link  # holds the handle; no attach sent yet

        def done(message_session: MessageSession | None) -> None:
            if not session.alive or session.outbound.get(link.handle) is not link:
                return
            if message_session is None:
                del session.outbound[link.handle]
                session.detaching.add(link.handle)
                self.send(session.channel, F.ATTACH, self._attach_reply(fields, link, None, target))
                self.send(
                    session.channel,
                    F.DETACH,
                    [
                        UInt(link.handle),
                        True,
                        F.error_value(
                            "com.microsoft:timeout",
                            "No session with messages became available in time.",
                        ),
                    ],
                )
            else:
                reply_source, properties = _session_terminus(source, message_session)
                self.send(
                    session.channel,
                    F.ATTACH,
                    self._attach_reply(fields, link, reply_source, target, properties),
                )

        queue.wait_for_session(link, queue.timers.now_ms() + timeout_ms, done)

    @staticmethod
    def _attach_reply(
        fields: list[Any],
        link: OutboundLink,
        source: Any,
        target: Any,
        properties: dict[Any, Any] | None = None,
    ) -> list[Any]:
        reply: list[Any] = [
            F.field(fields, 0, ""),
            UInt(link.handle),
            False,
            UByte(link.snd_settle_mode),
            UByte(link.rcv_settle_mode),
            source,
            target,
            None,
            None,
            UInt(0),
            ULong(MAX_MESSAGE_SIZE),
        ]
        if properties is not None:
            reply += [None, None, properties]
        return reply

    def _bind(self, link: InboundLink | OutboundLink) -> tuple[str, str] | None:
        """Resolve the link's node; an (condition, description) error when it cannot exist."""
        path = link.path
        lowered = path.lower()
        if lowered == "$cbs":
            link.kind = "cbs" if isinstance(link, InboundLink) else "reply"
            return None
        if lowered.endswith(MANAGEMENT_SUFFIX):
            entity = path[: -len(MANAGEMENT_SUFFIX)]
            link.queue = self.broker.resolve(entity)
            link.topic = self.broker.resolve_topic(entity)
            link.kind = "mgmt" if isinstance(link, InboundLink) else "reply"
            if link.queue is None and link.topic is None:
                return ("amqp:not-found", f"The messaging entity '{path}' could not be found.")
            return None
        topic = self.broker.resolve_topic(path)
        if topic is not None:
            if isinstance(link, OutboundLink):
                return (
                    "amqp:not-allowed",
                    f"Cannot receive from topic '{path}': receive from one of its subscriptions "
                    f"('{path}/Subscriptions/<name>').",
                )
            link.topic = topic
            return None
        if "$" in lowered.replace("/$deadletterqueue", ""):
            return (
                "amqp:not-implemented",
                f"The node '{path}' is not supported by this "
                "emulator (transfer dead-letter queues are not).",
            )
        link.queue = self.broker.resolve(path)
        if link.queue is None:
            return ("amqp:not-found", f"The messaging entity '{path}' could not be found.")
        if isinstance(link, OutboundLink) and link.queue.forward_to is not None:
            return (
                "amqp:not-allowed",
                f"Cannot create a message receiver on '{path}': auto-forwarding moves its "
                "messages to another entity.",
            )
        if isinstance(link, InboundLink) and link.queue.parent is not None:
            return ("amqp:not-allowed", "Cannot send to a dead-letter queue.")
        if isinstance(link, InboundLink) and self.broker.is_subscription(link.queue):
            return ("amqp:not-allowed", "Cannot send to a subscription: send to its topic.")
        return None

    def _on_detach(self, session: Session, fields: list[Any], body: bytes, end: int) -> None:
        before = session.link_slots()
        try:
            self._detach(session, fields)
        finally:
            self._link_count += session.link_slots() - before

    def _detach(self, session: Session, fields: list[Any]) -> None:
        handle = F.uint(fields, 0)
        closed = F.field(fields, 1, False)
        inbound = session.inbound.pop(handle, None)
        outbound = session.outbound.pop(handle, None)
        if outbound is not None:
            self._forget_outbound(outbound)
        if inbound is not None:
            self._drop_partial(inbound)
        if inbound is None and outbound is None:
            session.detaching.discard(handle)  # the peer answers the detach we sent
            return
        self.send(session.channel, F.DETACH, [UInt(handle), closed])

    def _on_flow(self, session: Session, fields: list[Any], body: bytes, end: int) -> None:
        next_incoming = F.uint(fields, 0, 1)
        window = F.uint(fields, 1)
        session.remote_incoming_window = next_incoming + window - session.next_outgoing_id
        handle = F.field(fields, 4)
        if handle is not None:
            handle = F.uint(fields, 4)
        if handle is None:
            for link in list(session.outbound.values()):
                self._kick(link)
            return
        outbound = session.outbound.get(handle)
        if outbound is None:
            if handle in session.inbound:
                if F.field(fields, 9, False):
                    session.flow(session.inbound[handle])
                return
            if handle in session.detaching:
                return
            raise ProtocolError("amqp:session:unattached-handle", f"unknown handle {handle}")
        delivery_count = F.uint(fields, 5, outbound.delivery_count)
        credit = F.uint(fields, 6, 0)
        outbound.credit = (delivery_count + credit - outbound.delivery_count) & 0xFFFFFFFF
        if outbound.credit > 0x7FFFFFFF:  # peer's delivery count ahead of ours: treat as none
            outbound.credit = 0
        outbound.drain = bool(F.field(fields, 8, False))
        self._kick(outbound)
        if outbound.drain and outbound.credit > 0:
            # Nothing more to send: drain consumes the remaining credit.
            outbound.delivery_count = (outbound.delivery_count + outbound.credit) & 0xFFFFFFFF
            outbound.credit = 0
            session.flow(outbound)
        elif F.field(fields, 9, False) or outbound.drain:
            session.flow(outbound, echo=False)

    def _kick(self, link: OutboundLink) -> None:
        if link.kind == "reply":
            link.flush_replies()
        elif link.queue is not None and link.can_take():
            link.queue.add_consumer(link)

    # ------------------------------------------------------------------ transfers

    def _on_transfer(self, session: Session, fields: list[Any], body: bytes, end: int) -> None:
        session.next_incoming_id = (session.next_incoming_id + 1) & 0xFFFFFFFF
        handle = F.uint(fields, 0)
        link = session.inbound.get(handle)
        if link is None:
            if handle in session.detaching:
                return  # never accepted: the peer learns from our detach
            raise ProtocolError(
                "amqp:session:unattached-handle", f"transfer on unattached handle {handle}"
            )
        more = bool(F.field(fields, 5, False))
        aborted = bool(F.field(fields, 9, False))
        if link.partial is None:
            delivery_id = F.uint(fields, 1)
            link.partial_id = delivery_id
            link.partial_settled = bool(F.field(fields, 4, False))
            link.partial_format = F.uint(fields, 3, 0)
            link.oversize = False
            if not more and not aborted:
                self._complete_transfer(link, body[end:])
                return
            link.partial = bytearray()
        if aborted:
            self._drop_partial(link)
            return
        if not link.oversize:
            link.partial += memoryview(body)[end:]
            self._partial_bytes += len(body) - end
            if len(link.partial) > MAX_MESSAGE_SIZE:
                self._partial_bytes -= len(link.partial)
                link.oversize = True  # keep reading the frames, refuse at the end
                link.partial = bytearray()
            elif self._partial_bytes > MAX_PARTIAL_BYTES:
                raise ProtocolError(
                    "amqp:resource-limit-exceeded",
                    f"more than {MAX_PARTIAL_BYTES} bytes of incomplete messages",
                )
        if not more:
            payload = bytes(link.partial)
            self._drop_partial(link)
            self._complete_transfer(link, payload)

    def _drop_partial(self, link: InboundLink) -> None:
        if link.partial is not None:
            self._partial_bytes -= len(link.partial)
            link.partial = None

    def _complete_transfer(self, link: InboundLink, payload: bytes) -> None:
        link.delivery_count = (link.delivery_count + 1) & 0xFFFFFFFF
        link.credit -= 1
        session = link.session
        if link.credit < INBOUND_CREDIT // 2:
            link.credit = INBOUND_CREDIT
            session.flow(link)
        if link.oversize or len(payload) > MAX_MESSAGE_SIZE:
            state = F.outcome(
                F.REJECTED,
                [
                    F.error_value(
                        "amqp:link:message-size-exceeded",
                        f"The received message exceeds the limit of {MAX_MESSAGE_SIZE} bytes.",
                    )
                ],
            )
        elif link.kind == "entity":
            state = self._enqueue(link, payload)
        else:
            state = self._request(link, payload)
        if not link.partial_settled:
            self.write(
                F.settled_disposition(session.channel, True, link.partial_id, _encoded_state(state))
            )

    def _enqueue(self, link: InboundLink, payload: bytes) -> Described:
        queue: Queue | Topic | None = link.topic or link.queue
        assert queue is not None
        try:
            if link.partial_format == BATCH_FORMAT:
                parsed_all = [parse_message(inner) for inner in _batch_parts(payload)]
            else:
                parsed_all = [parse_message(payload)]
            for parsed in parsed_all:
                assign_message_id(parsed)
        except DecodeError as exc:
            return F.outcome(
                F.REJECTED, [F.error_value("amqp:decode-error", f"malformed message: {exc}")]
            )
        try:
            for parsed in parsed_all:
                queue.check_session(parsed)
        except SessionIdMissingError as exc:
            return F.outcome(F.REJECTED, [F.error_value("amqp:not-allowed", str(exc))])
        journal = self.broker.journal
        if journal is None:
            for parsed in parsed_all:
                queue.send(parsed)  # duplicates are acknowledged and dropped, as in Service Bus
            return _ACCEPTED
        refusal = journal.refusal(len(payload))
        if refusal is not None:  # before anything changes: refused, the batch left no trace
            return F.outcome(F.REJECTED, [F.error_value(QUOTA_EXCEEDED, refusal)])
        with journal.transaction():  # a batch is one record: a crash keeps all of it or none
            for parsed in parsed_all:
                queue.send(parsed)
        return _ACCEPTED

    def _request(self, link: InboundLink, payload: bytes) -> Described:
        if self.reply_backlog >= MAX_REPLY_BACKLOG:
            # The peer asks without giving its reply link credit to take the answers.
            return F.outcome(
                F.REJECTED,
                [
                    F.error_value(
                        "amqp:resource-limit-exceeded",
                        "too many replies are waiting for link credit",
                    )
                ],
            )
        try:
            request = Request(payload)
        except DecodeError as exc:
            return F.outcome(F.REJECTED, [F.error_value("amqp:decode-error", str(exc))])
        if link.kind == "cbs":
            app = cbs_reply()
            body: Any = None
        else:
            reply = self._execute(link, request, len(payload))
            app = reply_application_properties(reply)
            body = reply.body
        reply_link = self._reply_links.get(
            ((request.reply_to and node_path(request.reply_to)) or link.path).lower()
        )
        if reply_link is None:
            reply_link = self._reply_links.get(link.path.lower())
        if reply_link is None:
            return F.outcome(
                F.REJECTED, [F.error_value("amqp:precondition-failed", "no reply link is attached")]
            )
        reply_link.send_reply(encode_reply(request.message_id, app, body))
        return _ACCEPTED

    def _execute(self, link: InboundLink, request: Request, payload_bytes: int) -> Reply:
        """A `$management` request; what it stores is refused on a full disk, and what one
        request changes is one journal record."""
        journal = self.broker.journal
        if journal is None:
            return _execute_on(link, request)
        if text(request.app.get("operation", "")) in _STORING_OPERATIONS:
            refusal = journal.refusal(payload_bytes)
            if refusal is not None:
                return Reply(403, None, QUOTA_EXCEEDED, refusal)
        with journal.transaction():
            return _execute_on(link, request)

    # ------------------------------------------------------------------ settlement

    def _on_disposition(self, session: Session, fields: list[Any], body: bytes, end: int) -> None:
        if not F.field(fields, 0, False):
            return  # from a sender: our dispositions for its transfers are already settled
        first = F.uint(fields, 1)
        last = F.uint(fields, 2, first)
        settled = bool(F.field(fields, 3, False))
        state = F.field(fields, 4)
        code = F.described_code(state)
        if code in (-1, F.RECEIVED):
            return  # not a terminal outcome
        unsettled = session.unsettled
        if last - first < len(unsettled):
            ids = [i for i in range(first, last + 1) if i in unsettled]
        else:
            ids = [i for i in unsettled if first <= i <= last]
        missing = (
            []
            if settled
            else [i for i in range(first, min(last, first + 64) + 1) if i not in unsettled]
        )
        for delivery_id in ids:
            queue, token = unsettled.pop(delivery_id)
            reply = self._settle(queue, token, code, state)
            if not settled:
                self.write(
                    F.settled_disposition(
                        session.channel, False, delivery_id, _encoded_state(reply)
                    )
                )
        for delivery_id in missing:
            self.send(
                session.channel,
                F.DISPOSITION,
                [False, UInt(delivery_id), None, True, _lock_lost("The lock supplied is invalid.")],
            )

    def _settle(self, queue: Queue, token: uuid.UUID, code: int, state: Any) -> Described:
        values = state.value if isinstance(state.value, list) else []
        try:
            if code == F.ACCEPTED:
                queue.complete(token)
                return _ACCEPTED
            if code == F.RELEASED:
                queue.release(token)
                return _RELEASED
            if code == F.MODIFIED:
                failed = bool(F.field(values, 0, False))
                undeliverable = bool(F.field(values, 1, False))
                props = normalise(F.field(values, 2)) or None
                # Service Bus reads `modified` as abandon (delivery count + 1) whatever its
                # delivery-failed flag: the JavaScript SDK abandons without setting it, the
                # Python SDK sets it, and both reach MaxDeliveryCount. `released` is the
                # outcome that leaves the count alone.
                if undeliverable:
                    queue.defer(token, props)
                else:
                    queue.abandon(token, props)
                return F.outcome(F.MODIFIED, [failed, undeliverable])
            if code == F.REJECTED:
                error = F.field(values, 0)
                error_fields = error.value if isinstance(error, Described) else []
                info = normalise(F.field(error_fields, 2))
                reason = info.pop("DeadLetterReason", None)
                description = info.pop("DeadLetterErrorDescription", None)
                queue.dead_letter_locked(
                    token,
                    None if reason is None else str(reason),
                    None if description is None else str(description),
                    info or None,
                )
                return F.outcome(F.REJECTED, [])
        except LockLostError as exc:
            return _lock_lost(str(exc))
        return _lock_lost("unsupported outcome")


def _execute_on(link: InboundLink, request: Request) -> Reply:
    if link.topic is not None:
        return execute_on_topic(link.topic, request)
    return execute(link.queue, request)


SESSION_FILTER = "com.microsoft:session-filter"
_DOTNET_EPOCH_TICKS = 621355968000000000  # 1970-01-01 in .NET ticks (100 ns since year 1)


def _session_terminus(
    source: Described, message_session: MessageSession
) -> tuple[Described, dict[Any, Any]]:
    """The source echoed to a session receiver (the session id in its session filter) and the
    attach properties carrying the session's locked-until in .NET ticks."""
    fields = list(source.value)
    while len(fields) < 8:
        fields.append(None)
    fields[7] = {Symbol(SESSION_FILTER): message_session.id}
    properties = {
        Symbol("com.microsoft:locked-until-utc"): _DOTNET_EPOCH_TICKS
        + message_session.locked_until_ms * 10_000
    }
    return Described(source.descriptor, fields), properties


def _session_filter(source: Any) -> tuple[str | None] | None:
    """The session a receiver asks for: None without a session filter, (None,) for the next
    available session, (id,) for a named one."""
    if not isinstance(source, Described) or not isinstance(source.value, list):
        return None
    filters = F.field(source.value, 7)
    if not isinstance(filters, dict):
        return None
    for key, value in filters.items():
        if text(key) == SESSION_FILTER:
            if isinstance(value, Described):
                value = value.value
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            return (value if isinstance(value, str) and value else None,)
    return None


def _lock_lost(description: str) -> Described:
    return F.outcome(F.REJECTED, [F.error_value("com.microsoft:message-lock-lost", description)])


def _batch_parts(payload: bytes) -> list[bytes]:
    """The inner messages of a batch: one encoded message per data section."""
    parsed: ParsedMessage = parse_message(payload)
    out: list[bytes] = []
    pos = 0
    raw = parsed.body_raw
    while pos < len(raw):
        section, pos = decode_value(raw, pos)
        if isinstance(section, Described) and section.descriptor == DATA:
            if not isinstance(section.value, bytes):
                raise DecodeError("batch data section is not binary")
            out.append(section.value)
    return out


_HANDLERS: dict[int, Any] = {
    F.BEGIN: AmqpConnection._on_begin,
    F.CLOSE: AmqpConnection._on_close,
    F.END: AmqpConnection._on_end,
    F.ATTACH: AmqpConnection._on_attach,
    F.DETACH: AmqpConnection._on_detach,
    F.FLOW: AmqpConnection._on_flow,
    F.TRANSFER: AmqpConnection._on_transfer,
    F.DISPOSITION: AmqpConnection._on_disposition,
}

__all__ = ["AmqpConnection"]
