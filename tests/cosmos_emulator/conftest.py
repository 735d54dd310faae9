"""Fixtures: an emulator per test module, and a fresh database + container per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey
from azure.cosmos.aio import ContainerProxy as AioContainerProxy
from azure.cosmos.aio import CosmosClient as AioCosmosClient

from cosmos_emulator import RunningCosmosEmulator, start_in_background


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def cosmos_emulator() -> Iterator[RunningCosmosEmulator]:
    """A running emulator on a free port, stopped by its own handle."""
    with start_in_background("127.0.0.1", 0) as emu:
        yield emu


@pytest.fixture
def fresh_emulator() -> Iterator[RunningCosmosEmulator]:
    """An emulator of the test's own, for tests that inject faults or restart."""
    with start_in_background("127.0.0.1", 0) as emu:
        yield emu


@pytest.fixture(scope="module")
def client(cosmos_emulator: RunningCosmosEmulator) -> CosmosClient:
    return CosmosClient(cosmos_emulator.url, cosmos_emulator.key)


@pytest.fixture
def database(client: CosmosClient) -> Iterator[DatabaseProxy]:
    db = client.create_database(unique("db"))
    yield db
    client.delete_database(db)


@pytest.fixture
def container(database: DatabaseProxy) -> ContainerProxy:
    return database.create_container(unique("c"), PartitionKey("/pk"))


@pytest.fixture
def ttl_container(database: DatabaseProxy) -> ContainerProxy:
    return database.create_container(unique("ttl"), PartitionKey("/pk"), default_ttl=-1)


@pytest.fixture
async def aio_container(
    cosmos_emulator: RunningCosmosEmulator,
) -> AsyncIterator[AioContainerProxy]:
    async with AioCosmosClient(cosmos_emulator.url, cosmos_emulator.key) as aio_client:
        db = await aio_client.create_database(unique("adb"))
        try:
            yield await db.create_container(unique("ac"), PartitionKey("/pk"), default_ttl=-1)
        finally:
            await aio_client.delete_database(db)
