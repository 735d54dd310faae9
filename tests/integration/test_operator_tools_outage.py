"""Operator tools need only what they touch: the DLQ commands and the console's dead-letter
pages work with Cosmos DB stopped, the key commands with Service Bus stopped (issue 35).

Each runs against one real emulator through the real SDK; the other service's settings point
at a closed port on 127.0.0.1, as they would during its outage. The CLI runs as a process.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from servers import CosmosServer, free_port

from orders.adapters.cosmos_client import (
    create_cosmos_client,
    idempotency_container,
    prepare_local_cosmos,
)
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.bootstrap import (
    ConsoleRuntime,
    HttpRuntime,
    build_console_runtime,
)
from orders.domain.idempotency import key_claim
from orders.entrypoints.http_api import create_app
from orders.entrypoints.http_hosts import AllowedHosts
from orders.entrypoints.localstack import QueueOptions
from orders.settings import EMULATOR_COSMOS_KEY, Settings
from servicebus_emulator import RunningEmulator, start_in_background

QUEUE = "orders"


@pytest.fixture
def app_entities_emulator() -> Iterator[RunningEmulator]:
    """Our Service Bus emulator with every entity the console peeks (`orders up`'s)."""
    running = start_in_background(config=QueueOptions().config())
    yield running
    running.stop()


def stopped_cosmos() -> dict[str, str]:
    return {
        "COSMOS_ENDPOINT": f"http://127.0.0.1:{free_port()}/",
        "COSMOS_KEY": EMULATOR_COSMOS_KEY,
    }


def stopped_servicebus() -> dict[str, str]:
    return {
        "ServiceBusConnection": f"Endpoint=sb://127.0.0.1:{free_port()};SharedAccessKeyName="
        "RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
    }


def orders_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orders", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )  # fmt: skip


async def one_dead_letter(connection_string: str, message_id: str) -> None:
    """A message of the orders queue, dead-lettered on its first delivery."""
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_sender(QUEUE) as sender:
            await sender.send_messages(ServiceBusMessage(b"{oops", message_id=message_id))
        async with client.get_queue_receiver(QUEUE) as receiver:
            [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.dead_letter_message(message, reason="InvalidJson")


@pytest.mark.slow
async def test_orders_dlq_lists_and_purges_with_cosmos_stopped(
    orders_queue_emulator: RunningEmulator,
) -> None:
    await one_dead_letter(orders_queue_emulator.connection_string, "m-outage")
    env = {"ServiceBusConnection": orders_queue_emulator.connection_string, **stopped_cosmos()}

    listed = await asyncio.to_thread(orders_cli, env, "dlq", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [dead] = json.loads(listed.stdout)
    assert dead["messageId"] == "m-outage" and dead["reason"] == "InvalidJson"

    sequence = str(dead["sequenceNumber"])
    purged = await asyncio.to_thread(orders_cli, env, "dlq", "purge", sequence, "--yes")
    assert purged.returncode == 0, purged.stderr
    assert f"purged 1: [{sequence}]" in purged.stdout


async def test_orders_keys_show_and_evict_with_service_bus_stopped(
    python_cosmos: CosmosServer,
) -> None:
    env = {"COSMOS_ENDPOINT": python_cosmos.endpoint, "COSMOS_KEY": python_cosmos.key}
    settings = Settings.from_env(env)
    await prepare_local_cosmos(settings)
    scope = f"app:{settings.idempotency_scope}"
    async with create_cosmos_client(settings) as client:
        store = CosmosIdempotencyStore(idempotency_container(client, settings))
        claim = key_claim(
            scope, "key-outage", "o-outage", "h", owner="http-1", lease_seconds=600, ttl_seconds=60
        )
        await store.claim(claim)

    env |= stopped_servicebus()

    shown = await asyncio.to_thread(orders_cli, env, "keys", "show", "key-outage", "--json")
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["orderId"] == "o-outage" and record["status"] == "inProgress"

    evicted = await asyncio.to_thread(
        orders_cli, env, "keys", "evict", "key-outage", "--yes", "--force"
    )
    assert evicted.returncode == 0 and evicted.stdout.strip() == "evicted", evicted.stderr
    gone = await asyncio.to_thread(orders_cli, env, "keys", "show", "key-outage")
    assert gone.returncode == 1 and "no record for this key" in gone.stderr


async def test_the_consoles_dead_letter_pages_work_with_cosmos_stopped(
    app_entities_emulator: RunningEmulator,
) -> None:
    await one_dead_letter(app_entities_emulator.connection_string, "m-console-outage")
    settings = Settings.from_env(
        {"ServiceBusConnection": app_entities_emulator.connection_string, **stopped_cosmos()}
    )

    async def no_api() -> HttpRuntime:
        raise AssertionError("the console alone is used")

    async def console_runtime() -> ConsoleRuntime:
        return await build_console_runtime(settings)

    app = create_app(no_api, console_factory=console_runtime, allowed_hosts=AllowedHosts())
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as browser,
    ):
        overview = await browser.get("/console")
        dead_letters = await browser.get("/console/dead-letters", params={"source": QUEUE})
        order = await browser.get("/console/orders", params={"orderId": "o-outage"})

    assert overview.status_code == 200 and "Unavailable" not in overview.text
    assert dead_letters.status_code == 200, dead_letters.text
    assert "m-console-outage" in dead_letters.text and "InvalidJson" in dead_letters.text
    # The order page needs Cosmos DB: it says so, and that the dead-letter pages still work.
    assert order.status_code == 503
    assert "Cosmos DB is unavailable" in order.text and "dead-letter pages" in order.text


async def test_orders_show_shows_the_dead_letters_with_cosmos_stopped(
    app_entities_emulator: RunningEmulator,
) -> None:
    await one_dead_letter(app_entities_emulator.connection_string, "o-dead")
    env = {"ServiceBusConnection": app_entities_emulator.connection_string, **stopped_cosmos()}

    shown = await asyncio.to_thread(orders_cli, env, "show", "o-dead")

    # What Service Bus holds is shown; the documents are named unavailable; exit 2 says partial.
    assert shown.returncode == 2, shown.stderr
    assert "order o-dead: its documents are unavailable (cannot reach Cosmos DB" in shown.stdout
    assert "dead letters naming it (1, peeked)" in shown.stdout and "InvalidJson" in shown.stdout
    assert "partial: cannot reach Cosmos DB" in shown.stderr and "Traceback" not in shown.stderr


async def test_orders_show_shows_the_documents_with_service_bus_stopped(
    python_cosmos: CosmosServer,
) -> None:
    env = {"COSMOS_ENDPOINT": python_cosmos.endpoint, "COSMOS_KEY": python_cosmos.key}
    await prepare_local_cosmos(Settings.from_env(env))

    shown = await asyncio.to_thread(
        orders_cli, env | stopped_servicebus(), "show", "o-never-stored", "--json"
    )

    assert shown.returncode == 2, shown.stderr
    found = json.loads(shown.stdout)
    assert found["order"] is None and found["statusHistory"] == []  # read: never stored
    assert found["deadLetters"] is None
    assert found["unavailable"]["deadLetters"].startswith("cannot reach Service Bus at 127.0.0.1:")
    assert "documents" not in found["unavailable"]
