"""The app's Cosmos client reads the environment's proxy settings once, when it is made.

aiohttp, under an azure-core transport that trusts the environment (the SDK's default), looks
up netrc credentials and the proxy for every request in a thread of the event loop's default
executor: two thread hand-offs per request, the largest per-message cost `orders worker` had
over a bare SDK loop (docs/running.md, Throughput). `create_cosmos_client` asks once: with no
proxy in the environment its requests never leave the event loop; with one, they still go
through it. On our Cosmos emulator through the real SDK.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError
from servers import CosmosServer

from orders.adapters.cosmos_client import create_cosmos_client
from orders.settings import Settings


class CountingExecutor(ThreadPoolExecutor):
    """The event loop's default executor, counting what is handed to its threads."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An environment without any proxy variable (urllib's `getproxies` reads `*_proxy`)."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
async def counting_executor() -> AsyncIterator[CountingExecutor]:
    executor = CountingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    yield executor


async def test_without_a_proxy_in_the_environment_requests_stay_on_the_event_loop(
    python_cosmos: CosmosServer, no_proxy_settings: None, counting_executor: CountingExecutor
) -> None:
    settings = Settings(cosmos_endpoint=python_cosmos.endpoint, cosmos_key=python_cosmos.key)
    async with create_cosmos_client(settings) as client:
        database = await client.create_database_if_not_exists("transport")
        await database.read()  # the client's one-time account reads are behind it
        before = counting_executor.submitted

        for _ in range(5):
            await database.read()

    assert counting_executor.submitted == before


async def test_a_proxy_in_the_environment_is_still_used(
    python_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch, no_proxy_settings: None
) -> None:
    # Nothing listens on port 9: a request that goes through the proxy cannot connect, one
    # that ignored it would reach the emulator.
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    settings = Settings(cosmos_endpoint=python_cosmos.endpoint, cosmos_key=python_cosmos.key)
    client = create_cosmos_client(settings, retry_total=0)
    try:
        with pytest.raises(ServiceRequestError, match=r"127\.0\.0\.1:9\b"):
            await client.__aenter__()  # its first request: the account read
    finally:
        await client.close()
