"""Create, read-with-the-database's-clock and If-Match replace: leases, inbox records and the
order document's saga decisions. Every SDK call is translated by the core's one translation
(`exactly_once.cosmos`), into the core's exceptions."""

from __future__ import annotations

from typing import Any

from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from exactly_once.cosmos import (
    BATCH_ERRORS,
    failed_operation,
    if_match,
    if_match_write,
    point_read,
    store_error_for,
    store_errors,
    user_fields,
)
from exactly_once.exceptions import DocumentExistsError, RecordChangedError
from exactly_once.records import StoredDocument
from orders.adapters.cosmos_errors import read_with_clock, stamped
from orders.domain.leases import DatabaseRead, StampedDocument


class CosmosFencedDocuments:
    """`FencedDocuments` (billing's records) and `OrderDocuments` (the saga) over one
    container; the consumers' own documents go through the core's `CosmosStore`."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def get_stored(self, document_id: str, partition_key: str) -> StoredDocument | None:
        found = await point_read(self._container, document_id, partition_key)
        if found is None:
            return None
        return StoredDocument(body=user_fields(found), etag=str(found["_etag"]))

    async def replace_and_create(
        self,
        partition_key: str,
        replaced: dict[str, Any],
        *,
        etag: str,
        created: list[dict[str, Any]],
    ) -> None:
        operations: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            ("replace", (replaced["id"], replaced), {"if_match_etag": etag}),
            *(("create", (document,), {}) for document in created),
        ]
        await self._batch(partition_key, operations, [replaced, *created])

    async def create(self, document: dict[str, Any]) -> StampedDocument:
        with store_errors():
            try:
                return stamped(await self._container.create_item(body=document))
            except cosmos_errors.CosmosResourceExistsError as exc:
                raise _exists([document], 0) from exc

    async def read(self, document_id: str, partition_key: str) -> DatabaseRead:
        return await read_with_clock(self._container, document_id, partition_key)

    async def replace(self, document: dict[str, Any], *, etag: str) -> StampedDocument:
        with if_match_write(f"{document['id']!r} changed since it was read"):
            return stamped(
                await self._container.replace_item(
                    item=document["id"], body=document, **if_match(etag)
                )
            )

    async def delete(self, document_id: str, partition_key: str, *, etag: str) -> None:
        with if_match_write(f"{document_id!r} changed since it was read"):
            await self._container.delete_item(
                item=document_id, partition_key=partition_key, **if_match(etag)
            )

    async def _batch(
        self,
        partition_key: str,
        operations: list[tuple[str, tuple[Any, ...], dict[str, Any]]],
        documents: list[dict[str, Any]],
    ) -> None:
        """One transactional batch, the first document replaced If-Match: its moved ETag is a
        lost lease; a conflict names the created document and its position."""
        with store_errors():
            try:
                await self._container.execute_item_batch(
                    batch_operations=operations, partition_key=partition_key
                )
            except BATCH_ERRORS as exc:
                status, index = failed_operation(exc)
                if status in (404, 412):
                    raise RecordChangedError(
                        f"{documents[0]['id']!r} changed since it was read"
                    ) from exc
                if status == 409:
                    raise _exists(documents, index) from exc
                raise store_error_for(status, f"batch operation {index} failed") from exc


def _exists(documents: list[dict[str, Any]], index: int) -> DocumentExistsError:
    document_id = str(documents[index]["id"])
    return DocumentExistsError(document_id, index)
