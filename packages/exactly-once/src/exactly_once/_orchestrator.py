"""The orchestrator: one unit of work made exactly-once, by whichever of four mechanisms fits.

Write first, read only on conflict: a new effect costs its write and nothing else; the read that
tells a duplicate from a conflicting payload happens only when the write found its key taken.

- `create_entity`: the business entity is its own marker. Created with the effect's other
  documents in one transactional batch; a conflict reads it and compares the request hash.
- `inbox`: an inbox record (scoped by consumer and key) in the same batch as the
  effect's documents: the record exists if and only if the effect does.
- `two_phase`: a record claimed before an external call and completed after it; the call
  carries a downstream key that stays the same on every attempt, so the downstream does it once.

The key's home: a message's key (consumer, key: the MessageId unless the consumer's key function
says otherwise) is judged in a partition derived from the key alone (`Effects.key_partition`),
never in one the payload names, so a key reused with another body is a mismatch whatever
partition that body names. An effect written in the key's home carries its key record in its own
batch (one request); one written elsewhere writes the key record first (`Effects.hold_key`),
then its batch. A two-phase record always lives there.
- `apply_version`: natural idempotency. A versioned document replaced If-Match; an older or
  equal version changes nothing.
- `adjust`: existing documents of one partition changed by the user's rule (an amount taken
  from a stock level, added to a balance), replaced If-Match in one batch with the key's
  marker; a race lost re-reads and applies the rule again; a refusal is recorded alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import unicodedata
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from exactly_once._attempts import current_delivery
from exactly_once._claims import DEFAULT_MAX_WAIT_SECONDS, MAX_RACES, Claims
from exactly_once._ports import DocumentCreator, DocumentStore, RecordStore
from exactly_once._records import (
    DEFAULT_LEASE_SECONDS,
    JsonInput,
    JsonMapping,
    JsonObject,
    Record,
    RecordStatus,
    StoredDocument,
)
from exactly_once._retention import DEFAULT_RETENTION, Retention
from exactly_once._transient import Transient, transient_check
from exactly_once.decisions import Outcome
from exactly_once.exceptions import (
    DocumentExistsError,
    PayloadMismatchError,
    RecordChangedError,
    Refused,
    RetryLater,
)

INBOX_TYPE = "exactlyOnceInbox"
# The marker of an adjustment: in the batch that changed the documents, or alone (a refusal).
ADJUSTMENT_TYPE = "exactlyOnceAdjustment"
# A message's key record in the key's home, written first when the effect's partition is another.
KEY_TYPE = "exactlyOnceKey"
# Characters Cosmos DB ids may not hold, and its id length limit.
_FORBIDDEN_ID_CHARACTERS = frozenset("/\\?#")
_MAX_ID_LENGTH = 255
# A hashed id keeps a readable prefix ("inbox", "two-phase") up to this length.
_MAX_PREFIX_LENGTH = 64

S = TypeVar("S")
R = TypeVar("R")

# An external call: given the downstream key, returns what to record (JSON).
DownstreamCall = Callable[[str], Awaitable[JsonInput]]
# A versioned update: the stored document (None when there is none) -> the new document.
VersionedChange = Callable[[JsonObject | None], JsonMapping]
# An adjustment's rule: the documents as read, by id (one that does not exist is absent) ->
# the documents it changes, each with its id; or `Refused` with the reason.
AdjustmentRule = Callable[[Mapping[str, JsonObject]], Sequence[JsonMapping]]


def _is_safe_id(text: str) -> bool:
    """Whether Cosmos DB takes `text` as an id as it is, and logs and URLs show it unchanged:
    1..255 printable characters (no controls, no lone surrogates), none of / \\ ? #, no
    trailing space, Unicode NFC."""
    return (
        0 < len(text) <= _MAX_ID_LENGTH
        and text.isprintable()
        and not _FORBIDDEN_ID_CHARACTERS.intersection(text)
        and not text.endswith(" ")
        and unicodedata.is_normalized("NFC", text)
    )


def safe_id(text: str) -> str:
    """`text` as a store-safe id: itself when it is one, else its first `:`-separated part
    (when that is safe and short) and the SHA-256 of the whole text.

    A message id is the producer's bytes: whatever it holds, the record's id is one the store
    accepts, so a hostile id can never turn into a store error on every delivery."""
    if _is_safe_id(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    prefix = text.split(":", 1)[0]
    keep_prefix = prefix != text and len(prefix) <= _MAX_PREFIX_LENGTH and _is_safe_id(prefix)
    return f"{prefix}:{digest}" if keep_prefix else digest


def key_partition_of(consumer: str, key: str) -> str:
    """The key's home by default: a partition of its own for each (consumer, key), so keys
    spread over the container's partitions and no payload can move one."""
    return safe_id(f"{consumer}:{key}")


