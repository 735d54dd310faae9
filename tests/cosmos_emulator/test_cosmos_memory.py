"""A stored document costs about its JSON size in memory, not several times it (issue 46).

The store keeps each item as its compact JSON text, deflated (parsed where it is read), and a
whole key's change-feed scope is listed from its partition instead of an index per partition.
Before, a parsed document and its per-partition index cost 6.6 times the document's JSON text
(a soak of `orders up`: 26 KB of memory per order for 7 KB on disk).
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

from azure.cosmos import CosmosClient, PartitionKey

from cosmos_emulator import start_in_background

DOCUMENTS = 300
# What an item may keep per byte of its stored JSON text: the deflated text plus its id and
# etag. Measured 0.9; a parsed document was 5.7.
MAX_BYTES_PER_JSON_BYTE = 1.2


def _deep_size(value: object, seen: set[int]) -> int:
    """Bytes held by `value` and everything it refers to (each object counted once)."""
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, list | tuple):
        size += sum(_deep_size(v, seen) for v in value)
    elif not isinstance(value, str | bytes | int | float | bool) and value is not None:
        for name in getattr(type(value), "__slots__", ()):
            size += _deep_size(getattr(value, name, None), seen)
        size += _deep_size(getattr(value, "__dict__", {}), seen)
    return size


def _order(number: int) -> dict[str, Any]:
    order_id = str(uuid.uuid4())
    at = "2026-12-07T18:00:00.000000+00:00"
    return {
        "id": order_id,
        "pk": order_id,
        "customerId": f"customer-{number % 50}",
        "status": "created",
        "history": [{"status": s, "at": at, "eventId": str(uuid.uuid4())} for s in ("a", "b")],
        "lines": [
            {"sku": f"sku-{j}", "quantity": j + 1, "price": {"amount": "12.50", "currency": "EUR"}}
            for j in range(4)
        ],
    }


def test_a_stored_document_is_kept_at_close_to_its_json_size() -> None:
    with start_in_background("127.0.0.1", 0) as emu:
        client = CosmosClient(emu.url, emu.key)
        database = client.create_database("memory")
        container = database.create_container("orders", PartitionKey("/pk"))
        stored = []
        for number in range(DOCUMENTS):
            document = _order(number)
            container.upsert_item(document)
            document["status"] = "paid"  # a replace: only the new version stays
            stored.append(container.upsert_item(document))
        store = emu._core.store
        with store.lock:
            kept = store.find_container("memory", "orders")
            items = [item for part in kept.partitions.values() for item in part.values()]
            item_bytes = _deep_size(items, set()) - sys.getsizeof(items)
            per_partition_indexes = len(kept.scoped_feeds)
            # What a read serves is what was written (the text parses back to it).
            assert sorted(i.doc["id"] for i in items) == sorted(d["id"] for d in stored)
    json_bytes = sum(len(json.dumps(d, separators=(",", ":"))) for d in stored)
    print(f"{item_bytes / DOCUMENTS:.0f} bytes kept per document of {json_bytes / DOCUMENTS:.0f}")
    assert len(items) == DOCUMENTS
    assert item_bytes / json_bytes <= MAX_BYTES_PER_JSON_BYTE
    # A whole key's change-feed scope is its partition: no index of its own per partition.
    assert per_partition_indexes == 0
