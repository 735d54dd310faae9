"""Idempotency records on Cosmos DB (container partitioned by /id, per-item ttl).

The create is the claim (409 = the key is taken), and every later write is conditioned on the
ETag the claimant got (If-Match), so a stale attempt can never overwrite a newer owner.
"""

from __future__ import annotations

from typing import Any

from azure.core import MatchConditions
from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from orders.adapters.cosmos_errors import fenced_write, read_document, store_errors
from orders.domain.idempotency import (
    RECORD_DOCUMENT_TYPE,
    IdempotencyRecord,
    IdempotencyRecordExistsError,
    OrderIdClaim,
    RecordStatus,
)
from orders.exceptions import LeaseLostError, TransientStoreError

# A record can vanish between the 409 and the read (released after a failed send, or expired):
# then the create is simply tried again, a few times at most.
CLAIM_ATTEMPTS = 3


class CosmosIdempotencyStore:
    """`IdempotencyStore` over one container partitioned by `/id` (so every record is a point)."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def claim(self, record: IdempotencyRecord) -> IdempotencyRecord:
        for _ in range(CLAIM_ATTEMPTS):
            with store_errors():
                try:
                    stored = await self._container.create_item(body=record.to_document())
                except cosmos_errors.CosmosResourceExistsError:
                    stored = None
            if stored is not None:
                return IdempotencyRecord.from_document(stored)
            existing = await self._read(record.record_id)
            if existing is not None:
                raise IdempotencyRecordExistsError(existing)
        raise TransientStoreError(
            f"idempotency record {record.record_id!r} kept conflicting and vanishing"
        )

    async def take_over(self, record: IdempotencyRecord, *, etag: str) -> IdempotencyRecord:
        return await self._replace(record, etag)

    async def complete(self, record: IdempotencyRecord, *, etag: str) -> IdempotencyRecord:
        return await self._replace(record, etag)

    async def release(self, record_id: str, *, etag: str) -> None:
        with store_errors():
            try:
                await self._container.delete_item(
                    item=record_id,
                    partition_key=record_id,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
            except cosmos_errors.CosmosResourceNotFoundError:
                return
            except cosmos_errors.CosmosAccessConditionFailedError as exc:
                raise LeaseLostError(f"record {record_id!r} changed owner") from exc

    async def claim_order_id(self, claim: OrderIdClaim) -> OrderIdClaim:
        for _ in range(CLAIM_ATTEMPTS):
            with store_errors():
                try:
                    await self._container.create_item(body=claim.to_document())
                    return claim
                except cosmos_errors.CosmosResourceExistsError:
                    pass
            document = await read_document(self._container, claim.document_id, claim.document_id)
            if document is not None:
                return OrderIdClaim.from_document(document)
        raise TransientStoreError(
            f"order claim {claim.document_id!r} kept conflicting and vanishing"
        )

    async def read_order_id_claim(self, order_id: str) -> OrderIdClaim | None:
        document_id = OrderIdClaim(order_id, "").document_id
        document = await read_document(self._container, document_id, document_id)
        return OrderIdClaim.from_document(document) if document is not None else None

    async def find_order(self, scope: str, order_id: str) -> IdempotencyRecord | None:
        # Cross-partition, but only GET of an order that is not stored yet pays for it.
        query = (
            "SELECT * FROM c WHERE c.type = @type AND c.orderId = @orderId "
            "AND c.scope = @scope AND c.status = @status"
        )
        parameters: list[dict[str, Any]] = [
            {"name": "@type", "value": RECORD_DOCUMENT_TYPE},
            {"name": "@orderId", "value": order_id},
            {"name": "@scope", "value": scope},
            {"name": "@status", "value": RecordStatus.COMPLETED.value},
        ]
        with store_errors():
            async for document in self._container.query_items(query, parameters=parameters):
                return IdempotencyRecord.from_document(document)
        return None

    async def _replace(self, record: IdempotencyRecord, etag: str) -> IdempotencyRecord:
        with fenced_write(f"record {record.record_id!r} changed owner"):
            stored = await self._container.replace_item(
                item=record.record_id,
                body=record.to_document(),
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        return IdempotencyRecord.from_document(stored)

    async def read(self, record_id: str) -> IdempotencyRecord | None:
        """A key's record as stored (operators' `orders keys show`)."""
        return await self._read(record_id)

    async def evict(self, record_id: str) -> bool:
        """Delete a key's record whatever its state; False when there was none."""
        with store_errors():
            try:
                await self._container.delete_item(item=record_id, partition_key=record_id)
            except cosmos_errors.CosmosResourceNotFoundError:
                return False
        return True

    async def _read(self, item_id: str) -> IdempotencyRecord | None:
        document = await read_document(self._container, item_id, item_id)
        return IdempotencyRecord.from_document(document) if document is not None else None
