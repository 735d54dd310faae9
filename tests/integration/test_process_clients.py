"""One Functions process, one set of clients: the seven runtimes the host can build (the order
consumer, billing, shipping, status, the outbox dispatcher, the HTTP API and the console) share
one credential, one Cosmos client and one Service Bus client, on our emulators through the real
SDKs; closing a runtime leaves the clients the others use open."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from servers import CosmosServer

import orders.adapters.process_clients as process_clients
import orders.bootstrap as bootstrap
from orders.bootstrap import (
    ProcessClients,
    shared_process_clients,
)
from orders.entrypoints.functions import (
    function_dispatcher_runtime,
    function_subscriber_runtimes,
)
from orders.entrypoints.http_api import console_runtime_from_env, http_runtime_from_env
from orders.service.registry import ORDERS, consumer_named, consumer_names
from orders.service.subscribers import Source
from orders.settings import Settings
from servicebus_emulator import start_in_background

PROJECT_CONFIG = Path(__file__).resolve().parents[2] / "emulators" / "servicebus" / "config.json"


def counting(made: list[str], name: str, factory: Callable[..., Any]) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        made.append(name)
        return factory(*args, **kwargs)

    return make


@pytest.fixture
async def functions_process(
    python_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[list[str]]:
    """The Functions host's app settings, and what the composition root makes from them."""
    emulator = start_in_background(PROJECT_CONFIG)
    for name, value in {
        "ServiceBusConnection": emulator.connection_string,
        "COSMOS_ENDPOINT": python_cosmos.endpoint,
        "COSMOS_KEY": python_cosmos.key,
        "COSMOS_DATABASE": "process-clients",
        "PAYMENTS_URL": "http://127.0.0.1:9",  # never called: no message is handled
    }.items():
        monkeypatch.setenv(name, value)
    made: list[str] = []
    for name in ("create_cosmos_client", "create_servicebus_client", "ProcessCredential"):
        factory = getattr(process_clients, name)
        monkeypatch.setattr(process_clients, name, counting(made, name, factory))
    monkeypatch.setattr(process_clients, "_shared_clients", None)
    try:
        yield made
    finally:
        await function_dispatcher_runtime.close()
        for lazy in function_subscriber_runtimes.values():
            await lazy.close()
        await shared_process_clients().close()
        emulator.stop()


async def test_the_seven_runtimes_share_one_credential_and_one_client_of_each_sdk(
    functions_process: list[str],
) -> None:
    subscribers = [await function_subscriber_runtimes[name].get() for name in consumer_names()]
    dispatcher = await function_dispatcher_runtime.get()
    http = await http_runtime_from_env()
    console = await console_runtime_from_env()
    clients = shared_process_clients()

    assert sorted(functions_process) == [
        "ProcessCredential",
        "create_cosmos_client",
        "create_servicebus_client",
    ]
    # Runtimes close what they made, never the shared clients: the console still peeks over
    # the Service Bus client and the database still answers through the Cosmos client.
    await http.close()
    await function_subscriber_runtimes[ORDERS].close()
    await function_dispatcher_runtime.close()
    counts = {found.source: found for found in await console.console.counts()}
    database = (await clients.cosmos()).get_database_client("process-clients")
    assert (await database.read())["id"] == "process-clients"
    await console.close()
    assert counts[Source(queue="orders")].active == 0
    # Without ORDERS_CONSOLE_SUBSCRIPTIONS, the console shows every registered consumer's entity.
    assert {
        Source(topic="order-events", subscription="billing"),
        Source(topic="order-events", subscription="shipping"),
        Source(queue="order-status"),
    } <= counts.keys()
    assert dispatcher.dispatcher is not None
    assert {runtime.source for runtime in subscribers} == {
        Source(queue="orders"),
        Source(topic="order-events", subscription="billing"),
        Source(topic="order-events", subscription="shipping"),
        Source(queue="order-status"),
    }


async def test_clients_made_for_one_runtime_close_with_it(python_cosmos: CosmosServer) -> None:
    """Without shared clients a runtime makes its own (the CLI's one-runtime processes) and
    closes them; shared ones are left to their owner."""
    settings = Settings(cosmos_endpoint=python_cosmos.endpoint, cosmos_key=python_cosmos.key)
    shared = ProcessClients(settings)
    orders = consumer_named(ORDERS)
    first = await bootstrap.build_subscriber_runtime(settings, orders, clients=shared)
    second = await bootstrap.build_subscriber_runtime(settings, orders, clients=shared)
    await first.close()
    await second.close()
    still_open = await shared.cosmos()
    assert (await still_open.get_database_client(settings.cosmos_database).read())["id"]
    await shared.close()
    with pytest.raises(ValueError, match="shared ProcessClients"):
        await bootstrap.build_subscriber_runtime(
            settings, orders, clients=shared, connection_timeout=5
        )