@dataclass(frozen=True)
class TwoPhaseResult:
    """A two-phase effect's outcome (`PROCESSED` now, `DUPLICATE` before) and what the
    downstream answered (the recorded answer, for a duplicate)."""

    outcome: Outcome
    result: JsonInput


class Effects:
    """The mechanisms, bound to one unit of work: the consumer (the scope of its keys: its
    name, or its `key_prefix`), the message's key and its request hash name the records;
    `owner` names this delivery in them, the same on each of its in-place attempts
    (`exactly_once._attempts.delivery_owner`), so a retry takes its own claim back at once.

    `key` is the message's key (its MessageId when None), as the producer spelt it; `safe_key`
    is the same key as an id Cosmos DB takes (`safe_id`: itself when it is one), for a document
    of yours named by the message. `key_partition` is the key's home (by
    default one partition per (consumer, key)); every record carries `retention`'s ttl, and no
    business document is given one. `failed_is_final=False` lets a later attempt take over a
    two-phase record the downstream refused and call again (see `Claims`)."""

    def __init__(
        self,
        *,
        consumer: str,
        message_id: str,
        request_hash: str,
        records: RecordStore,
        documents: DocumentStore,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        retention: Retention = DEFAULT_RETENTION,
        key_partition: str | None = None,
        key: str | None = None,
        failed_is_final: bool = True,
    ) -> None:
        self.consumer = consumer
        self.message_id = message_id
        self.key = message_id if key is None else key
        self.request_hash = request_hash
        self.owner = owner
        # The key as an id any store takes (itself when it already is one): a CloudEvents
        # key, `source` and `id`, holds the `/` Cosmos DB refuses in ids.
        self.safe_key = safe_id(self.key)
        self.key_partition = key_partition or key_partition_of(consumer, self.key)
        self.ttl_seconds = retention.ttl_seconds
        self._documents = documents
        self._lease_seconds = lease_seconds
        self._claims = Claims(
            records,
            owner=owner,
            lease_seconds=lease_seconds,
            max_wait_seconds=max_wait_seconds,
            sleep=sleep,
            failed_is_final=failed_is_final,
        )

    def _marker(self, kind: str, document_type: str) -> dict[str, JsonInput]:
        """The record of this message's `kind` of effect: its id names the consumer and the
        key only, never the payload; it expires with the consumer's retention. A key other than
        the MessageId is kept beside it (the MessageId is then the first delivery's)."""
        marker: dict[str, JsonInput] = {
            "id": safe_id(f"{kind}:{self.consumer}:{self.key}"),
            "type": document_type,
            "consumer": self.consumer,
            "messageId": self.message_id,
            "requestHash": self.request_hash,
            "ttl": self.ttl_seconds,
        }
        if self.key != self.message_id:
            marker["key"] = self.key
        return marker

    async def hold_key(self, kind: str, partition: str) -> bool:
        """Write this message's key record for `kind` in the key's home, before an effect in
        `partition` (another partition): True when it is new; False when an earlier delivery
        wrote it with the same request hash (the effect may be done: its own marker says).

        Raises `PayloadMismatchError` when the key was first recorded with another hash,
        whatever partition either body named."""
        key = {**self._marker(kind, KEY_TYPE), "partition": partition}
        key_id = str(key["id"])
        try:
            await self._documents.create_all(self.key_partition, [key])
            return True
        except DocumentExistsError as exists:
            stored = exists.existing or await self._documents.get(key_id, self.key_partition)
        if stored is None:
            raise RecordChangedError(f"{key_id!r} vanished after its create conflicted")
        stored_hash = stored.body.get("requestHash")
        if stored_hash != self.request_hash:
            raise PayloadMismatchError(key_id, str(stored_hash), self.request_hash)
        return False

    # --- (1) the business entity as the marker ----------------------------------------------

    async def create_entity(
        self,
        partition: str,
        entity: JsonMapping,
        *others: JsonMapping,
        hash_field: str = "requestHash",
    ) -> Outcome:
        """Create `entity` (stamped with the request hash in `hash_field`) and `others` in one
        batch: `PROCESSED`; or find the entity and its hash the same: `DUPLICATE`.

        In the key's home the message's key record rides in the batch; elsewhere it is written
        first. Raises `PayloadMismatchError` when the key or the entity holds another hash,
        `DocumentExistsError` when one of `others` exists without the entity."""
        marked = {**entity, hash_field: self.request_hash}
        if partition != self.key_partition:
            await self.hold_key("entity", partition)
            return await self._create_entity(partition, marked, others, hash_field)
        key = self._marker("entity", KEY_TYPE)
        try:
            created = await create_or_find(
                self._documents, partition, key, marked, *others, request_hash=self.request_hash
            )
            return created.outcome
        except DocumentExistsError as exists:
            if exists.index != 1:
                raise
        # The entity exists without this message's key: another message created it (a resend
        # under a new MessageId): the entity's own hash decides, as it does elsewhere.
        return await self._create_entity(partition, marked, others, hash_field)

    async def _create_entity(
        self,
        partition: str,
        marked: JsonMapping,
        others: Sequence[JsonMapping],
        hash_field: str,
    ) -> Outcome:
        """The entity (stamped) as its own marker, its hash compared in `hash_field`."""
        created = await create_or_find(
            self._documents,
            partition,
            marked,
            *others,
            request_hash=self.request_hash,
            hash_field=hash_field,
        )
        return created.outcome

    # --- (2) an inbox record in the effect's batch --------------------------------------------

    async def inbox(self, partition: str, documents: Sequence[JsonMapping]) -> Outcome:
        """Create this consumer's inbox record for the message and `documents` in one batch:
        `PROCESSED`; or find the record with the same hash: `DUPLICATE`.

        In the key's home the inbox record is the key record; elsewhere the key record is
        written first. Raises `PayloadMismatchError` when the key holds another hash,
        `DocumentExistsError` when one of `documents` exists without the record."""
        marker = self._marker("inbox", INBOX_TYPE)
        judged = False
        if partition != self.key_partition:
            judged = not await self.hold_key("inbox", partition)
        # A key found with this hash was judged in its home: the marker's id decides alone.
        created = await create_or_find(
            self._documents,
            partition,
            marker,
            *documents,
            request_hash=None if judged else self.request_hash,
        )
        return created.outcome

    # --- (3) two phases around an external call -----------------------------------------------

    async def two_phase(
        self,
        call: DownstreamCall,
        *deprecated_call: DownstreamCall,
        downstream_key: str | None = None,
        record_key: str | None = None,
        data: JsonMapping | None = None,
        keep_claim_on_error: bool = False,
        transient: Transient | None = None,
    ) -> TwoPhaseResult:
        """Claim the work, call the downstream with a key that never changes for this message,
        record its answer: `PROCESSED`; or find it recorded: `DUPLICATE` with that answer.

        The record lives in the key's home (no document rides with it, so only the key decides
        where it is). The downstream key is `downstream_key`, or the consumer and the message's
        key as an id any store takes (`safe_id`). 0.1's `two_phase(partition, call)` still runs,
        with a `DeprecationWarning`: the partition was never used. A live claim of another
        attempt (another delivery, in this process or another) is waited for (bounded), then
        `InProgressElsewhereError`; an ended one is taken over (If-Match) and the call made
        again with the same key. A `Refused` from the call marks the record failed, for good;
        any other error releases the claim (the next attempt calls again, with the same key)
        and propagates.

        `transient` adds exceptions of the call's (types, or a predicate) to those that mean
        "unreachable or busy for now" (`exactly_once._transient`): such an error propagates as
        `RetryLater` (raised from it), so the message backs off in place whatever consumer
        decides it. Within one delivery (`exactly_once._attempts`), an attempt that got the
        call's answer but could not record it leaves the answer for the next attempt, which
        takes its own claim back at once and records it without calling again.

        `record_key` names the record where the application already names its records (a
        `RecordShape` of its own that other readers know by id); it is used as it is, so it
        must be an id the store accepts. `data` is what the claim carries for whichever
        attempt finishes the work (an amount, a currency), kept on the record.

        `keep_claim_on_error=True` keeps the record after any other error, in progress with its
        lease ended, instead of releasing it: for a downstream whose answer was lost (a
        timeout), the record still says a call may have been made under its key, so a reader
        deciding whether there is anything to undo (a refund after a cancel) finishes the
        work first; the next attempt takes it over within a second (the database's clock has
        whole seconds) and calls again with the same key."""
        call = _without_partition(call, deprecated_call)
        wanted = Record(
            key=record_key or safe_id(f"two-phase:{self.consumer}:{self.key}"),
            partition=self.key_partition,
            request_hash=self.request_hash,
            status=RecordStatus.IN_PROGRESS,
            owner=self.owner,
            lease_seconds=self._lease_seconds,
            downstream_key=downstream_key or safe_id(f"{self.consumer}:{self.key}"),
            data=json.loads(json.dumps(data)) if data is not None else None,
            expires_after_seconds=self.ttl_seconds,
        )
        owned = await self.own(wanted)
        if owned.status is RecordStatus.COMPLETED:
            return TwoPhaseResult(Outcome.DUPLICATE, owned.result)
        assert owned.downstream_key is not None
        attempts = current_delivery()
        answered = (owned.key, owned.downstream_key)
        if attempts is not None and answered in attempts.answers:
            # An earlier attempt of this delivery got the answer and could not record it.
            result = attempts.answers[answered]
        else:
            result = await self._call(owned, call, keep_claim_on_error, transient)
            if attempts is not None:
                attempts.answers[answered] = result
        await self._claims.finish(owned, result, RecordStatus.COMPLETED)
        if attempts is not None:
            attempts.answers.pop(answered, None)
        return TwoPhaseResult(Outcome.PROCESSED, result)

    async def _call(
        self,
        owned: Record,
        call: DownstreamCall,
        keep_claim_on_error: bool,
        transient: Transient | None,
    ) -> JsonInput:
        """The downstream's answer under our claim; on an error the claim is marked failed
        (`Refused`), kept with its lease ended, or released, and the error propagates."""
        assert owned.downstream_key is not None
        try:
            return await call(owned.downstream_key)
        except Refused as refused:
            why: JsonInput = {"reason": refused.reason, "description": refused.description}
            await self._claims.finish(owned, why, RecordStatus.FAILED)
            raise
        except BaseException as failed:
            if keep_claim_on_error:
                await self._claims.end_lease(owned)
            else:
                await self._claims.release(owned)
            if (
                transient is not None
                and isinstance(failed, Exception)
                and not isinstance(failed, RetryLater)
                and transient_check(transient)(failed)
            ):
                raise RetryLater(f"{type(failed).__name__}: {failed}") from failed
            raise

    async def own(self, wanted: Record) -> Record:
        """`wanted` claimed by us, or the record completed by anyone (see `Claims.own`)."""
        return await self._claims.own(wanted)

    # --- natural idempotency: versioned conditional replace -----------------------------------

    async def apply_version(
        self,
        partition: str,
        document_id: str,
        version: int,
        change: VersionedChange,
        *,
        version_field: str = "version",
    ) -> Outcome:
        """Write `change(stored)` at `version` If-Match the stored ETag (or create it):
        `PROCESSED`; a stored version at or above `version`: `STALE`, nothing written.

        Reads first: the comparison needs the stored version. A write that lost a race reads
        again (bounded), then `RecordChangedError`."""
        return await apply_version(
            self._documents, partition, document_id, version, change, version_field=version_field
        )

    # --- existing documents changed by a rule, the key's marker in the same batch ------------

    async def adjust(
        self,
        partition: str,
        document_ids: Sequence[str],
        rule: AdjustmentRule,
        *,
        step: str = "",
    ) -> Outcome:
        """Change existing documents of `partition` once for this message: read them, call
        `rule` on them (by id; a missing one is absent), and write what it returns, each
        document If-Match the ETag it was read with, in one transactional batch with this
        message's marker: `PROCESSED`; or find the marker with the same hash: `DUPLICATE`,
        nothing written.

        `rule` is pure (it may run more than once): a batch that lost a race to another writer
        reads again and calls it again, at most `MAX_RACES` times, then `RecordChangedError`
        (transient: the message backs off). A rule that raises `Refused` changes nothing: the
        marker is written alone with the refusal, so every redelivery of the message is refused
        alike (an operator who restocks sends a new message, not the dead letter again), and
        `Refused` propagates. Raises `PayloadMismatchError` when the key holds another hash.

        `step` names one of several adjustments a message makes in one partition (a
        reservation and its give-back): each has its own marker. In the key's home the marker
        is the key record; elsewhere the key record is written first, as `inbox` does."""
        kind = f"adjust-{step}" if step else "adjust"
        if partition != self.key_partition:
            await self.hold_key(kind, partition)
        return await adjust_documents(
            self._documents,
            partition,
            document_ids,
            rule,
            marker=self._marker(kind, ADJUSTMENT_TYPE),
        )


