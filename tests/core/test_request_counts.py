"""What each mechanism costs on the wire, as the README's table says: every HTTP request the real
SDK sends is counted (an azure-core raw request hook), once the client is warm."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from core_support import unique
from servers import CosmosServer

from exactly_once import CosmosStore, Effects, Outcome


class RequestLog:
    def __init__(self) -> None:
        self.requests: list[str] = []

    def __call__(self, request: Any) -> None:
        self.requests.append(f"{request.http_request.method} {request.http_request.url}")


@pytest.fixture
async def counted(python_cosmos: CosmosServer) -> AsyncIterator[tuple[CosmosStore, RequestLog]]:
    log = RequestLog()
    async with CosmosClient(
        python_cosmos.endpoint, credential=python_cosmos.key, raw_request_hook=log
    ) as client:
        database = await client.create_database_if_not_exists("core")
        container = await database.create_container_if_not_exists(
            id="counted", partition_key=PartitionKey(path="/pk"), default_ttl=-1
        )
        store = CosmosStore(container)
        # Warm the SDK's caches (account, container and partition metadata) on every path.
        warm = bound(store, unique("warm"))
        await warm.inbox(unique("p"), [{"id": "x"}])
        await warm.inbox(unique("p"), [])
        await warm.two_phase(unique("p"), answer)
        await warm.apply_version(unique("p"), "doc", 1, lambda _: {})
        yield store, log


def bound(store: CosmosStore, message_id: str) -> Effects:
    return Effects(
        consumer="counted",
        message_id=message_id,
        request_hash="hash",
        records=store,
        documents=store,
        owner="worker",
    )


async def answer(key: str) -> str:
    return f"answer for {key}"


async def requests_of(log: RequestLog, step: Any) -> tuple[Any, int]:
    log.requests.clear()
    result = await step
    return result, len(log.requests)


async def test_each_mechanism_costs_what_the_readme_says(
    counted: tuple[CosmosStore, RequestLog],
) -> None:
    store, log = counted
    message, partition = f"m-{uuid.uuid4().hex[:8]}", unique("p")
    effects = bound(store, message)
    entity = {"id": f"entity-{message}"}

    assert await requests_of(log, effects.create_entity(partition, entity)) == (
        Outcome.PROCESSED,
        1,
    )
    assert await requests_of(log, effects.create_entity(partition, entity)) == (
        Outcome.DUPLICATE,
        2,
    )
    assert await requests_of(log, effects.inbox(partition, [{"id": f"doc-{message}"}])) == (
        Outcome.PROCESSED,
        1,
    )
    assert await requests_of(log, effects.inbox(partition, [{"id": f"doc-{message}"}])) == (
        Outcome.DUPLICATE,
        2,
    )
    first, first_count = await requests_of(log, effects.two_phase(partition, answer))
    again, again_count = await requests_of(log, effects.two_phase(partition, answer))
    assert (first.outcome, first_count) == (Outcome.PROCESSED, 2)
    assert (again.outcome, again_count) == (Outcome.DUPLICATE, 2)
    assert await requests_of(log, effects.apply_version(partition, "v", 2, lambda _: {})) == (
        Outcome.PROCESSED,
        2,
    )
    assert await requests_of(log, effects.apply_version(partition, "v", 2, lambda _: {})) == (
        Outcome.STALE,
        1,
    )
