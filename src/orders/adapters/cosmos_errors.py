"""Reads of stamped documents for the app's Cosmos adapters.

The translation of SDK failures is the core's alone (`exactly_once.cosmos`: `store_errors`,
`if_match_write`, `store_error_for`, `failed_operation`), raising the core's exceptions; this
module only shapes the core's read with the database's clock into the app's `DatabaseRead`.
"""

from __future__ import annotations

from typing import Any

from azure.cosmos.aio import ContainerProxy

from exactly_once import cosmos as core
from exactly_once.cosmos import user_fields
from exactly_once.records import Stamp
from orders.domain.leases import DatabaseRead, StampedDocument


async def read_with_clock(
    container: ContainerProxy, item_id: str, partition_key: str
) -> DatabaseRead:
    """The stored item (or None) and the database's time, in one request."""
    found = await core.read_with_clock(container, item_id, partition_key)
    return DatabaseRead(None, 0) if found is None else DatabaseRead(stamped(found[0]), found[1])


def stamped(stored: dict[str, Any]) -> StampedDocument:
    """A stored item's own fields, and its ETag and write time (`_etag`, `_ts`) apart."""
    return StampedDocument(
        body=user_fields(stored), stamp=Stamp(str(stored["_etag"]), int(stored.get("_ts", 0)))
    )


__all__ = ["read_with_clock", "stamped"]
