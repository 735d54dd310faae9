"""Create, read-with-the-database's-clock and If-Match replace: leases, inbox records and the
order document's saga decisions."""

from __future__ import annotations

from typing import Any

from azure.core import MatchConditions
from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from exactly_once.cosmos import user_fields
from exactly_once.records import StoredDocument
from orders.adapters.cosmos_errors import (
    fenced_write,
    read_document,
    store_error_for,
    store_errors,
)
from orders.domain.leases import DatabaseRead
from orders.exceptions import DocumentExistsError, LeaseLostError

# One request answers both "what is stored" and "what time is it for the database".
_READ_WITH_CLOCK = "SELECT c AS doc, GetCurrentTimestamp() AS now FROM c WHERE c.id = @id"


class CosmosFencedDocuments:
    """`FencedDocuments`, `InboxStore` and `OrderDocuments` over one container."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def get(self, document_id: str, partition_key: str) -> dict[str, Any] | None:
        return await read_document(self._container, document_id, partition_key)

    async def get_stored(self, document_id: str, partition_key: str) -> StoredDocument | None:
        found = await read_document(self._container, document_id, partition_key)
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
        documents = [replaced, *created]
        with store_errors():
            try:
                await self._container.execute_item_batch(
                    batch_operations=operations, partition_key=partition_key
                )
            except cosmos_errors.CosmosBatchOperationError as exc:
                status, index = _failed_operation(exc)
                if status in (404, 412):
                    raise LeaseLostError(f"{replaced['id']!r} changed since it was read") from exc
                if status == 409:
                    raise _exists(documents, index) from exc
                raise store_error_for(status, f"batch operation {index} failed") from exc

    async def create(self, document: dict[str, Any]) -> dict[str, Any]:
        with store_errors():
            try:
                return await self._container.create_item(body=document)
            except cosmos_errors.CosmosResourceExistsError as exc:
                raise _exists([document], 0) from exc

    async def read(self, document_id: str, partition_key: str) -> DatabaseRead:
        with store_errors():
            rows = [
                row
                async for row in self._container.query_items(
                    _READ_WITH_CLOCK,
                    parameters=[{"name": "@id", "value": document_id}],
                    partition_key=partition_key,
                )
            ]
        if not rows:
            return DatabaseRead(None, 0)
        return DatabaseRead(rows[0]["doc"], int(rows[0]["now"]))

    async def replace(self, document: dict[str, Any], *, etag: str) -> dict[str, Any]:
        with fenced_write(f"{document['id']!r} changed since it was read"):
            return await self._container.replace_item(
                item=document["id"],
                body=document,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )

    async def delete(self, document_id: str, partition_key: str, *, etag: str) -> None:
        with fenced_write(f"{document_id!r} changed since it was read"):
            await self._container.delete_item(
                item=document_id,
                partition_key=partition_key,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )

    async def create_together(self, partition_key: str, documents: list[dict[str, Any]]) -> None:
        operations: list[tuple[str, tuple[Any, ...]]] = [
            ("create", (document,)) for document in documents
        ]
        with store_errors():
            try:
                await self._container.execute_item_batch(
                    batch_operations=operations, partition_key=partition_key
                )
            except cosmos_errors.CosmosBatchOperationError as exc:
                status, index = _failed_operation(exc)
                if status == 409:
                    raise _exists(documents, index) from exc
                raise store_error_for(status, f"batch operation {index} failed") from exc
            except cosmos_errors.CosmosHttpResponseError as exc:
                # A gateway may answer a failed batch with the failing status on the response.
                if exc.status_code == 409:
                    raise _exists(documents, 0) from exc
                raise


def _exists(documents: list[dict[str, Any]], index: int) -> DocumentExistsError:
    document_id = str(documents[index]["id"])
    return DocumentExistsError(f"{document_id!r} exists", document_id=document_id, index=index)


def _failed_operation(exc: cosmos_errors.CosmosBatchOperationError) -> tuple[int, int]:
    """(status, index) of the operation that failed the batch."""
    responses = exc.operation_responses or []
    index = exc.error_index or 0
    found = responses[index].get("statusCode") if index < len(responses) else None
    return (int(found) if found is not None else exc.status_code or 500), index
