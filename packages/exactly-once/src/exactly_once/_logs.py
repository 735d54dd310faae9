"""Log lines that a producer's bytes cannot forge, and the one line per message outcome."""

from __future__ import annotations

import json
import logging
import re
from typing import Protocol

_SPLITS_A_FIELD = re.compile(r'[ "=\\]')

OUTCOMES_LOGGER = "exactly_once.outcomes"
"""The logger of the outcome lines: set its level (or its handlers) to turn them down or route
them; `WARNING` keeps only the messages dead-lettered or abandoned."""
outcomes_logger = logging.getLogger(OUTCOMES_LOGGER)


class Decided(Protocol):
    """What an outcome line reads of a decision (the core's `Decision` has it; this module
    cannot import that one, which logs through this module)."""

    @property
    def outcome(self) -> str:
        """An `Outcome` value."""
        ...

    @property
    def settlement(self) -> str:
        """A `Settlement` value."""
        ...

    @property
    def dead_letter_reason(self) -> str | None:
        """The dead-letter reason, for a dead letter."""
        ...

    @property
    def dead_letter_description(self) -> str | None:
        """The dead-letter description, for a dead letter."""
        ...

    @property
    def error(self) -> str | None:
        """What made an abandon."""
        ...


def log_value(value: object) -> str:
    """A value for a `key=value` log line that cannot forge lines or fields.

    Message ids, correlation ids and the like are the producer's bytes: anything beyond plain
    printable text without spaces, quotes or `=` is written as a JSON string, so a newline
    arrives as `\\n` and a reader can always split the line back into its fields.
    """
    text = str(value)
    if text and text.isprintable() and _SPLITS_A_FIELD.search(text) is None:
        return text
    return json.dumps(text)


def log_outcome(
    consumer: str,
    message_id: str | None,
    decision: Decided,
    duration_seconds: float,
    *,
    attempts: int = 1,
) -> None:
    """One `key=value` line for one message's final decision, on `exactly_once.outcomes`: INFO
    for a completed message, WARNING for one dead-lettered or abandoned (someone should look).

    The fields: consumer; key (the message's key as the consumer defines it: the MessageId by
    default, a CloudEvent's source and id with `cloud_event_key`, a business key with
    `from_message`; the MessageId for a message rejected before its key was read); message_id
    (when it is not the key); outcome; settlement; reason (a dead letter's); attempts (when the
    delivery took more than one: decided again after a backoff); duration_ms (the last
    attempt, effect included); and detail (a dead letter's description or an abandon's error).
    They ride on the record too, as `extra` attributes of the same names, for a structured
    handler."""
    key = getattr(decision, "key", None) or message_id or ""
    fields: dict[str, object] = {
        "consumer": consumer,
        "key": key,
        "message_id": message_id if message_id and message_id != key else None,
        "outcome": str(decision.outcome),
        "settlement": str(decision.settlement),
        "reason": decision.dead_letter_reason,
        "attempts": attempts if attempts > 1 else None,
        "duration_ms": round(duration_seconds * 1000, 1),
        "detail": decision.dead_letter_description or decision.error,
    }
    present = {name: value for name, value in fields.items() if value is not None}
    level = logging.INFO if decision.settlement == "complete" else logging.WARNING
    outcomes_logger.log(
        level,
        "%s",
        " ".join(f"{name}={log_value(value)}" for name, value in present.items()),
        extra=present,
    )
