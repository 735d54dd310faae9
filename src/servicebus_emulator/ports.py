"""What queues and topics need from the journal, as a protocol: they call these hooks and
never import `journal`, which reads and rebuilds them (so the modules form no circle)."""

from __future__ import annotations

from typing import Protocol

from .message import StoredMessage

# Service Bus bounds a session's state by the message size limit (256 KB, Standard tier and
# the official emulator). The management link's transfer limit enforces it on the wire; the
# queue and the journal's replay check it again so no other path can hold more.
MAX_SESSION_STATE_BYTES = 262144


class Entity(Protocol):
    """A queue, dead-letter queue, subscription or topic as a journal record names it."""

    @property
    def name(self) -> str: ...


class EntityJournal(Protocol):
    """The journal's hooks: every change a client is told of is recorded through one."""

    def record_added(self, queue: Entity, msg: StoredMessage, dedup: bool) -> None: ...

    def record_removed(self, queue: Entity, msg: StoredMessage) -> None: ...

    def record_dead_lettered(self, queue: Entity, msg: StoredMessage) -> None: ...

    def record_locked(self, queue: Entity, msg: StoredMessage) -> None: ...

    def record_updated(self, queue: Entity, msg: StoredMessage) -> None: ...

    def record_topic_send(
        self, topic: Entity, seq: int, message_id: str | None, at: int
    ) -> None: ...

    def record_session_state(self, queue: Entity, session_id: str, state: bytes | None) -> None: ...
