"""Cost of idempotency on the wire: one Cosmos request per new order, two per duplicate.

Counts every HTTP request the real SDK sends (an azure-core raw request hook), once the client
is warm (its one-time account and container metadata reads excluded).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from fakes import new_write
from servers import CosmosServer

from orders.adapters.cosmos_store import CosmosOrderStore
from orders.domain.documents import OrderAlreadyExistsError


class RequestLog:
    def __init__(self) -> None:
        self.requests: list[str] = []

    def __call__(self, request: Any) -> None:
        self.requests.append(f"{request.http_request.method} {request.http_request.url}")

    def count_during(self) -> RequestLog:
        self.requests.clear()
        return self


@pytest.fixture(params=["python-emulator", "vercel"])
async def counted_store(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[CosmosOrderStore, RequestLog]]:
    fixture = "vercel_cosmos" if request.param == "vercel" else "python_cosmos"
    server: CosmosServer = request.getfixturevalue(fixture)
    log = RequestLog()
    async with CosmosClient(server.endpoint, credential=server.key, raw_request_hook=log) as client:
        database = await client.create_database_if_not_exists("requestcount")
        container = await database.create_container_if_not_exists(
            id="orders", partition_key=PartitionKey(path="/orderId"), default_ttl=-1
        )
        store = CosmosOrderStore(container)
        await store.create_order(new_write(f"warmup-{uuid.uuid4().hex}"))  # warms SDK caches
        yield store, log


async def test_a_new_order_costs_exactly_one_request(
    counted_store: tuple[CosmosOrderStore, RequestLog],
) -> None:
    store, log = counted_store
    write = new_write(f"count-{uuid.uuid4().hex[:12]}")

    log.count_during()
    await store.create_order(write)

    assert len(log.requests) == 1, log.requests
    assert log.requests[0].startswith("POST ")


async def test_a_duplicate_costs_at_most_two_requests(
    counted_store: tuple[CosmosOrderStore, RequestLog],
) -> None:
    store, log = counted_store
    write = new_write(f"count-{uuid.uuid4().hex[:12]}")
    await store.create_order(write)

    log.count_during()
    with pytest.raises(OrderAlreadyExistsError):
        await store.create_order(write)

    assert len(log.requests) == 2, log.requests
    assert log.requests[0].startswith("POST ") and log.requests[1].startswith("GET ")
