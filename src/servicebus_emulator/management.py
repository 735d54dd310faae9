"""`$management` request/response operations, answered the way Service Bus answers them."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from .codec import Array, DecodeError, Described, Int, Symbol, Timestamp, decode_value, encode_value
from .message import (
    AVAILABLE,
    DEFERRED,
    LOCKED,
    VALUE,
    ParsedMessage,
    StoredMessage,
    assign_message_id,
    parse_message,
)
from .queue import (
    LockLostError,
    MessageNotFoundError,
    Queue,
    SessionIdMissingError,
    SessionLockLostError,
)
from .topic import Topic

_LOG = logging.getLogger("servicebus_emulator")

LOCK_LOST = "com.microsoft:message-lock-lost"
NOT_FOUND = "com.microsoft:message-not-found"
ARGUMENT_ERROR = "com.microsoft:argument-error"
SESSION_LOCK_LOST = "com.microsoft:session-lock-lost"
OUT_OF_RANGE = "com.microsoft:argument-out-of-range"
SESSION_NOT_FOUND = "com.microsoft:session-not-found"
NOT_ALLOWED = "amqp:not-allowed"
NOT_IMPLEMENTED = "amqp:not-implemented"
ENTITY_NOT_FOUND = "amqp:not-found"
# A peek reply carries whole messages in one AMQP message: past this size it stops adding
# them (it always carries one), so one request cannot make a reply of queue size.
MAX_PEEK_REPLY_BYTES = 1024 * 1024
# receive-by-sequence-number answers with every message named in one AMQP message, so the
# messages one request names may hold this much at most (one message is always allowed).
MAX_DEFERRED_REPLY_BYTES = MAX_PEEK_REPLY_BYTES
# batch-delete-messages: the SDKs refuse a message-count above 4000 (the Premium quota);
# Standard, which this emulator models, deletes at most 500 per request.
MAX_DELETE_MESSAGE_COUNT = 4000
DELETE_QUOTA_PER_REQUEST = 500
# get-message-sessions: `last-updated-time` at .NET's DateTime.MaxValue (what the SDKs send
# without a filter) lists the sessions with messages or state; an earlier time lists the
# sessions whose state a client set after it.
_NO_LAST_UPDATED_FILTER_MS = 253402300800000
MAX_SESSIONS_PAGE = 1000


class Reply:
    """A management response: status, optional error condition and an amqp-value body."""

    __slots__ = ("body", "condition", "description", "status")

    def __init__(
        self,
        status: int,
        body: Any = None,
        condition: str | None = None,
        description: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.condition = condition
        self.description = description


def text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def normalise(mapping: Any) -> dict[str, Any]:
    """Map keys as text: the SDK sends some keys as strings, some as symbols or binary."""
    if not isinstance(mapping, dict):
        return {}
    return {text(k): v for k, v in mapping.items()}


class Request:
    """The parts of a decoded request message that operations read."""

    __slots__ = ("app", "body", "message_id", "reply_to")

    def __init__(self, payload: bytes) -> None:
        parsed = parse_message(payload)
        props = parsed.properties
        self.message_id = props[0] if props else None
        self.reply_to = text(props[4]) if len(props) > 4 and props[4] is not None else None
        self.app = _decode_text_keyed_map(parsed.app_raw, parsed.app_count)
        self.body = _decode_body(parsed.body_raw)


def _decode_text_keyed_map(raw: bytes, count: int) -> dict[str, Any]:
    # Keys become text before they are hashed: a peer picks uuid or integer keys whose hashes
    # collide, never string hashes (randomised per process).
    out: dict[str, Any] = {}
    pos = 0
    for _ in range(count // 2):
        key, pos = decode_value(raw, pos)
        value, pos = decode_value(raw, pos)
        out[text(key)] = value
    return out


def _decode_body(raw: bytes) -> Any:
    if not raw:
        return None
    section, _ = decode_value(raw, 0)
    if isinstance(section, Described) and section.descriptor in (VALUE, "amqp:amqp-value:*"):
        return section.value
    return None


def encode_reply(correlation_id: Any, app: dict[str, Any], body: Any) -> bytes:
    """A response message: properties.correlation-id, application-properties, amqp-value."""
    out = bytearray(b"\x00\x53\x73")
    encode_value(out, [None, None, None, None, None, correlation_id])
    out += b"\x00\x53\x74"
    encode_value(out, app)
    out += b"\x00\x53\x77"
    encode_value(out, body)
    return bytes(out)


def reply_application_properties(reply: Reply) -> dict[str, Any]:
    app: dict[str, Any] = {"statusCode": Int(reply.status)}
    if reply.description is not None:
        app["statusDescription"] = reply.description
    if reply.condition is not None:
        app["errorCondition"] = Symbol(reply.condition)
    return app


def _tokens(body: dict[str, Any]) -> list[uuid.UUID]:
    tokens = body.get("lock-tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, uuid.UUID) for t in tokens):
        raise ValueError("lock-tokens must be an array of uuid")
    return tokens


def _sequence_numbers(body: dict[str, Any]) -> list[int]:
    numbers = body.get("sequence-numbers")
    if not isinstance(numbers, list) or not all(isinstance(n, int) for n in numbers):
        raise ValueError("sequence-numbers must be an array of long")
    return numbers


def _renew_lock(queue: Queue, body: dict[str, Any]) -> Reply:
    expirations = [Timestamp(queue.renew(token)) for token in _tokens(body)]
    return Reply(200, {"expirations": Array("timestamp", expirations)})


def _peek(queue: Queue, body: dict[str, Any]) -> Reply:
    start = body.get("from-sequence-number", 1)
    count = body.get("message-count", 1)
    if not isinstance(start, int) or not isinstance(count, int) or count < 1:
        raise ValueError("from-sequence-number and message-count must be integers")
    session_id = body.get("session-id")  # a session receiver peeks its own session only
    found = queue.peek(start, count, session_id if isinstance(session_id, str) else None)
    if not found:
        return Reply(204, None, description="No messages to peek")
    messages: list[dict[str, Any]] = []
    size = 0
    for msg in found:
        encoded = msg.encode(lock=False)
        size += len(encoded)
        if messages and size > MAX_PEEK_REPLY_BYTES:
            break  # fewer than asked, as Service Bus may answer; the caller peeks on from there
        messages.append({"message": encoded})
    return Reply(200, {"messages": messages})


def _scheduled_messages(body: dict[str, Any]) -> list[ParsedMessage]:
    """The messages of a schedule-message request, each with a MessageId."""
    entries = body.get("messages")
    if not isinstance(entries, list):
        raise ValueError("messages must be a list")
    encoded: list[bytes] = []
    for entry in entries:
        raw = normalise(entry).get("message")
        if not isinstance(raw, bytes):
            raise ValueError("each scheduled message needs an encoded 'message'")
        encoded.append(raw)
    parsed = [parse_message(raw) for raw in encoded]
    for message in parsed:
        assign_message_id(message)
    return parsed


def _schedule(queue: Queue, body: dict[str, Any]) -> Reply:
    if queue.parent is not None:
        raise ValueError("cannot schedule messages on a dead-letter queue")
    numbers: list[int] = []
    for message in _scheduled_messages(body):
        stored = queue.send(message)
        # A duplicate is dropped as Service Bus does; it still gets no new sequence number.
        numbers.append(stored.seq if stored else 0)
    return Reply(200, {"sequence-numbers": Array("long", numbers)})


def _cancel_scheduled(queue: Queue, body: dict[str, Any]) -> Reply:
    for seq in _sequence_numbers(body):
        queue.cancel_scheduled(seq)
    return Reply(200, {})


_DISPOSITIONS = {"completed", "abandoned", "suspended", "defered", "deferred"}


def _update_disposition(queue: Queue, body: dict[str, Any]) -> Reply:
    status = text(body.get("disposition-status", ""))
    if status not in _DISPOSITIONS:
        raise ValueError(f"unknown disposition-status {status!r}")
    modify = normalise(body.get("properties-to-modify")) or None
    for token in _tokens(body):
        if status == "completed":
            queue.complete(token)
        elif status == "abandoned":
            queue.abandon(token, modify)
        elif status == "suspended":
            reason = body.get("deadletter-reason")
            description = body.get("deadletter-description")
            queue.dead_letter_locked(
                token,
                text(reason) if reason is not None else None,
                text(description) if description is not None else None,
                modify,
            )
        else:
            queue.defer(token, modify)
    return Reply(200, {})


def _receive_by_sequence_number(queue: Queue, body: dict[str, Any]) -> Reply:
    numbers = list(dict.fromkeys(_sequence_numbers(body)))  # a number named twice comes once
    peek_lock = body.get("receiver-settle-mode", 1) != 0
    found: list[StoredMessage] = []
    size = 0
    # Every number is checked before any message is locked or deleted, so a refused request
    # changes nothing.
    for seq in numbers:
        msg = queue.messages.get(seq)
        if msg is None or msg.state != DEFERRED:
            raise MessageNotFoundError(f"no deferred message with sequence number {seq}")
        found.append(msg)
        size += msg.size
    if len(found) > 1 and size > MAX_DEFERRED_REPLY_BYTES:
        return Reply(
            400,
            None,
            OUT_OF_RANGE,
            f"The {len(found)} deferred messages requested hold {size} bytes, more than one "
            f"reply may carry ({MAX_DEFERRED_REPLY_BYTES} bytes): request fewer sequence "
            "numbers at a time.",
        )
    out: list[dict[str, Any]] = []
    for msg in found:
        if peek_lock:
            queue.lock_deferred(msg.seq)
            out.append({"lock-token": msg.lock_token, "message": msg.encode(lock=True)})
        else:
            queue.delete_deferred(msg.seq)
            out.append({"message": msg.encode(lock=False)})
    return Reply(200, {"messages": out})


def _int_field(body: dict[str, Any], name: str, default: int | None = None) -> int:
    value = body.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer")
    return value


def _list_sessions(queue: Queue, body: dict[str, Any]) -> Reply:
    """get-message-sessions: one page (`skip`, `top`) of session ids in id order."""
    skip = _int_field(body, "skip", 0)
    top = _int_field(body, "top", 100)
    last_updated = _int_field(body, "last-updated-time", _NO_LAST_UPDATED_FILTER_MS)
    if skip < 0 or not 0 < top <= MAX_SESSIONS_PAGE:
        raise ValueError(f"skip must be >= 0 and top between 1 and {MAX_SESSIONS_PAGE}")
    ids: set[str] = set()
    if queue.sessions is not None:
        if last_updated >= _NO_LAST_UPDATED_FILTER_MS:
            now = queue.timers.now_ms()
            ids = {s.id for s in queue.sessions.values() if s.state is not None}
            ids.update(
                msg.session_id
                for msg in queue.messages.values()
                if msg.session_id is not None
                and (
                    msg.state == LOCKED
                    or (msg.state in (AVAILABLE, DEFERRED) and msg.expires_ms > now)
                )
            )
        else:
            ids = {s.id for s in queue.sessions.values() if s.state_updated_ms > last_updated}
    page = sorted(ids)[skip : skip + top]
    if not page:
        return Reply(204, None, SESSION_NOT_FOUND, "There are no sessions to list.")
    return Reply(200, {"skip": Int(skip + len(page)), "sessions-ids": Array("string", page)})


def _batch_delete(queue: Queue, body: dict[str, Any]) -> Reply:
    """batch-delete-messages: the oldest messages enqueued before `enqueued-time-utc` (now
    without it), locked and scheduled ones excepted, up to the request's message-count."""
    count = _int_field(body, "message-count")
    if not 0 < count <= MAX_DELETE_MESSAGE_COUNT:
        raise ValueError(f"message-count must be between 1 and {MAX_DELETE_MESSAGE_COUNT}")
    now = queue.timers.now_ms()
    before = body.get("enqueued-time-utc")
    before_ms = before if isinstance(before, int) and not isinstance(before, bool) else now
    session_id = body.get("session-id")
    if session_id is not None and not isinstance(session_id, str):
        raise ValueError("session-id must be a string")
    budget = min(count, DELETE_QUOTA_PER_REQUEST)
    doomed: list[StoredMessage] = []
    for seq in sorted(queue.messages):
        msg = queue.messages[seq]
        if (
            msg.state in (AVAILABLE, DEFERRED)
            and msg.enqueued_ms < before_ms
            and (session_id is None or msg.session_id == session_id)
        ):
            doomed.append(msg)
            if len(doomed) >= budget:
                break
    for msg in doomed:
        queue.delete(msg)
    if not doomed:
        return Reply(204, None, NOT_FOUND, "No messages to delete.")
    return Reply(200, {"message-count": Int(len(doomed))})


