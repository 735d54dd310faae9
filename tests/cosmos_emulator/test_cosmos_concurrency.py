"""Many concurrent clients: racing creates of one id produce exactly one 201."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey, exceptions
from azure.cosmos.aio import CosmosClient as AioCosmosClient

from cosmos_emulator import RunningCosmosEmulator


def test_racing_sync_creates_of_one_id(
    cosmos_emulator: RunningCosmosEmulator, container: ContainerProxy
) -> None:
    clients = [CosmosClient(cosmos_emulator.url, cosmos_emulator.key) for _ in range(8)]
    link = container.container_link.split("/")
    barrier = threading.Barrier(len(clients))

    def attempt(client: CosmosClient) -> int:
        proxy = client.get_database_client(link[1]).get_container_client(link[3])
        barrier.wait()
        try:
            proxy.create_item({"id": "contested", "pk": "a"})
            return 201
        except exceptions.CosmosResourceExistsError:
            return 409

    for _round in range(3):
        with ThreadPoolExecutor(len(clients)) as pool:
            outcomes = list(pool.map(attempt, clients))
        assert sorted(outcomes) == [201] + [409] * (len(clients) - 1)
        container.delete_item("contested", "a")


async def test_racing_aio_creates_and_batches(cosmos_emulator: RunningCosmosEmulator) -> None:
    async with AioCosmosClient(cosmos_emulator.url, cosmos_emulator.key) as client:
        db = await client.create_database_if_not_exists("race")
        container = await db.create_container_if_not_exists("c", PartitionKey("/pk"))

        async def create(i: int) -> int:
            try:
                await container.create_item({"id": "same", "pk": "r", "by": i})
                return 201
            except exceptions.CosmosResourceExistsError:
                return 409

        outcomes = await asyncio.gather(*(create(i) for i in range(20)))
        assert sorted(outcomes) == [201] + [409] * 19

        async def batch(i: int) -> bool:
            try:
                await container.execute_item_batch(
                    [
                        ("create", ({"id": "claim", "pk": "b", "by": i},)),
                        ("create", ({"id": f"effect-{i}", "pk": "b"},)),
                    ],
                    partition_key="b",
                )
                return True
            except exceptions.CosmosBatchOperationError:
                return False

        won = await asyncio.gather(*(batch(i) for i in range(20)))
        assert sum(won) == 1
        winner = won.index(True)
        effects: list[Any] = [
            d
            async for d in container.query_items(
                "SELECT VALUE c.id FROM c WHERE STARTSWITH(c.id, 'effect-')", partition_key="b"
            )
        ]
        assert effects == [f"effect-{winner}"]
        await client.delete_database("race")
