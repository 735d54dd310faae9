"""Reading a stored order back for GET: one partition-scoped query over /orderId."""

from __future__ import annotations

from typing import Any

from azure.cosmos.aio import ContainerProxy

from exactly_once.cosmos import store_errors


class CosmosOrderReader:
    """`OrderReader` over the consumer's container (partition key `/orderId`)."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def read_order_documents(self, order_id: str) -> list[dict[str, Any]]:
        # One request for the order and its lines: they share the partition. An unknown order
        # is an empty partition; a 404 here means a wrong database or container name.
        with store_errors():
            return [
                document
                async for document in self._container.query_items(
                    "SELECT * FROM c", partition_key=order_id
                )
            ]
