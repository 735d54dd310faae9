"""Every exception the core raises, under one root; the conflict ones carry what they found."""

from __future__ import annotations

from exactly_once._records import Record, StoredDocument

# Every error of the core, under one root (`ExactlyOnceError`).
__all__ = [
    "BudgetError",
    "CompletionFailedError",
    "CorruptRecordError",
    "DocumentExistsError",
    "ExactlyOnceError",
    "InProgressElsewhereError",
    "PayloadMismatchError",
    "PreviouslyFailedError",
    "RecordChangedError",
    "RecordExistsError",
    "Refused",
    "Rejected",
    "RetentionError",
    "RetryLater",
    "StoreError",
    "StoreRefusedError",
    "TransientStoreError",
]


class ExactlyOnceError(Exception):
    """Root of the core's exceptions."""


class StoreError(ExactlyOnceError):
    """The store failed in a way a retry will not fix (a bad request, a refused credential)."""


class CorruptRecordError(StoreError):
    """A stored record the core cannot read (a field missing or of the wrong type, a document
    of another kind under a record's id): no retry reads it differently."""


class StoreRefusedError(StoreError):
    """The store refused the request itself for good (Cosmos DB: a 400 for an id or a value it
    cannot take, a 413 for a document too large): every delivery of the message is refused
    alike, so its message is dead-lettered at once (`StoreRefused`) with the store's words."""


class TransientStoreError(StoreError):
    """The store failed in a way a later attempt may not (throttling, timeout, outage)."""


class RetentionError(ExactlyOnceError, ValueError):
    """A retention that would forget a message's records while the broker may still deliver
    the message: raised when the consumer is built, never on a message."""


class BudgetError(ExactlyOnceError, ValueError):
    """A backoff budget plus the longest attempt that does not fit under the host's
    lock-renewal horizon (`exactly_once._budgets`): raised when the consumer or worker is built."""


class RecordExistsError(ExactlyOnceError):
    """A claim found the key already recorded: carries the existing record and the database's
    time it was read at (one request answers both)."""

    def __init__(self, existing: Record, database_now_ms: int) -> None:
        super().__init__(f"record {existing.key!r} already exists ({existing.status.value})")
        self.existing = existing
        self.database_now_ms = database_now_ms


class RecordChangedError(ExactlyOnceError):
    """A conditional write found the record (or document) changed or gone since it was read:
    another owner moved first."""


class DocumentExistsError(ExactlyOnceError):
    """A transactional create found one of its documents already stored; nothing was written.
    `index` is the position of that document in the batch; `existing` the document found,
    when the store learnt it in the same call (then the orchestrator reads nothing more)."""

    def __init__(
        self, document_id: str, index: int, existing: StoredDocument | None = None
    ) -> None:
        super().__init__(f"document {document_id!r} (batch position {index}) already exists")
        self.document_id = document_id
        self.index = index
        self.existing = existing


class PayloadMismatchError(ExactlyOnceError):
    """The key was first used with another payload: not a duplicate, a conflict."""

    def __init__(self, key: str, stored_hash: str, incoming_hash: str) -> None:
        super().__init__(
            f"{key!r} was first recorded with request hash {stored_hash}; "
            f"this one has {incoming_hash}"
        )
        self.key = key
        self.stored_hash = stored_hash
        self.incoming_hash = incoming_hash


class InProgressElsewhereError(ExactlyOnceError):
    """Another owner holds a live lease on the work; the message should come back later."""

    def __init__(self, existing: Record, seconds_left: float) -> None:
        super().__init__(
            f"{existing.key!r} is in progress at {existing.owner}; "
            f"its lease ends in {seconds_left:.0f} s"
        )
        self.existing = existing
        self.seconds_left = seconds_left


class Refused(ExactlyOnceError):
    """Raised by an effect (or a downstream call) that will never succeed for this input: the
    message is dead-lettered with `reason`, and a two-phase record is marked failed."""

    def __init__(self, description: str, *, reason: str = "DownstreamRefused") -> None:
        super().__init__(f"{reason}: {description}")
        self.reason = reason
        self.description = description


class RetryLater(ExactlyOnceError):
    """Raised by an effect (or a downstream call) that failed for now (a service unreachable,
    busy or throttling): the message is decided again after a backoff, in the same delivery,
    as a store outage is (`transient_failure`). A two-phase claim is released (or, with
    `keep_claim_on_error`, kept with its lease ended), so the next attempt calls again with
    the same downstream key. Raise it `from` the client's error to keep that error's story."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class Rejected(ExactlyOnceError):
    """Raised by a message parser: the message can never be processed (dead-lettered)."""

    def __init__(self, description: str, *, reason: str = "InvalidMessage") -> None:
        super().__init__(f"{reason}: {description}")
        self.reason = reason
        self.description = description


class PreviouslyFailedError(ExactlyOnceError):
    """The work was refused for good by an earlier attempt; `existing.result` says why."""

    def __init__(self, existing: Record) -> None:
        super().__init__(f"{existing.key!r} was refused earlier: {existing.result!r}")
        self.existing = existing


class CompletionFailedError(TransientStoreError):
    """The work ran (its effect may have happened) but its outcome could not be recorded: every
    in-place attempt at the completion write met a transient store error. The record stays in
    progress under its owner (`existing`) and is never released, so a retry cannot run the
    work afresh: while its lease lasts a retry is refused as in progress (or waits), and a
    background attempt keeps writing the outcome (`Claims.finish_or_keep`), after which a
    retry gets the replay."""

    def __init__(self, existing: Record, attempts: int) -> None:
        super().__init__(
            f"the outcome of {existing.key!r} could not be recorded in {attempts} attempts; "
            "it stays in progress"
        )
        self.existing = existing
        self.attempts = attempts
