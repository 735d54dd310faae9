"""exactly_once: exactly-once effects for Azure Service Bus consumers, on Cosmos DB.

The broker delivers at least once; this package makes the effect of each message happen once.
See README.md in this folder for the guide.

Importing the package is cheap: each public name is imported from its module on first use (PEP
562), so a program that needs the records, decisions or exceptions alone never loads the Azure
SDKs (the Cosmos store and the Service Bus parts import them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exactly_once.backoff import Backoff, Retrier, Retry
    from exactly_once.budgets import LockRenewal
    from exactly_once.cache import LocalCache
    from exactly_once.change_feed import (
        ChangeFeed,
        ChangeFeedProcessor,
        ChangeHandler,
        ChangePage,
        Lease,
        LeaseStore,
        LeaseTable,
        leases_to_take,
    )
    from exactly_once.claims import Claims, CompletionRetries
    from exactly_once.cosmos import CoreRecordShape, CosmosStore, RecordShape
    from exactly_once.cosmos_change_feed import CosmosChangeFeed, CosmosLeaseStore
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
    from exactly_once.delayed_retries import CopyScheduler, DelayedRetries, original_message_id
    from exactly_once.exceptions import (
        BudgetError,
        CompletionFailedError,
        DocumentExistsError,
        ExactlyOnceError,
        InProgressElsewhereError,
        PayloadMismatchError,
        PreviouslyFailedError,
        RecordChangedError,
        RecordExistsError,
        Refused,
        Rejected,
        RetentionError,
        RetryLater,
        StoreError,
        StoreRefusedError,
        TransientStoreError,
    )
    from exactly_once.functions import idempotent
    from exactly_once.message_keys import (
        Delivered,
        KeyOf,
        PayloadOf,
        cloud_event_key,
        from_message,
        message_id_key,
    )
    from exactly_once.orchestrator import (
        AdjustmentRule,
        Effects,
        TwoPhaseResult,
        apply_version,
        create_entity,
        create_or_compare,
        inbox_batch,
        update_fenced,
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
    from exactly_once.retention import Retention
    from exactly_once.servicebus import (
        ExactlyOnceConsumer,
        MessageActionsSettler,
        ReceiverSettler,
        exactly_once,
    )
    from exactly_once.telemetry import Telemetry
    from exactly_once.transient import Transient, is_transient
    from exactly_once.worker import (
        Handle,
        Worker,
        WorkerOptions,
        WorkerStats,
        run_session_worker,
        run_worker,
    )

# Public name -> the module of the package that defines it.
_MODULE_OF: dict[str, str] = {
    "Backoff": "backoff",
    "BudgetError": "exceptions",
    "ChangeFeed": "change_feed",
    "ChangeFeedProcessor": "change_feed",
    "ChangeHandler": "change_feed",
    "ChangePage": "change_feed",
    "Claims": "claims",
    "CompletionFailedError": "exceptions",
    "CompletionRetries": "claims",
    "CopyScheduler": "delayed_retries",
    "CoreRecordShape": "cosmos",
    "CosmosChangeFeed": "cosmos_change_feed",
    "CosmosLeaseStore": "cosmos_change_feed",
    "CosmosStore": "cosmos",
    "DeadLetterReason": "decisions",
    "Decision": "decisions",
    "DelayedRetries": "delayed_retries",
    "Delivered": "message_keys",
    "DocumentCreator": "ports",
    "DocumentExistsError": "exceptions",
    "DocumentStore": "ports",
    "Effects": "orchestrator",
    "ExactlyOnceConsumer": "servicebus",
    "ExactlyOnceError": "exceptions",
    "Handle": "worker",
    "InProgressElsewhereError": "exceptions",
    "JsonInput": "records",
    "JsonMapping": "records",
    "JsonObject": "records",
    "JsonValue": "records",
    "KeyOf": "message_keys",
    "Lease": "change_feed",
    "LeaseStore": "change_feed",
    "LeaseTable": "change_feed",
    "LocalCache": "cache",
    "LockRenewal": "budgets",
    "MessageActionsSettler": "servicebus",
    "Outcome": "decisions",
    "PayloadMismatchError": "exceptions",
    "PayloadOf": "message_keys",
    "PreviouslyFailedError": "exceptions",
    "ReceiverSettler": "servicebus",
    "Record": "records",
    "RecordChangedError": "exceptions",
    "RecordExistsError": "exceptions",
    "RecordRead": "records",
    "RecordShape": "cosmos",
    "RecordStatus": "records",
    "RecordStore": "ports",
    "Refused": "exceptions",
    "Rejected": "exceptions",
    "Retention": "retention",
    "RetentionError": "exceptions",
    "Retrier": "backoff",
    "RetryLater": "exceptions",
    "Retry": "backoff",
    "Settleable": "decisions",
    "Settlement": "decisions",
    "Settler": "decisions",
    "Stamp": "records",
    "Store": "ports",
    "StoreError": "exceptions",
    "StoreRefusedError": "exceptions",
    "StoredDocument": "records",
    "Telemetry": "telemetry",
    "Transient": "transient",
    "TransientStoreError": "exceptions",
    "TwoPhaseResult": "orchestrator",
    "Worker": "worker",
    "WorkerOptions": "worker",
    "WorkerStats": "worker",
    "AdjustmentRule": "orchestrator",
    "apply_version": "orchestrator",
    "cloud_event_key": "message_keys",
    "create_entity": "orchestrator",
    "create_or_compare": "orchestrator",
    "decision_for_error": "decisions",
    "exactly_once": "servicebus",
    "fingerprint": "records",
    "from_message": "message_keys",
    "idempotent": "functions",
    "inbox_batch": "orchestrator",
    "is_transient": "transient",
    "leases_to_take": "change_feed",
    "message_id_key": "message_keys",
    "original_message_id": "delayed_retries",
    "run_session_worker": "worker",
    "run_worker": "worker",
    "settle": "decisions",
    "update_fenced": "orchestrator",
}

__all__ = [
    "AdjustmentRule",
    "Backoff",
    "BudgetError",
    "ChangeFeed",
    "ChangeFeedProcessor",
    "ChangeHandler",
    "ChangePage",
    "Claims",
    "CompletionFailedError",
    "CompletionRetries",
    "CopyScheduler",
    "CoreRecordShape",
    "CosmosChangeFeed",
    "CosmosLeaseStore",
    "CosmosStore",
    "DeadLetterReason",
    "Decision",
    "DelayedRetries",
    "Delivered",
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
    "KeyOf",
    "Lease",
    "LeaseStore",
    "LeaseTable",
    "LocalCache",
    "LockRenewal",
    "MessageActionsSettler",
    "Outcome",
    "PayloadMismatchError",
    "PayloadOf",
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
    "Retention",
    "RetentionError",
    "Retrier",
    "Retry",
    "RetryLater",
    "Settleable",
    "Settlement",
    "Settler",
    "Stamp",
    "Store",
    "StoreError",
    "StoreRefusedError",
    "StoredDocument",
    "Telemetry",
    "Transient",
    "TransientStoreError",
    "TwoPhaseResult",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "apply_version",
    "cloud_event_key",
    "create_entity",
    "create_or_compare",
    "decision_for_error",
    "exactly_once",
    "fingerprint",
    "from_message",
    "idempotent",
    "inbox_batch",
    "is_transient",
    "leases_to_take",
    "message_id_key",
    "original_message_id",
    "run_session_worker",
    "run_worker",
    "settle",
    "update_fenced",
]


def __getattr__(name: str) -> Any:
    """The public name from its module, imported now (and kept, so this runs once a name)."""
    module = _MODULE_OF.get(name)
    if module is None:
        # Not ours to resolve: `from exactly_once import cosmos` then imports the submodule.
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