# --- The mechanisms that need no record store, on any `DocumentCreator` / `DocumentStore` -----
# `Effects` binds them to one message; an application whose documents already have a shape of
# their own (an entity id, an inbox record's fields) calls them directly (`exactly_once.store`).


class Found(NamedTuple):
    """What `create_or_find` did: `PROCESSED` (it created the marker; `stored` is None) or
    `DUPLICATE` (the marker was there with the same hash; `stored` is it, None when the hash
    was not compared)."""

    outcome: Outcome
    stored: StoredDocument | None


async def create_or_find(
    documents: DocumentCreator,
    partition: str,
    marker: JsonMapping,
    *others: JsonMapping,
    request_hash: str | None,
    hash_field: str = "requestHash",
) -> Found:
    """The one write-first mechanism, for documents of your own shape: create `marker` (first)
    and `others` in one batch of `documents`; or find the marker already there.

    `marker` carries the request hash in `hash_field` (the business entity as its own marker,
    or an inbox record). A marker found holding `request_hash` is a duplicate (`stored`: the
    first writer's, whatever else it holds); another hash raises `PayloadMismatchError`.
    `request_hash=None` lets the marker's id alone decide (a message whose id names its payload
    for good): a found marker is a duplicate without a read. One request for a new marker; a
    conflict costs one more (the point read), none when the store's `DocumentExistsError`
    carries the document it found. Raises `DocumentExistsError` when one of `others` exists
    without the marker, `RecordChangedError` when the marker vanished after its conflict.

    `Effects.create_entity` and `Effects.inbox` are this, with the marker named by the
    message's key."""
    marker_id = str(marker["id"])
    try:
        await documents.create_all(partition, [marker, *others])
        return Found(Outcome.PROCESSED, None)
    except DocumentExistsError as exists:
        if exists.index != 0:
            raise
        if request_hash is None:
            return Found(Outcome.DUPLICATE, None)
        stored = exists.existing or await documents.get(marker_id, partition)
    if stored is None:
        raise RecordChangedError(f"{marker_id!r} vanished after its create conflicted")
    stored_hash = stored.body.get(hash_field)
    if stored_hash == request_hash:
        return Found(Outcome.DUPLICATE, stored)
    raise PayloadMismatchError(marker_id, str(stored_hash), request_hash)


