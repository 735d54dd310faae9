"""exactly_once: exactly-once effects for Azure Service Bus consumers, on Cosmos DB.

The broker delivers at least once; this package makes the effect of each message happen once.
See README.md in this folder for the guide.

The top level holds what a consumer needs: the decorator and its options, the mechanisms, the
outcomes, the errors, the store. The rest is grouped by task in public submodules, each with
its own `__all__`: `servicebus` (hosts and settlers), `worker` (a worker of your own),
`retries` and `delayed_retries`, `decisions` (settling a decision yourself), `options`,
`exceptions` (every error),
`store` (the port for a store of your own, the records, the mechanisms on documents of your
own shape), `cosmos`, `keys` and `http` (`Idempotency-Key`), `change_feed` and
`cosmos_change_feed`, `telemetry`. The modules whose names start with an underscore are the
implementation and may change in any release (the guide's "Layout" lists both).

Importing the package is cheap: each public name is imported from its module on first use (PEP
562), so a program that needs the records, decisions or exceptions alone never loads the Azure
SDKs (the Cosmos store and the Service Bus parts import them).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exactly_once._backoff import Backoff
    from exactly_once._cache import LocalCache
    from exactly_once._functions import idempotent
    from exactly_once._message_keys import Delivered, cloud_event_key, from_message, message_id_key
    from exactly_once._orchestrator import AdjustmentRule, Effects, TwoPhaseResult
    from exactly_once._ports import Store
    from exactly_once._retention import Retention
    from exactly_once.cosmos import CosmosStore
    from exactly_once.decisions import DeadLetterReason, Decision, Outcome
    from exactly_once.delayed_retries import DelayedRetries
    from exactly_once.exceptions import (
        BudgetError,
        ExactlyOnceError,
        InProgressElsewhereError,
        PayloadMismatchError,
        PreviouslyFailedError,
        Refused,
        Rejected,
        RetentionError,
        RetryLater,
        StoreError,
        TransientStoreError,
    )
    from exactly_once.options import ConsumerOptions
    from exactly_once.servicebus import ExactlyOnceConsumer, exactly_once

# Public name -> the module of the package that defines it.
_MODULE_OF: dict[str, str] = {
    # The consumer: the decorator, what it builds, its options.
    "exactly_once": "servicebus",
    "ExactlyOnceConsumer": "servicebus",
    "ConsumerOptions": "options",
    # The mechanisms, bound to one message, and what they return.
    "Effects": "_orchestrator",
    "TwoPhaseResult": "_orchestrator",
    "AdjustmentRule": "_orchestrator",
    "Outcome": "decisions",
    "Decision": "decisions",
    "DeadLetterReason": "decisions",
    # A message's key.
    "Delivered": "_message_keys",
    "message_id_key": "_message_keys",
    "from_message": "_message_keys",
    "cloud_event_key": "_message_keys",
    # The errors: what an effect raises, what the core raises.
    "ExactlyOnceError": "exceptions",
    "Refused": "exceptions",
    "Rejected": "exceptions",
    "RetryLater": "exceptions",
    "PayloadMismatchError": "exceptions",
    "PreviouslyFailedError": "exceptions",
    "InProgressElsewhereError": "exceptions",
    "StoreError": "exceptions",
    "TransientStoreError": "exceptions",
    "RetentionError": "exceptions",
    "BudgetError": "exceptions",
    # The store, how long it keeps records, and the options' other values.
    "CosmosStore": "cosmos",
    "Store": "_ports",
    "Retention": "_retention",
    "Backoff": "_backoff",
    "DelayedRetries": "delayed_retries",
    "LocalCache": "_cache",
    # Any async function made idempotent.
    "idempotent": "_functions",
}

__all__ = [
    "AdjustmentRule",
    "Backoff",
    "BudgetError",
    "ConsumerOptions",
    "CosmosStore",
    "DeadLetterReason",
    "Decision",
    "DelayedRetries",
    "Delivered",
    "Effects",
    "ExactlyOnceConsumer",
    "ExactlyOnceError",
    "InProgressElsewhereError",
    "LocalCache",
    "Outcome",
    "PayloadMismatchError",
    "PreviouslyFailedError",
    "Refused",
    "Rejected",
    "Retention",
    "RetentionError",
    "RetryLater",
    "Store",
    "StoreError",
    "TransientStoreError",
    "TwoPhaseResult",
    "cloud_event_key",
    "exactly_once",
    "from_message",
    "idempotent",
    "message_id_key",
]

# 0.1's top-level names that 0.2 keeps in a public submodule: still importable from here, with a
# DeprecationWarning that names the new home (the CHANGELOG lists them).
_MOVED: dict[str, str] = {
    **dict.fromkeys(
        ["ChangeFeed", "ChangeFeedProcessor", "ChangeHandler", "ChangePage", "Lease"],
        "change_feed",
    ),
    **dict.fromkeys(["LeaseStore", "LeaseTable", "leases_to_take"], "change_feed"),
    **dict.fromkeys(["CosmosChangeFeed", "CosmosLeaseStore"], "cosmos_change_feed"),
    **dict.fromkeys(["CoreRecordShape", "RecordShape"], "cosmos"),
    **dict.fromkeys(
        ["Settleable", "Settlement", "Settler", "decision_for_error", "settle"], "decisions"
    ),
    **dict.fromkeys(["MessageActionsSettler", "ReceiverSettler"], "servicebus"),
    **dict.fromkeys(
        ["Handle", "Worker", "WorkerOptions", "WorkerStats", "run_session_worker", "run_worker"],
        "worker",
    ),
    **dict.fromkeys(
        [
            "LockRenewal",
            "Retrier",
            "Retry",
            "Transient",
            "is_transient",
        ],
        "retries",
    ),
    **dict.fromkeys(["CopyScheduler", "original_message_id"], "delayed_retries"),
    **dict.fromkeys(["CompletionRetries", "KeyOf", "PayloadOf"], "options"),
    **dict.fromkeys(
        [
            "Claims",
            "CompletionFailedError",
            "DocumentCreator",
            "DocumentExistsError",
            "DocumentStore",
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
            "StoreRefusedError",
            "StoredDocument",
            "apply_version",
            "fingerprint",
            "update_fenced",
        ],
        "store",
    ),
    "Telemetry": "telemetry",
}
# 0.1's names that 0.2 folded into another: what to call instead.
_REMOVED: dict[str, str] = {
    "create_entity": "exactly_once.store.create_or_find (the entity, stamped, as the marker)",
    "create_or_compare": "exactly_once.store.create_or_find (its `stored`)",
    "inbox_batch": "exactly_once.store.create_or_find (the inbox record as the marker)",
}


def __getattr__(name: str) -> Any:
    """The public name from its module, imported now (and kept, so this runs once a name)."""
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
    moved = _MOVED.get(name)
    if moved is not None:
        warnings.warn(
            f"exactly_once.{name} moved to exactly_once.{moved}.{name} in 0.2",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"{__name__}.{moved}"), name)
    if name in _REMOVED:
        raise AttributeError(f"exactly_once.{name} was removed in 0.2: use {_REMOVED[name]}")
    # Not ours to resolve: `from exactly_once import cosmos` then imports the submodule.
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
