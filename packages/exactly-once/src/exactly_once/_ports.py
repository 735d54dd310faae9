"""The two ports the orchestrator writes through; `exactly_once.cosmos.CosmosStore` is both.

`RecordStore` is the record-store contract of AWS Powertools' persistence layer (claim, read,
take over, complete, release), with the lease judged by the database's clock: every record it
returns carries the `Stamp` of its last write, and reads carry the database's time.
`DocumentStore` writes an effect's own documents: all or nothing, under an ETag, or both in one
batch (`DocumentCreator` is its create-and-read half).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from exactly_once._records import (
    JsonInput,
    JsonMapping,
    Record,
    RecordRead,
    RecordStatus,
    StoredDocument,
)


class RecordStore(Protocol):
    """Records of claimed work. Every write but `claim` is conditional on the record's stamp."""

    async def claim(self, record: Record) -> Record:
        """Create `record` (the create is the lock) and return it stamped.

        Raises `RecordExistsError` with the stored record and the database's time when the key
        is taken; `TransientStoreError` / `StoreError` when the store fails."""
        ...

    async def read(self, key: str, partition: str) -> RecordRead:
        """The stored record (or None) and the database's time, in one request."""
        ...

    async def take_over(self, existing: Record, owner: str, lease_seconds: float) -> Record:
        """Claim `existing` for `owner` with a fresh lease, If-Match its stamp.

        Raises `RecordChangedError` when another owner moved first."""
        ...

    async def complete(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> Record:
        """Mark the owned record done (or failed) with `result`, If-Match its stamp; with
        `IN_PROGRESS`, write it back still ours as `owned` says (`Claims.end_lease`: its lease
        ended). Every field of `owned` but the status and the result is written as it is.

        Raises `RecordChangedError` when the lease was lost to another owner."""
        ...

    async def release(self, owned: Record) -> None:
        """Delete the owned record, If-Match its stamp, so that the next attempt claims anew.
        A record that moved on (or is gone) is left alone."""
        ...


class DocumentCreator(Protocol):
    """What creating an effect's documents needs (`create_or_find`): a batch
    and, on a conflict, a point read. A store whose documents are never replaced (an entity
    written once) implements only this."""

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        """Create every document in one transactional batch: all or nothing.

        Raises `DocumentExistsError` naming the first one that exists (nothing written)."""
        ...

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        """One document with its ETag, or None (a point read)."""
        ...


class DocumentStore(DocumentCreator, Protocol):
    """An effect's documents, in the same partitions as the records that guard them."""

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        """Replace the document If-Match `etag`, and return it as stored, with its new ETag (a
        next fenced write starts from it, with no read); `RecordChangedError` when it moved or
        is gone."""
        ...

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        """One transactional batch: replace `document` If-Match `etag` and create every one of
        `created` (a state change and the event it emits, say), all or nothing.

        Raises `RecordChangedError` when the document moved or is gone, `DocumentExistsError`
        naming the first of `created` that exists and its position among them; nothing is
        written either way."""
        ...

    async def replace_all_and_create(
        self,
        partition: str,
        replaced: Sequence[tuple[JsonMapping, str]],
        *,
        created: Sequence[JsonMapping],
    ) -> None:
        """`replace_and_create` for several documents: one transactional batch that replaces
        each `(document, etag)` of `replaced` If-Match its ETag and creates every one of
        `created` (several stock levels and the marker of the message that changed them), all
        or nothing.

        Raises `RecordChangedError` when any replaced document moved or is gone,
        `DocumentExistsError` naming the first of `created` that exists and its position among
        them; nothing is written either way."""
        ...


class Store(RecordStore, DocumentStore, Protocol):
    """Both ports over one store (`CosmosStore`): what an inbox batch needs."""