async def apply_version(
    documents: DocumentStore,
    partition: str,
    document_id: str,
    version: int,
    change: VersionedChange,
    *,
    version_field: str = "version",
    absent_version: int | None = None,
    max_races: int = MAX_RACES,
) -> Outcome:
    """Write `change(stored)` at `version` into `documents`, If-Match the stored ETag (or
    create it): `PROCESSED`; a stored version at or above `version`: `STALE`, nothing written.

    A missing document stands at `absent_version` when one is given (an entity whose first
    state is implied: an update at or below it is stale too); else any version creates it.
    `change` may raise to refuse an update (an illegal transition); it propagates and nothing
    is written. Reads first: the comparison needs the stored version. A write that lost a race
    reads again (at most `max_races` writes), then `RecordChangedError`."""

    async def read() -> StoredDocument | None:
        return await documents.get(document_id, partition)

    async def write(stored: StoredDocument | None) -> Outcome:
        current = stored.body.get(version_field) if stored is not None else absent_version
        if isinstance(current, int) and current >= version:
            return Outcome.STALE
        updated = {
            **change(stored.body if stored else None),
            "id": document_id,
            version_field: version,
        }
        try:
            if stored is None:
                await documents.create_all(partition, [updated])
            else:
                await documents.replace(updated, partition, etag=stored.etag)
        except DocumentExistsError as exists:
            # Another version was created first: compare against it.
            raise RecordChangedError(f"{document_id!r} was created meanwhile") from exists
        return Outcome.PROCESSED

    return await update_fenced(read, write, name=document_id, max_races=max_races)


