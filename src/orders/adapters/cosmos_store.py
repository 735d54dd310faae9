"""Order store on Cosmos DB for NoSQL (async SDK): one transactional batch per new order."""

from __future__ import annotations

from typing import Any

from azure.cosmos.aio import ContainerProxy

from exactly_once.cosmos import (
    BATCH_ERRORS,
    failed_operation,
    point_read,
    store_error_for,
    store_errors,
)
from exactly_once.exceptions import StoreError, TransientStoreError
from orders.adapters.cosmos_layout import order_record, rejection_document
from orders.domain.documents import OrderAlreadyExistsError, OrderRecord, OrderWrite
from orders.domain.rejections import OrderRejection


class CosmosOrderStore:
    """`OrderStore` over one container partitioned by `/orderId`."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def create_order(self, write: OrderWrite) -> None:
        operations: list[tuple[str, tuple[Any, ...]]] = [
            ("create", (document,)) for document in write.documents
        ]
        with store_errors():
            try:
                await self._container.execute_item_batch(
                    batch_operations=operations, partition_key=write.order_id
                )
                return
            except BATCH_ERRORS as exc:
                # A gateway may answer a failed batch with the failing status on the response.
                status, index = failed_operation(exc)
                if index != 0 or status != 409:
                    raise store_error_for(status, f"batch operation {index} failed") from exc
        # The order document exists: the one case that reads, to return the stored record.
        raise await self._conflict(write.order_id)

    async def read_order(self, order_id: str) -> OrderRecord | None:
        document = await point_read(self._container, order_id, order_id)
        if document is None:
            return None
        return order_record(document)

    async def record_rejection(self, rejection: OrderRejection) -> None:
        with store_errors():
            await self._container.upsert_item(body=rejection_document(rejection))

    async def _conflict(self, order_id: str) -> StoreError | OrderAlreadyExistsError:
        existing = await self.read_order(order_id)
        if existing is None:
            # 409 then 404: the order vanished in between (deleted or expired); let the
            # broker redeliver and the create decide again.
            return TransientStoreError(f"order {order_id!r} conflicted but could not be read")
        return OrderAlreadyExistsError(existing)
