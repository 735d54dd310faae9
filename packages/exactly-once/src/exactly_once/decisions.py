"""What became of one message, as data: the outcome, how the broker settles it, and why.

No broker SDK here: `settle` maps a decision onto any `Settler`; `exactly_once.servicebus`
provides Service Bus's two (the SDK receiver, Functions' message actions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from exactly_once._attempts import current_delivery
from exactly_once._logs import log_value
from exactly_once._transient import Transient, transient_check
from exactly_once.exceptions import (
    CorruptRecordError,
    DocumentExistsError,
    InProgressElsewhereError,
    PayloadMismatchError,
    PreviouslyFailedError,
    RecordChangedError,
    Refused,
    RetryLater,
    StoreRefusedError,
    TransientStoreError,
)

__all__ = [
    "DeadLetterReason",
    "Decision",
    "Outcome",
    "Settleable",
    "Settlement",
    "Settler",
    "decision_for_error",
    "settle",
]

logger = logging.getLogger("exactly_once")

# Service Bus limits a dead-letter description; ours stay well inside it.
MAX_DESCRIPTION_CHARS = 1024


class Outcome(StrEnum):
    """What the effect did (or why it could not)."""

    PROCESSED = "processed"  # the effect happened now
    DUPLICATE = "duplicate"  # it had happened before, with the same payload: nothing done
    STALE = "stale"  # a versioned update older than (or equal to) what is stored: nothing done
    REJECTED = "rejected"  # the message can never be parsed
    MISMATCH = "mismatch"  # the key was first used with another payload
    REFUSED = "refused"  # the effect (or its downstream) refused for good
    EFFECT_CONFLICT = "effect_conflict"  # an effect's document exists but its marker does not
    CORRUPT_RECORD = "corrupt_record"  # the message's record is stored, but unreadable
    STORE_REFUSED = "store_refused"  # the store refused the message's write for good (a 400)
    IN_PROGRESS_ELSEWHERE = "in_progress_elsewhere"  # another owner's lease is live
    TRANSIENT_FAILURE = "transient_failure"  # the store or a downstream failed for now: retry
    UNEXPECTED_FAILURE = "unexpected_failure"  # a bug or an unknown error: retry, and look
    NOT_OURS = "not_ours"  # a delayed retry addressed to another subscription: nothing done


class Settlement(StrEnum):
    """How the broker is told."""

    COMPLETE = "complete"
    ABANDON = "abandon"
    DEAD_LETTER = "dead_letter"
    RETRY_LATER = "retry_later"  # a copy scheduled for later (`delayed_retries`), then complete


class DeadLetterReason(StrEnum):
    """The `DeadLetterReason` the core writes; an effect's `Refused` may name its own."""

    INVALID_MESSAGE = "InvalidMessage"
    MISSING_MESSAGE_ID = "MissingMessageId"
    MISSING_IDEMPOTENCY_KEY = "MissingIdempotencyKey"  # the consumer's key function found none
    BODY_TOO_LARGE = "BodyTooLarge"
    UNSUPPORTED_BODY_TYPE = "UnsupportedBodyType"  # an AMQP value or sequence body, not data
    CORRUPT_RECORD = "CorruptRecord"
    REQUEST_HASH_MISMATCH = "RequestHashMismatch"
    DOWNSTREAM_REFUSED = "DownstreamRefused"
    EFFECT_DOCUMENT_EXISTS = "EffectDocumentExists"
    STORE_REFUSED = "StoreRefused"  # a 4xx refusal of the write itself; the store's message
    RETRIES_EXHAUSTED = "RetriesExhausted"  # still failing after its delayed retries
    INVALID_RETRY_PROPERTIES = "InvalidRetryProperties"  # a delayed retry's properties malformed


