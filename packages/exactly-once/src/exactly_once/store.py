"""The store: the port a store of your own implements, the typed records it keeps, and the
mechanisms that need no message (on documents of your own shape).

- Writing a store of your own (another database, a fake for tests): implement `RecordStore`
  and `DocumentStore` (`Store` is both) and raise the documented exceptions
  (`RecordExistsError`, `RecordChangedError`, `DocumentExistsError`, `TransientStoreError`,
  `StoreRefusedError`, `CorruptRecordError`); `CosmosStore` (`exactly_once.cosmos`) is the one
  shipped, and `tests/core/test_store.py` the contract it meets.
- The records: `Record`, its `RecordStatus`, its `Stamp`, a `RecordRead` with the database's
  clock, a lease's end (`lease_end_s`, `lease_is_live`, `lease_seconds_left`), the request
  hash (`fingerprint`, `body_fingerprint`) and JSON as the store keeps it.
- The claim state machine on records of your own shape (`Claims`: own, finish, release), which
  `two_phase` and `@idempotent` run on.
- The mechanisms on your own documents (an entity id, an inbox record's fields of yours):
  `create_or_find` (write first, compare on a conflict), `apply_version`, `adjust_documents`,
  `update_fenced`; `Effects` binds the same to one message.
"""

from __future__ import annotations

from exactly_once._claims import MAX_RACES, Claims
from exactly_once._orchestrator import (
    DownstreamCall,
    Found,
    VersionedChange,
    adjust_documents,
    apply_version,
    create_or_find,
    update_fenced,
)
from exactly_once._ports import DocumentCreator, DocumentStore, RecordStore, Store
from exactly_once._records import (
    JsonInput,
    JsonMapping,
    JsonObject,
    JsonValue,
    Record,
    RecordRead,
    RecordStatus,
    Stamp,
    StoredDocument,
    body_fingerprint,
    fingerprint,
    lease_end_s,
    lease_is_live,
    lease_seconds_left,
)
from exactly_once.exceptions import (
    CompletionFailedError,
    CorruptRecordError,
    DocumentExistsError,
    RecordChangedError,
    RecordExistsError,
    StoreRefusedError,
)

__all__ = [
    "MAX_RACES",
    "Claims",
    "CompletionFailedError",
    "CorruptRecordError",
    "DocumentCreator",
    "DocumentExistsError",
    "DocumentStore",
    "DownstreamCall",
    "Found",
    "JsonInput",
    "JsonMapping",
    "JsonObject",
    "JsonValue",
    "Record",
    "RecordChangedError",
    "RecordExistsError",
    "RecordRead",
    "RecordStatus",
    "RecordStore",
    "Stamp",
    "Store",
    "StoreRefusedError",
    "StoredDocument",
    "VersionedChange",
    "adjust_documents",
    "apply_version",
    "body_fingerprint",
    "create_or_find",
    "fingerprint",
    "lease_end_s",
    "lease_is_live",
    "lease_seconds_left",
    "update_fenced",
]
