"""The `exactly_once` core's `DocumentStore` over the app's own document ports.

The order consumer, shipping and status run the core's mechanisms (`create_entity`,
`inbox_batch`, `apply_version`) on the documents they have always written, in the shapes the
console, `orders verify`, the CLI and the dead-letter tools read: these classes only shape the
app's ports into the core's (the ports already raise the core's exceptions).
"""

from __future__ import annotations

from collections.abc import Sequence

from exactly_once.exceptions import DocumentExistsError
from exactly_once.records import JsonMapping, JsonObject, StoredDocument
from orders.domain.documents import OrderAlreadyExistsError, OrderRecord, OrderWrite
from orders.service.ports import FencedBatches, OrderStore

# The order store hands over an order's request hash, never a version: nothing replaces an
# order through it, so its documents carry no ETag to match.
_NO_ETAG = ""


def _order_body(record: OrderRecord) -> JsonObject:
    return {"id": record.order_id, "orderId": record.order_id, "requestHash": record.request_hash}


class OrderDocumentStore:
    """The core's `DocumentCreator` over the `OrderStore` (an order is written once, never
    replaced by its consumer, so it has no `replace`): one batch per new order, and a
    conflict that carries the stored order's request hash (so a duplicate costs the batch and
    the store's one read, P2 = 2)."""

    def __init__(self, store: OrderStore) -> None:
        self._store = store

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        """Write the order's documents (order document first) in one transactional batch."""
        order_document = documents[0]
        write = OrderWrite(
            order_id=partition,
            request_hash=str(order_document["requestHash"]),
            documents=tuple(dict(document) for document in documents),
        )
        try:
            await self._store.create_order(write)
        except OrderAlreadyExistsError as conflict:
            found = StoredDocument(_order_body(conflict.existing), _NO_ETAG)
            raise DocumentExistsError(partition, 0, found) from conflict

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        """The stored order's id and request hash (one point read), or None."""
        record = await self._store.read_order(partition)
        if record is None or record.order_id != document_id:
            return None
        return StoredDocument(_order_body(record), _NO_ETAG)


class FencedDocumentStore:
    """The core's `DocumentStore` over fenced documents (the inbox and orders containers)."""

    def __init__(self, documents: FencedBatches) -> None:
        self._documents = documents

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        """Create every document in one transactional batch, all or nothing; a stored one
        raises the core's `DocumentExistsError`."""
        await self._documents.create_together(partition, [dict(document) for document in documents])

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        """One document (its fields, without the store's) and its ETag, or None."""
        return await self._documents.get_stored(document_id, partition)

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> None:
        """Replace If-Match `etag`; the core's `RecordChangedError` when it moved or is gone."""
        await self._documents.replace(dict(document), etag=etag)