def truncate(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """`text` cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Decision:
    """One message's outcome and settlement; a dead letter carries its reason and description,
    an abandon the error that caused it, a delayed retry (`retry_later`) its number and delay
    besides the error.

    `outcome` is an `Outcome`, or an outcome of the application's own: a member of its own
    `StrEnum` (say `SKIPPED_CANCELLED`), for what only it decides, with values the core's do
    not use. Telemetry reads it as a string.

    `key` and `request_hash` name the message's idempotency key and the hash of its payload,
    for logs and journals; the consumer fills them once it knows them (`about`), so a message
    rejected before its key was read has neither."""

    outcome: StrEnum
    settlement: Settlement
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    error: str | None = None
    retry: int | None = None
    """A delayed retry's number (1 for the first copy), for `Settlement.RETRY_LATER`."""
    delay_seconds: float | None = None
    """How long after now a delayed retry's copy is delivered, for `Settlement.RETRY_LATER`."""
    # Which message the decision is about, not part of what was decided: two decisions alike
    # but for their messages compare equal.
    key: str | None = field(default=None, compare=False)
    request_hash: str | None = field(default=None, compare=False)

    def about(self, key: str | None, request_hash: str | None = None) -> Decision:
        """The same decision, naming the message's idempotency key and request hash."""
        return replace(self, key=key, request_hash=request_hash)

    @classmethod
    def complete(cls, outcome: StrEnum = Outcome.PROCESSED) -> Decision:
        """Complete the message: its effect is done (now, or before)."""
        return cls(outcome, Settlement.COMPLETE)

    @classmethod
    def duplicate(cls) -> Decision:
        """Complete a duplicate: the effect was done by an earlier delivery."""
        return cls(Outcome.DUPLICATE, Settlement.COMPLETE)

    @classmethod
    def dead_letter(cls, outcome: StrEnum, reason: str, description: str) -> Decision:
        """Dead-letter the message: no later delivery can succeed."""
        return cls(
            outcome,
            Settlement.DEAD_LETTER,
            dead_letter_reason=reason,
            dead_letter_description=truncate(description),
        )

    @classmethod
    def abandon(cls, outcome: StrEnum, error: str) -> Decision:
        """Hand the message back: a later delivery may succeed."""
        return cls(outcome, Settlement.ABANDON, error=truncate(error))

    @classmethod
    def retry_later(
        cls, outcome: StrEnum, error: str, *, retry: int, delay_seconds: float
    ) -> Decision:
        """Schedule a copy of the message `delay_seconds` from now, as delayed retry number
        `retry`, and complete this delivery (`exactly_once.delayed_retries`)."""
        return cls(
            outcome,
            Settlement.RETRY_LATER,
            error=truncate(error),
            retry=retry,
            delay_seconds=delay_seconds,
        )


class Settleable(Protocol):
    """What settling needs of a decision."""

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


class Settler(Protocol):
    """Tells the broker what became of the message."""

    async def complete(self) -> None:
        """Remove the message: done."""
        ...

    async def abandon(self) -> None:
        """Hand the message back for another delivery."""
        ...

    async def dead_letter(self, *, reason: str, description: str) -> None:
        """Move the message to the dead-letter queue with a reason."""
        ...

    async def retry_later(self, *, retry: int, delay_seconds: float) -> None:
        """Schedule a copy of the message for `delay_seconds` from now, as delayed retry
        `retry`, then complete this one; abandon instead where nothing can schedule it or the
        scheduling fails (the message is never lost)."""
        ...


async def settle(decision: Settleable, settler: Settler) -> None:
    """The one mapping from a decision to a settlement, for every host (and for any decision
    type with these three fields; a `retry_later` one also carries `retry` and
    `delay_seconds`, as `Decision` does)."""
    match decision.settlement:
        case Settlement.COMPLETE:
            await settler.complete()
        case Settlement.ABANDON:
            await settler.abandon()
        case Settlement.DEAD_LETTER:
            await settler.dead_letter(
                reason=decision.dead_letter_reason or "Unspecified",
                description=decision.dead_letter_description or "",
            )
        case Settlement.RETRY_LATER:
            retry = getattr(decision, "retry", None)
            delay_seconds = getattr(decision, "delay_seconds", None)
            if not isinstance(retry, int) or not isinstance(delay_seconds, int | float):
                raise ValueError("a retry_later decision carries its retry and delay_seconds")
            await settler.retry_later(retry=retry, delay_seconds=float(delay_seconds))


def decision_for_error(
    exc: Exception,
    *,
    consumer: str,
    message_id: str | None,
    key: str | None = None,
    transient: Transient | None = None,
) -> Decision:
    """The one error frame: every exception an effect raises, as a decision.

    `ExactlyOnceConsumer` decides through it, and so does an application's own frame rather
    than writing the frame again. Three kinds of failure:

    - refused: no attempt can succeed (`Refused`, a reused key, a write the store refuses):
      dead-lettered at once;
    - transient: the store or a downstream is unreachable or busy for now (`RetryLater`,
      `TransientStoreError`, a lost race, what `exactly_once._transient.is_transient` knows of
      the standard library, aiohttp, httpx and the Azure SDKs, and what `transient` adds):
      `TRANSIENT_FAILURE`, decided again after a backoff;
    - unexpected: anything else (a bug, a 401/403 from a missing role): `UNEXPECTED_FAILURE`,
      retried a few times at once, then handed back. It is logged with its traceback, once
      per delivery, naming the consumer, the message and its `key` (when known)."""
    match exc:
        case PayloadMismatchError():
            return Decision.dead_letter(
                Outcome.MISMATCH, DeadLetterReason.REQUEST_HASH_MISMATCH, str(exc)
            )
        case Refused():
            return Decision.dead_letter(Outcome.REFUSED, exc.reason, exc.description)
        case PreviouslyFailedError():
            why = exc.existing.result
            reason = why.get("reason") if isinstance(why, dict) else None
            return Decision.dead_letter(
                Outcome.REFUSED,
                str(reason or DeadLetterReason.DOWNSTREAM_REFUSED),
                f"refused by an earlier attempt: {why}",
            )
        case DocumentExistsError():
            return Decision.dead_letter(
                Outcome.EFFECT_CONFLICT, DeadLetterReason.EFFECT_DOCUMENT_EXISTS, str(exc)
            )
        case CorruptRecordError():
            # The message's own record cannot be read: every delivery would read it alike.
            return Decision.dead_letter(
                Outcome.CORRUPT_RECORD, DeadLetterReason.CORRUPT_RECORD, str(exc)
            )
        case StoreRefusedError():
            # The store refuses this message's write itself (a 400, a 413): every delivery
            # would be refused alike, so no retry and no traceback, its words in the dead letter.
            return store_refused(consumer, message_id, str(exc), key=key)
        case InProgressElsewhereError():
            return Decision.abandon(Outcome.IN_PROGRESS_ELSEWHERE, str(exc))
        case TransientStoreError() | RecordChangedError() | RetryLater():
            return Decision.abandon(Outcome.TRANSIENT_FAILURE, str(exc))
        case _ if transient_check(transient)(exc):
            return Decision.abandon(Outcome.TRANSIENT_FAILURE, described(exc))
        case _:
            _log_unexpected(exc, consumer, message_id, key)
            return Decision.abandon(Outcome.UNEXPECTED_FAILURE, described(exc))


def _log_unexpected(exc: Exception, consumer: str, message_id: str | None, key: str | None) -> None:
    """The traceback on the first unexpected failure of a delivery; one line on each retry."""
    about = naming(consumer, message_id, key)
    attempts = current_delivery()
    if attempts is not None and attempts.unexpected_logged:
        logger.info(
            "unexpected failure again (attempt %d): %s: %s",
            attempts.attempt,
            about,
            log_value(described(exc)),
        )
        return
    if attempts is not None:
        attempts.unexpected_logged = True
    logger.exception("unexpected failure: %s", about)


def naming(consumer: str, message_id: str | None, key: str | None = None) -> str:
    """`consumer=... key=...` (and `message_id=...` when it is not the key) for an error line:
    the key as the consumer defines it, the MessageId when the key is not known."""
    about = f"consumer={log_value(consumer)} key={log_value(key or message_id or '')}"
    if key is not None and key != message_id:
        about += f" message_id={log_value(message_id or '')}"
    return about


def store_refused(
    consumer: str, message_id: str | None, description: str, *, key: str | None = None
) -> Decision:
    """The dead letter for a write the store refused for good (`StoreRefusedError`, or an
    application's own exception of that meaning), with a one-line warning."""
    logger.warning(
        "the store refused the message for good, dead-lettering it: %s detail=%s",
        naming(consumer, message_id, key),
        log_value(truncate(description, 300)),
    )
    return Decision.dead_letter(Outcome.STORE_REFUSED, DeadLetterReason.STORE_REFUSED, description)


def described(exc: BaseException) -> str:
    """`Type: message` of an exception, cut to a dead-letter description; an exception whose
    message cannot be rendered is named by its type alone (this must not raise)."""
    try:
        text = str(exc)
    except Exception:
        text = "<its message could not be rendered>"
    return truncate(f"{type(exc).__name__}: {text}")
