"""The process's clients: one credential, one Cosmos client and one Service Bus client.

The SDKs want one client per process (each keeps a connection pool; the credential keeps one
token cache), so the composition root builds every runtime of a process over one of these.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from orders.adapters.cosmos_client import CosmosClient, create_cosmos_client, ensure_local_resources
from orders.adapters.identity import ProcessCredential
from orders.adapters.servicebus import ServiceBusClient, create_servicebus_client
from orders.settings import Settings


class ProcessClients:
    """One credential, one Cosmos client and one Service Bus client, each made on first use,
    shared by every runtime built over them, and closed once, by `close()`.

    The SDKs want one client per process (each keeps a connection pool; the credential keeps
    one token cache). Whoever makes a ProcessClients closes it: a runtime built without one
    makes its own and closes it with itself; `orders serve` shares one between the API and the
    console; the Functions host shares `shared_process_clients()` between all its runtimes.
    """

    def __init__(self, settings: Settings, **cosmos_client_options: Any) -> None:
        self.settings = settings
        self._cosmos_client_options = cosmos_client_options
        self._identity: ProcessCredential | None = None
        self._cosmos: CosmosClient | None = None
        self._servicebus: ServiceBusClient | None = None
        self._local_resources_ready = False
        self._preparing = asyncio.Lock()

    @property
    def identity(self) -> ProcessCredential:
        if self._identity is None:
            self._identity = ProcessCredential(self.settings)
        return self._identity

    async def cosmos(self, create_local_resources: bool | None = None) -> CosmosClient:
        """The Cosmos client; where wanted (by default: with emulator keys) the database and
        containers are created first, once per process."""
        if self._cosmos is None:
            self._cosmos = create_cosmos_client(
                self.settings, self.identity, **self._cosmos_client_options
            )
        if create_local_resources is None:
            create_local_resources = self.settings.uses_emulator_keys
        if create_local_resources and not self._local_resources_ready:
            async with self._preparing:
                if not self._local_resources_ready:
                    await ensure_local_resources(self._cosmos, self.settings)
                    self._local_resources_ready = True
        return self._cosmos

    def servicebus(self) -> ServiceBusClient:
        if self._servicebus is None:
            self._servicebus = create_servicebus_client(self.settings, self.identity)
        return self._servicebus

    async def close(self) -> None:
        """The clients, then the credential they use (the SDK clients do not close it)."""
        servicebus, self._servicebus = self._servicebus, None
        cosmos, self._cosmos = self._cosmos, None
        identity, self._identity = self._identity, None
        self._local_resources_ready = False
        if servicebus is not None:
            await servicebus.close()
        if cosmos is not None:
            await cosmos.close()
        if identity is not None:
            await identity.close()


def given_or_own(
    stack: AsyncExitStack,
    settings: Settings,
    clients: ProcessClients | None,
    **cosmos_client_options: Any,
) -> ProcessClients:
    """`clients` when given (its owner closes it); else clients of the runtime's own, closed
    last with `stack` (registered first, before anything that uses them)."""
    if clients is not None:
        if cosmos_client_options:
            raise ValueError("Cosmos client options go to the shared ProcessClients")
        return clients
    own = ProcessClients(settings, **cosmos_client_options)
    stack.push_async_callback(own.close)
    return own


_shared_clients: ProcessClients | None = None


def shared_process_clients() -> ProcessClients:
    """The clients every runtime built from app settings shares: the Functions host builds up to
    seven in one process (the four registered consumers, the dispatcher, the HTTP API
    and the console), on one credential, one Cosmos client and one Service Bus client. They
    live as long as the process (the host gives no shutdown hook); settings that changed since
    (tests) get clients of their own."""
    global _shared_clients
    settings = Settings.from_env()
    if _shared_clients is None or _shared_clients.settings != settings:
        _shared_clients = ProcessClients(settings)
    return _shared_clients
