"""The outbox side of the orders container: its change feed (pull model) and the dispatched mark."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from orders.adapters.cosmos_errors import if_match, store_errors
from orders.service.ports import ChangePage


class CosmosOutboxFeed:
    """`OutboxFeed` over the orders container (latest-version change feed)."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def feed_ranges(self) -> list[str]:
        with store_errors():
            ranges = self._container.read_feed_ranges()
            return [json.dumps(feed_range, sort_keys=True) async for feed_range in ranges]

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        with store_errors():
            if continuation is None:
                feed = self._container.query_items_change_feed(
                    feed_range=json.loads(feed_range),
                    start_time="Beginning",
                    max_item_count=max_items,
                )
            else:
                feed = self._container.query_items_change_feed(
                    continuation=continuation, max_item_count=max_items
                )
            documents: list[dict[str, Any]] = []
            async for page in feed.by_page():
                documents = [document async for document in page]
                break
            # The SDK hands the next position out only as the last response's ETag; nothing
            # else uses this client between the read and here (the dispatcher is sequential).
            headers = self._container.client_connection.last_response_headers
            next_position = headers.get("etag") if headers else None
        return ChangePage(documents, str(next_position) if next_position else continuation)

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        marked = {key: value for key, value in document.items() if not key.startswith("_")}
        marked["dispatched"] = True
        marked["dispatchedAt"] = datetime.now(UTC).isoformat()
        with store_errors():
            try:
                await self._container.replace_item(
                    item=document["id"],
                    body=marked,
                    **if_match(document["_etag"]),
                )
            except cosmos_errors.CosmosAccessConditionFailedError:
                return  # another dispatcher marked it (or it changed): nothing left to do