async def adjust_documents(
    documents: DocumentStore,
    partition: str,
    document_ids: Sequence[str],
    rule: AdjustmentRule,
    *,
    marker: JsonMapping,
    hash_field: str = "requestHash",
    max_races: int = MAX_RACES,
) -> Outcome:
    """`Effects.adjust` on any `DocumentStore`, with a `marker` of the caller's (its id names
    the key, `hash_field` holds the request hash): the documents changed by `rule` and the
    marker created in one batch; `DUPLICATE` when the marker is there with the same hash,
    `Refused` again when it recorded a refusal, `PayloadMismatchError` when another hash."""
    wanted = list(dict.fromkeys(document_ids))

    async def read() -> dict[str, StoredDocument]:
        found = await asyncio.gather(*(documents.get(each, partition) for each in wanted))
        return {each: stored for each, stored in zip(wanted, found, strict=True) if stored}

    async def write(found: dict[str, StoredDocument]) -> Outcome:
        try:
            changed = rule({each: stored.body for each, stored in found.items()})
        except Refused as refused:
            refusal = {"reason": refused.reason, "description": refused.description}
            written = {**marker, "refused": refusal}
            try:
                await documents.create_all(partition, [written])
            except DocumentExistsError as exists:
                return await _judge_marker(documents, partition, marker, exists, hash_field)
            raise
        replaced: list[tuple[JsonMapping, str]] = []
        for document in changed:
            stored = found.get(str(document.get("id")))
            if stored is None:
                raise ValueError(f"the rule changed {document.get('id')!r}, which it was not given")
            replaced.append((document, stored.etag))
        try:
            await documents.replace_all_and_create(partition, replaced, created=[marker])
        except DocumentExistsError as exists:
            return await _judge_marker(documents, partition, marker, exists, hash_field)
        return Outcome.PROCESSED

    return await update_fenced(read, write, name=str(marker["id"]), max_races=max_races)