def _session_id(body: dict[str, Any]) -> str:
    session_id = body.get("session-id")
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("session-id must be a non-empty string")
    return session_id


def _session_operation(queue: Queue, operation: str, request: Request) -> Reply:
    """Session lock renewal and session state: only for the receiver holding the lock."""
    body = normalise(request.body)
    link = request.app.get("associated-link-name")
    session = queue.locked_session(_session_id(body), None if link is None else text(link))
    if operation == "com.microsoft:renew-session-lock":
        return Reply(200, {"expiration": Timestamp(queue.renew_session(session))})
    if operation == "com.microsoft:get-session-state":
        return Reply(200, {"session-state": session.state})
    state = body.get("session-state")
    if state is not None and not isinstance(state, bytes):
        raise ValueError("session-state must be binary or null")
    queue.set_session_state(session, state)
    session.state_updated_ms = queue.timers.now_ms()
    return Reply(200, {})


_SESSION_OPERATIONS = frozenset(
    {
        "com.microsoft:renew-session-lock",
        "com.microsoft:get-session-state",
        "com.microsoft:set-session-state",
    }
)

_OPERATIONS: dict[str, Callable[[Queue, dict[str, Any]], Reply]] = {
    "com.microsoft:renew-lock": _renew_lock,
    "com.microsoft:peek-message": _peek,
    "com.microsoft:schedule-message": _schedule,
    "com.microsoft:cancel-scheduled-message": _cancel_scheduled,
    "com.microsoft:update-disposition": _update_disposition,
    "com.microsoft:receive-by-sequence-number": _receive_by_sequence_number,
    "com.microsoft:get-message-sessions": _list_sessions,
    "com.microsoft:batch-delete-messages": _batch_delete,
}


