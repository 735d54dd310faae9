"""exactly_once: exactly-once effects for Azure Service Bus consumers, on Cosmos DB.

The broker delivers at least once; this package makes the effect of each message happen once.
See README.md in this folder for the guide.
"""

from exactly_once.claims import Claims
from exactly_once.cosmos import CoreRecordShape, CosmosStore, RecordShape
from exactly_once.decisions import (
    DeadLetterReason,
    Decision,
    Outcome,
    Settleable,
    Settlement,
    Settler,
    decision_for_error,
    settle,
)
from exactly_once.exceptions import (
    DocumentExistsError,
    ExactlyOnceError,
    InProgressElsewhereError,
    PayloadMismatchError,
    PreviouslyFailedError,
    RecordChangedError,
    RecordExistsError,
    Refused,
    Rejected,
    StoreError,
    TransientStoreError,
)
from exactly_once.orchestrator import (
    Effects,
    TwoPhaseResult,
    apply_version,
    create_entity,
    inbox_batch,
)
from exactly_once.ports import DocumentCreator, DocumentStore, RecordStore, Store
from exactly_once.records import (
    JsonInput,
    JsonMapping,
    JsonObject,
    JsonValue,
    Record,
    RecordRead,
    RecordStatus,
    Stamp,
    StoredDocument,
    fingerprint,
)
from exactly_once.servicebus import (
    ExactlyOnceConsumer,
    MessageActionsSettler,
    ReceiverSettler,
    exactly_once,
)
from exactly_once.telemetry import Telemetry
from exactly_once.worker import (
    Handle,
    Worker,
    WorkerOptions,
    WorkerStats,
    run_session_worker,
    run_worker,
)

__all__ = [
    "Claims",
    "CoreRecordShape",
    "CosmosStore",
    "DeadLetterReason",
    "Decision",
    "DocumentCreator",
    "DocumentExistsError",
    "DocumentStore",
    "Effects",
    "ExactlyOnceConsumer",
    "ExactlyOnceError",
    "Handle",
    "InProgressElsewhereError",
    "JsonInput",
    "JsonMapping",
    "JsonObject",
    "JsonValue",
    "MessageActionsSettler",
    "Outcome",
    "PayloadMismatchError",
    "PreviouslyFailedError",
    "ReceiverSettler",
    "Record",
    "RecordChangedError",
    "RecordExistsError",
    "RecordRead",
    "RecordShape",
    "RecordStatus",
    "RecordStore",
    "Refused",
    "Rejected",
    "Settleable",
    "Settlement",
    "Settler",
    "Stamp",
    "Store",
    "StoreError",
    "StoredDocument",
    "Telemetry",
    "TransientStoreError",
    "TwoPhaseResult",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "apply_version",
    "create_entity",
    "decision_for_error",
    "exactly_once",
    "fingerprint",
    "inbox_batch",
    "run_session_worker",
    "run_worker",
    "settle",
]
