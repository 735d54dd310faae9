"""The composition root: the one place that wires real adapters into the core.

Every host (Function, worker, CLI, HTTP API) builds its graph here; tests build the same graph
with fakes by passing their own store.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from azure.cosmos.aio import CosmosClient

from orders.adapters.cosmos_client import (
    create_cosmos_client,
    ensure_local_resources,
    orders_container,
)
from orders.adapters.cosmos_store import CosmosOrderStore
from orders.adapters.monitoring import configure_monitoring
from orders.observability import ConsumerTelemetry
from orders.service.consumer import OrderConsumer
from orders.settings import Settings


@dataclass
class ConsumerRuntime:
    consumer: OrderConsumer
    cosmos_client: CosmosClient
    settings: Settings
    extras: dict[str, Any] = field(default_factory=dict)

    async def close(self) -> None:
        await self.cosmos_client.close()


async def build_consumer_runtime(
    settings: Settings,
    *,
    telemetry: ConsumerTelemetry | None = None,
    create_local_resources: bool | None = None,
    **cosmos_client_options: Any,
) -> ConsumerRuntime:
    """Build the consumer over Cosmos; with emulator keys also create the containers."""
    configure_monitoring(settings)
    client = create_cosmos_client(settings, **cosmos_client_options)
    if create_local_resources is None:
        create_local_resources = settings.uses_emulator_keys
    if create_local_resources:
        await ensure_local_resources(client, settings)
    store = CosmosOrderStore(orders_container(client, settings))
    return ConsumerRuntime(OrderConsumer(store, telemetry), client, settings)


class _FunctionHostState:
    """One consumer per Functions worker process, built on the first message (not at import)."""

    def __init__(self) -> None:
        self.consumer: OrderConsumer | None = None
        self.runtime: ConsumerRuntime | None = None
        self.lock = asyncio.Lock()


_function_host = _FunctionHostState()


async def function_consumer() -> OrderConsumer:
    if _function_host.consumer is not None:
        return _function_host.consumer
    async with _function_host.lock:
        if _function_host.consumer is None:
            runtime = await build_consumer_runtime(Settings.from_env())
            _function_host.runtime = runtime
            _function_host.consumer = runtime.consumer
        return _function_host.consumer


def use_function_consumer(consumer: OrderConsumer | None) -> None:
    """Let tests (or another host) supply the consumer the Function uses."""
    _function_host.consumer = consumer
    _function_host.runtime = None
