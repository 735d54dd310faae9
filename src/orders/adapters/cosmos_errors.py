"""Cosmos SDK failures as the app's own exceptions, for every Cosmos adapter of the app.

The translation itself is the `exactly_once` core's (`exactly_once.cosmos`): one set of transient
statuses, one If-Match write, one point read, one read with the database's clock. Here it is
only bound to the app's exceptions (`ORDERS_ERRORS`), so that `except TransientStoreError`,
`LeaseLostError` and `StoreError` in the app keep meaning what they say.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from azure.cosmos.aio import ContainerProxy

from exactly_once import cosmos as core
from exactly_once.cosmos import user_fields
from exactly_once.records import Stamp
from orders.domain.leases import DatabaseRead, StampedDocument
from orders.exceptions import LeaseLostError, StoreError, StoreRefusedError, TransientStoreError

ORDERS_ERRORS = core.ErrorKinds(
    failure=StoreError,
    transient=TransientStoreError,
    changed=LeaseLostError,
    refused=StoreRefusedError,
)
is_transient_status = core.is_transient_status
failed_operation = core.failed_operation
BATCH_ERRORS = core.BATCH_ERRORS
if_match = core.if_match


def store_error_for(status: int | None, message: str) -> Exception:
    """A failed status as the app's `TransientStoreError` or `StoreError`."""
    return core.store_error_for(status, message, ORDERS_ERRORS)


def store_errors() -> AbstractContextManager[None]:
    """Translate what the block's SDK calls raise; expected statuses are caught inside it."""
    return core.store_errors(ORDERS_ERRORS)


def fenced_write(lost: str) -> AbstractContextManager[None]:
    """An If-Match write: a moved ETag (412) or a missing item (404) is `LeaseLostError(lost)`,
    anything else as `store_errors` says."""
    return core.if_match_write(lost, ORDERS_ERRORS)


async def read_document(
    container: ContainerProxy, item_id: str, partition_key: str
) -> dict[str, Any] | None:
    """Point read (the cheapest Cosmos request); None when the item does not exist."""
    return await core.point_read(container, item_id, partition_key, ORDERS_ERRORS)


async def read_with_clock(
    container: ContainerProxy, item_id: str, partition_key: str
) -> DatabaseRead:
    """The stored item (or None) and the database's time, in one request."""
    found = await core.read_with_clock(container, item_id, partition_key, ORDERS_ERRORS)
    return DatabaseRead(None, 0) if found is None else DatabaseRead(stamped(found[0]), found[1])


def stamped(stored: dict[str, Any]) -> StampedDocument:
    """A stored item's own fields, and its ETag and write time (`_etag`, `_ts`) apart."""
    return StampedDocument(
        body=user_fields(stored), stamp=Stamp(str(stored["_etag"]), int(stored.get("_ts", 0)))
    )


__all__ = [
    "BATCH_ERRORS",
    "ORDERS_ERRORS",
    "failed_operation",
    "fenced_write",
    "if_match",
    "is_transient_status",
    "read_document",
    "read_with_clock",
    "stamped",
    "store_error_for",
    "store_errors",
]