def execute(queue: Queue | None, request: Request) -> Reply:
    """Run one operation; every failure becomes an error reply, never an exception."""
    operation = text(request.app.get("operation", ""))
    if queue is None:
        return Reply(404, None, ENTITY_NOT_FOUND, "The messaging entity could not be found.")
    handler = _OPERATIONS.get(operation)
    if operation in _SESSION_OPERATIONS and queue.sessions is not None:
        try:
            return _session_operation(queue, operation, request)
        except SessionLockLostError as exc:
            return Reply(410, None, SESSION_LOCK_LOST, str(exc))
        except (ValueError, TypeError, DecodeError) as exc:
            return Reply(400, None, ARGUMENT_ERROR, str(exc))
    if handler is None:
        return Reply(
            501,
            None,
            NOT_IMPLEMENTED,
            f"The operation {operation!r} is not supported by this emulator.",
        )
    body = normalise(request.body)
    try:
        return handler(queue, body)
    except LockLostError as exc:
        return Reply(410, None, LOCK_LOST, str(exc))
    except MessageNotFoundError as exc:
        return Reply(404, None, NOT_FOUND, str(exc))
    except SessionIdMissingError as exc:
        return Reply(400, None, NOT_ALLOWED, str(exc))
    except (ValueError, TypeError, DecodeError) as exc:
        return Reply(400, None, ARGUMENT_ERROR, str(exc))


