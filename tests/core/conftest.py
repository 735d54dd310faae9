"""Fixtures of the core's tests: a Cosmos container and a Service Bus queue on our emulators,
reached through the real SDKs (the emulators start on free ports)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from core_support import queue_config
from servers import CosmosServer

from exactly_once import CosmosStore
from servicebus_emulator import RunningEmulator, start_in_background


@pytest.fixture
def servicebus() -> Iterator[RunningEmulator]:
    running = start_in_background(config=queue_config())
    yield running
    running.stop()


@pytest.fixture
async def container(python_cosmos: CosmosServer) -> AsyncIterator[ContainerProxy]:
    """A fresh container partitioned by /pk, with TTL on (records may expire)."""
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        database = await client.create_database_if_not_exists("core")
        yield await database.create_container_if_not_exists(
            id=f"records-{uuid.uuid4().hex[:8]}",
            partition_key=PartitionKey(path="/pk"),
            default_ttl=-1,
        )


@pytest.fixture
def store(container: ContainerProxy) -> CosmosStore:
    return CosmosStore(container)
