"""Cost of idempotency on the wire: one Cosmos request per new order, two per duplicate.

The order consumer as every host runs it, over the core's document store on the orders
container. Counts every HTTP request the real SDK sends (an azure-core raw request hook), once
the client is warm (its one-time account and container metadata reads excluded).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from fakes import LAYOUT, order_payload
from servers import CosmosServer

from exactly_once.decisions import Outcome
from orders.adapters.cosmos_client import order_partitioned_store
from orders.domain.received import ReceivedOrderMessage
from orders.service.consumer import OrderConsumer


def order_message(order_id: str) -> ReceivedOrderMessage:
    return ReceivedOrderMessage(json.dumps(order_payload(order_id)).encode(), order_id)


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
) -> AsyncIterator[tuple[OrderConsumer, RequestLog]]:
    fixture = "vercel_cosmos" if request.param == "vercel" else "python_cosmos"
    server: CosmosServer = request.getfixturevalue(fixture)
    log = RequestLog()
    async with CosmosClient(server.endpoint, credential=server.key, raw_request_hook=log) as client:
        database = await client.create_database_if_not_exists("requestcount")
        container = await database.create_container_if_not_exists(
            id="orders", partition_key=PartitionKey(path="/orderId"), default_ttl=-1
        )
        consumer = OrderConsumer(order_partitioned_store(container), LAYOUT)
        await consumer.handle(order_message(f"warmup-{uuid.uuid4().hex}"))  # warms SDK caches
        yield consumer, log


async def test_a_new_order_costs_exactly_one_request(
    counted_store: tuple[OrderConsumer, RequestLog],
) -> None:
    consumer, log = counted_store
    message = order_message(f"count-{uuid.uuid4().hex[:12]}")

    log.count_during()
    decision = await consumer.handle(message)

    assert decision.outcome is Outcome.PROCESSED
    assert len(log.requests) == 1, log.requests
    assert log.requests[0].startswith("POST ")


async def test_a_duplicate_costs_at_most_two_requests(
    counted_store: tuple[OrderConsumer, RequestLog],
) -> None:
    consumer, log = counted_store
    message = order_message(f"count-{uuid.uuid4().hex[:12]}")
    await consumer.handle(message)

    log.count_during()
    decision = await consumer.handle(message)

    assert decision.outcome is Outcome.DUPLICATE
    assert len(log.requests) == 2, log.requests
    assert log.requests[0].startswith("POST ") and log.requests[1].startswith("GET ")