def execute_on_topic(topic: Topic, request: Request) -> Reply:
    """A topic's `$management` node: its sender schedules and cancels scheduled messages;
    nothing else is implemented on a topic."""
    operation = text(request.app.get("operation", ""))
    body = normalise(request.body)
    try:
        if operation == "com.microsoft:schedule-message":
            numbers = [topic.send(message) or 0 for message in _scheduled_messages(body)]
            return Reply(200, {"sequence-numbers": Array("long", numbers)})
        if operation == "com.microsoft:cancel-scheduled-message":
            for seq in _sequence_numbers(body):
                topic.cancel_scheduled(seq)
            return Reply(200, {})
    except MessageNotFoundError as exc:
        return Reply(404, None, NOT_FOUND, str(exc))
    except SessionIdMissingError as exc:
        return Reply(400, None, NOT_ALLOWED, str(exc))
    except (ValueError, TypeError, DecodeError) as exc:
        return Reply(400, None, ARGUMENT_ERROR, str(exc))
    return Reply(
        501,
        None,
        NOT_IMPLEMENTED,
        f"The operation {operation!r} on a topic is not supported by this emulator.",
    )


def cbs_reply() -> dict[str, Any]:
    # The emulator accepts any token, as the official emulator does with its fixed SAS key.
    return {"status-code": Int(202), "status-description": "Accepted"}


__all__ = ["Reply", "Request", "cbs_reply", "encode_reply", "execute", "execute_on_topic"]
