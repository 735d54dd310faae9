"""Building the async Cosmos client from settings: a key for emulators, Entra ID otherwise."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from azure.core.pipeline.transport import AioHttpTransport
from azure.cosmos import PartitionKey

# Re-exported: the composition root names these types without importing the SDK itself.
from azure.cosmos.aio import ContainerProxy as ContainerProxy
from azure.cosmos.aio import CosmosClient as CosmosClient

from exactly_once.cosmos import CosmosStore
from exactly_once.store import DocumentCreator
from orders.adapters.identity import ProcessCredential
from orders.settings import Settings


def create_cosmos_client(
    settings: Settings, identity: ProcessCredential | None = None, **client_options: Any
) -> CosmosClient:
    """A key for emulators; otherwise Entra ID through the process's credential. The
    environment's proxy settings are read here, once (see below)."""
    credential: Any
    if settings.cosmos_key:
        credential = settings.cosmos_key
    elif identity is not None:
        credential = identity.get()
    else:
        raise ValueError("without COSMOS_KEY the client needs the process's ProcessCredential")
    # An azure-core transport that trusts the environment (the default) has aiohttp look up
    # netrc and the proxy for every request, each in a thread of the loop's executor: two
    # thread hand-offs per request, the largest per-message cost a worker had over a bare SDK
    # loop (docs/running.md). The environment does not change while the process runs, so ask
    # once: with no proxy configured, nothing is looked up per request (netrc credentials have
    # no use here: every Cosmos request carries its own Authorization header). With a proxy
    # configured, the default transport keeps honouring it.
    if "transport" not in client_options and not urllib.request.getproxies():
        client_options["transport"] = AioHttpTransport(use_env_settings=False)
    return CosmosClient(settings.cosmos_endpoint, credential=credential, **client_options)


def _container(client: CosmosClient, settings: Settings, name: str) -> ContainerProxy:
    return client.get_database_client(settings.cosmos_database).get_container_client(name)


def orders_container(client: CosmosClient, settings: Settings) -> ContainerProxy:
    return _container(client, settings, settings.cosmos_container)


def idempotency_container(client: CosmosClient, settings: Settings) -> ContainerProxy:
    return _container(client, settings, settings.cosmos_idempotency_container)


def inbox_container(client: CosmosClient, settings: Settings) -> ContainerProxy:
    return _container(client, settings, settings.cosmos_inbox_container)


def leases_container(client: CosmosClient, settings: Settings) -> ContainerProxy:
    return _container(client, settings, settings.cosmos_leases_container)


def order_partitioned_store(container: ContainerProxy) -> CosmosStore:
    """The `exactly_once` core's document store over the orders or the inbox container, both
    partitioned by `/orderId`: the one port the consumers write their documents through."""
    return CosmosStore(container, partition_key_field="orderId")


@dataclass(frozen=True)
class Containers:
    """The app's containers on one Cosmos client, named by the settings: what the composition
    root hands the adapters, without naming the SDK's types itself."""

    client: CosmosClient
    settings: Settings

    def orders(self) -> ContainerProxy:
        return orders_container(self.client, self.settings)

    def inbox(self) -> ContainerProxy:
        return inbox_container(self.client, self.settings)


# How the order consumer's store is made from the app's containers (a benchmark swaps in its own).
StoreFactory = Callable[[Containers], DocumentCreator]


def order_store(containers: Containers) -> CosmosStore:
    """The order consumer's store: the core's document store over the orders container."""
    return order_partitioned_store(containers.orders())


class LocalContainer(Protocol):
    """A container of a user's own, for the emulator (`orders up --entities`)."""

    @property
    def database(self) -> str: ...

    @property
    def id(self) -> str: ...

    @property
    def partition_key_path(self) -> str: ...

    @property
    def default_ttl(self) -> int | None: ...


async def ensure_local_containers(
    client: CosmosClient, containers: Iterable[LocalContainer]
) -> None:
    """Create a user's own databases and containers on an emulator, if they do not exist yet."""
    for container in containers:
        database = await client.create_database_if_not_exists(container.database)
        await database.create_container_if_not_exists(
            id=container.id,
            partition_key=PartitionKey(path=container.partition_key_path),
            default_ttl=container.default_ttl,
        )


async def ensure_local_resources(client: CosmosClient, settings: Settings) -> None:
    """Create the database and containers on an emulator.

    In Azure they come from Bicep: creating them is a control-plane operation that the
    data-plane role of the app's identity cannot do, so this runs only with emulator keys.
    """
    if not settings.uses_emulator_keys:
        raise RuntimeError("containers are created by infra/ in Azure, not by the app")
    database = await client.create_database_if_not_exists(settings.cosmos_database)
    await database.create_container_if_not_exists(
        id=settings.cosmos_container,
        partition_key=PartitionKey(path="/orderId"),
        default_ttl=-1,
    )
    await database.create_container_if_not_exists(
        id=settings.cosmos_idempotency_container,
        partition_key=PartitionKey(path="/id"),
        default_ttl=-1,
    )
    # TTL on, no default expiry: the consumers' records expire by their own ttl, as in Azure.
    await database.create_container_if_not_exists(
        id=settings.cosmos_inbox_container,
        partition_key=PartitionKey(path="/orderId"),
        default_ttl=-1,
    )
    # Partitioned by /id, as the Functions Cosmos DB trigger requires of its lease container.
    await database.create_container_if_not_exists(
        id=settings.cosmos_leases_container, partition_key=PartitionKey(path="/id")
    )


async def prepare_local_cosmos(
    settings: Settings, extra_containers: Sequence[LocalContainer] = ()
) -> None:
    """Create the database and containers on an emulator (Azure gets them from Bicep), and a
    user's own containers (`orders up --entities`)."""
    async with create_cosmos_client(settings) as client:  # emulator keys only
        await ensure_local_resources(client, settings)
        await ensure_local_containers(client, extra_containers)
