"""Reading a stored order back for GET: one partition-scoped query over /orderId."""

from __future__ import annotations

from typing import Any

from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from orders.adapters.cosmos_errors import store_errors


class CosmosOrderReader:
    """`OrderReader` over the consumer's container (partition key `/orderId`)."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def read_order_documents(self, order_id: str) -> list[dict[str, Any]]:
        with store_errors():
            try:
                # One request for the order and its lines: they share the partition.
                return [
                    document
                    async for document in self._container.query_items(
                        "SELECT * FROM c", partition_key=order_id
                    )
                ]
            except cosmos_errors.CosmosResourceNotFoundError:
                return []