async def _judge_marker(
    documents: DocumentCreator,
    partition: str,
    marker: JsonMapping,
    exists: DocumentExistsError,
    hash_field: str,
) -> Outcome:
    """An adjustment's marker found where this delivery meant to create it: an earlier
    delivery's (`DUPLICATE`, or its recorded refusal raised again) or another payload's."""
    marker_id = str(marker["id"])
    stored = exists.existing or await documents.get(marker_id, partition)
    if stored is None:
        raise RecordChangedError(f"{marker_id!r} vanished after its create conflicted")
    stored_hash = stored.body.get(hash_field)
    if stored_hash != marker[hash_field]:
        raise PayloadMismatchError(marker_id, str(stored_hash), str(marker[hash_field]))
    refusal = stored.body.get("refused")
    if isinstance(refusal, dict):
        reason, description = refusal.get("reason"), refusal.get("description")
        raise Refused(str(description), reason=str(reason))
    return Outcome.DUPLICATE


def _without_partition(
    call: DownstreamCall | str, deprecated_call: Sequence[DownstreamCall]
) -> DownstreamCall:
    """`two_phase`'s call, from 0.2's `two_phase(call)` or 0.1's `two_phase(partition, call)`
    (with a `DeprecationWarning`: the partition was never used)."""
    if isinstance(call, str):
        if len(deprecated_call) == 1:
            warnings.warn(
                "two_phase(partition, call) is deprecated: the partition was never used; "
                "call two_phase(call)",
                DeprecationWarning,
                stacklevel=3,
            )
            return deprecated_call[0]
    elif not deprecated_call:
        return call
    raise TypeError("two_phase takes one call: two_phase(call, downstream_key=..., ...)")


async def update_fenced(
    read: Callable[[], Awaitable[S]],
    write: Callable[[S], Awaitable[R]],
    *,
    name: str,
    max_races: int = MAX_RACES,
) -> R:
    """A read-decide-write under the read's ETag, until no race is lost: `write(read())`, where
    `write` decides on what was read and writes If-Match its ETag (or writes nothing and
    returns), raising `RecordChangedError` when another writer moved first; then it reads
    again and decides anew. At most `max_races` lost writes, then `RecordChangedError` (a
    document that keeps moving is given back to the caller's retry: the broker's, a client's).

    `apply_version` is this with a version compared; an application's own decisions (a saga's
    transitions on one document) are this with their own `write`."""
    for _ in range(max_races):
        stored = await read()
        try:
            return await write(stored)
        except RecordChangedError:
            continue  # another writer moved first: decide again on what it wrote
    raise RecordChangedError(f"{name!r} kept changing; {max_races} writes lost")
