"""A hostile caller against an order that arrived straight on the queue (issue 37, item 2).

The real pieces: our Service Bus emulator and our Cosmos emulator through the azure SDKs, the
order worker (`run_worker`), and the API app over the runtime `orders serve` builds, called in
process. A producer that does not use the API sends alice's order to the queue; once it is
stored, another caller POSTs another payload under its orderId. The API had no claim for that id
and answers 202; the worker dead-letters the payload as a mismatch. That caller must then learn
nothing of the stored order (GET and cancel: 404, as for an order that does not exist) and
change nothing. Without principals every caller shares one scope: GET and cancel agree on the
stored order (shown and cancelled when the message named that scope its owner, neither when it
named no owner).

The owner travels in the `orderOwner` application property: spelled out here, as producers
outside this code base write it (README, "The message contract").
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusMessage
from fakes import order_payload
from http_support import RunningWorker

from orders.adapters.cosmos_client import (
    create_cosmos_client,
    orders_container,
    prepare_local_cosmos,
)
from orders.adapters.servicebus import create_servicebus_client
from orders.bootstrap import HttpRuntime, build_http_runtime
from orders.entrypoints.http_api import create_app
from orders.entrypoints.localstack import QueueOptions
from orders.settings import Settings

pytestmark = pytest.mark.slow

PRINCIPAL = "X-MS-CLIENT-PRINCIPAL-ID"
DEADLINE_SECONDS = 30.0


@pytest.fixture(scope="module")
def servicebus_connection() -> Iterator[tuple[str, str]]:
    """Our Service Bus emulator with an orders queue (and the status queue a cancel sends to)."""
    from servicebus_emulator import start_in_background

    queue = f"orders-{uuid.uuid4().hex[:8]}"
    config = QueueOptions(name=queue, lock_seconds=5).config()
    # The rival's payload reaches the worker only once the producer's MessageId (the same
    # orderId) has left the duplicate-detection window: hours later in production. A queue
    # without duplicate detection stands for that, with no waiting.
    [namespace] = config["UserConfig"]["Namespaces"]
    [orders] = [entity for entity in namespace["Queues"] if entity["Name"] == queue]
    orders["Properties"]["RequiresDuplicateDetection"] = False
    emulator = start_in_background(config=config)
    try:
        yield emulator.connection_string, queue
    finally:
        emulator.stop()


def settings_for(
    python_cosmos: Any, servicebus_connection: tuple[str, str], *, principals: bool
) -> Settings:
    connection, queue = servicebus_connection
    return Settings.from_env(
        {
            "COSMOS_ENDPOINT": python_cosmos.endpoint,
            "COSMOS_KEY": python_cosmos.key,
            "COSMOS_DATABASE": f"hostile-{uuid.uuid4().hex[:8]}",
            "ORDERS_QUEUE": queue,
            "ServiceBusConnection": connection,
            # App Service authentication on: the platform sets the principal header.
            "WEBSITE_AUTH_ENABLED": "true" if principals else "false",
        }
    )


class Stack:
    """The API (in process, over the runtime `orders serve` builds), the order worker, a
    producer's sender on the queue, and a reader of the orders container for the assertions."""

    def __init__(self, settings: Settings, api: httpx.AsyncClient) -> None:
        self.settings = settings
        self.api = api

    async def send_to_queue(self, order_id: str, owner: str | None) -> None:
        properties: dict[str | bytes, Any] = {} if owner is None else {"orderOwner": owner}
        async with (
            create_servicebus_client(self.settings) as client,
            client.get_queue_sender(self.settings.orders_queue) as sender,
        ):
            await sender.send_messages(
                ServiceBusMessage(
                    json.dumps(order_payload(order_id)),
                    message_id=order_id,
                    content_type="application/json",
                    application_properties=properties,
                )
            )

    async def documents(self, order_id: str) -> dict[str, dict[str, Any]]:
        async with create_cosmos_client(self.settings) as client:
            container = orders_container(client, self.settings)
            found = container.query_items("SELECT * FROM c", partition_key=order_id)
            return {document["id"]: document async for document in found}

    async def wait_for(self, order_id: str, document_type: str) -> None:
        """Poll the store (with a deadline) until the worker wrote a document of that type:
        the worker's decision is not an event the test can wait on."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            found = await self.documents(order_id)
            if any(document["type"] == document_type for document in found.values()):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"no {document_type} document for {order_id} in {DEADLINE_SECONDS} s")

    async def place(self, order_id: str, principal: str | None, **overrides: Any) -> int:
        headers = {"Idempotency-Key": f"place-{uuid.uuid4()}"}
        if principal:
            headers[PRINCIPAL] = principal
        body = order_payload(order_id, **overrides)
        return (await self.api.post("/api/orders", json=body, headers=headers)).status_code

    async def get(self, order_id: str, principal: str | None) -> httpx.Response:
        headers = {PRINCIPAL: principal} if principal else {}
        return await self.api.get(f"/api/orders/{order_id}", headers=headers)

    async def cancel(self, order_id: str, principal: str | None) -> httpx.Response:
        headers = {"Idempotency-Key": f"cancel-{uuid.uuid4()}"}
        if principal:
            headers[PRINCIPAL] = principal
        return await self.api.post(f"/api/orders/{order_id}/cancel", headers=headers)

    async def queue_order_and_a_rival_payload(
        self, order_id: str, owner: str | None, rival: str | None
    ) -> int:
        """The producer's order stored, then the rival's payload under its orderId, rejected.
        Returns what the API answered the rival's POST."""
        await self.send_to_queue(order_id, owner)
        await self.wait_for(order_id, "order")
        answered = await self.place(order_id, rival, currency="USD")
        await self.wait_for(order_id, "orderRejection")
        return answered

    async def untouched(self, order_id: str) -> bool:
        """Neither cancelled nor carrying an `OrderCancelled` event (what billing refunds)."""
        found = await self.documents(order_id)
        events = [d.get("eventType") for d in found.values() if d["type"] == "outbox"]
        return "fulfilment" not in found[order_id] and "OrderCancelled" not in events


@asynccontextmanager
async def running_stack(
    python_cosmos: Any, servicebus_connection: tuple[str, str], *, principals: bool
) -> AsyncIterator[Stack]:
    settings = settings_for(python_cosmos, servicebus_connection, principals=principals)
    await prepare_local_cosmos(settings)
    runtime = await build_http_runtime(settings)

    async def factory() -> HttpRuntime:
        return runtime

    transport = httpx.ASGITransport(app=create_app(factory))
    worker = RunningWorker(settings)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            yield Stack(settings, client)
    finally:
        await worker.stopped()
        await runtime.close()


@pytest.fixture
async def with_principals(
    python_cosmos: Any, servicebus_connection: tuple[str, str]
) -> AsyncIterator[Stack]:
    async with running_stack(python_cosmos, servicebus_connection, principals=True) as stack:
        yield stack


@pytest.fixture
async def shared_scope(
    python_cosmos: Any, servicebus_connection: tuple[str, str]
) -> AsyncIterator[Stack]:
    async with running_stack(python_cosmos, servicebus_connection, principals=False) as stack:
        yield stack


def assert_not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, response.text
    assert response.json()["type"] == "urn:orders:problem:order-not-found"
    assert "USD" not in response.text and "customer-1" not in response.text


async def test_a_rival_payloads_sender_cannot_see_or_cancel_a_queue_sent_order(
    with_principals: Stack,
) -> None:
    stack = with_principals
    owned, ownerless = f"o-{uuid.uuid4().hex[:10]}", f"o-{uuid.uuid4().hex[:10]}"

    # Given alice's order and an order with no owner, both sent straight to the queue, and
    # mallory's payload under each orderId, answered 202 and rejected by the worker
    answers = [
        await stack.queue_order_and_a_rival_payload(owned, "principal:alice", "mallory"),
        await stack.queue_order_and_a_rival_payload(ownerless, None, "mallory"),
    ]

    # Then mallory is told nothing of either order and changes nothing
    assert answers == [202, 202]
    for order_id in (owned, ownerless):
        assert_not_found(await stack.get(order_id, "mallory"))
        assert_not_found(await stack.cancel(order_id, "mallory"))
        assert await stack.untouched(order_id)
    # The order with no owner is no API caller's; alice's is hers to see and cancel
    assert_not_found(await stack.cancel(ownerless, "alice"))
    assert (await stack.get(owned, "alice")).json()["status"] == "placed"
    assert (await stack.cancel(owned, "alice")).json()["status"] == "cancelled"
    assert not await stack.untouched(owned)


async def test_without_principals_get_and_cancel_agree_on_the_stored_order(
    shared_scope: Stack,
) -> None:
    stack = shared_scope
    shared, ownerless = f"o-{uuid.uuid4().hex[:10]}", f"o-{uuid.uuid4().hex[:10]}"

    # Given an order sent to the queue as the shared scope's, one sent with no owner, and a
    # caller's rejected payload under each orderId
    await stack.queue_order_and_a_rival_payload(shared, "app:default", None)
    await stack.queue_order_and_a_rival_payload(ownerless, None, None)

    # Then GET shows the stored order (never `rejected`) that the cancel then cancels ...
    shown = await stack.get(shared, None)
    cancelled = await stack.cancel(shared, None)
    after = await stack.get(shared, None)
    assert (shown.status_code, shown.json()["status"]) == (200, "placed")
    assert shown.json()["currency"] == "EUR"  # the stored order, not the rejected payload
    assert cancelled.json()["status"] == "cancelled"
    assert after.json()["status"] == "cancelled"
    # ... and shows no order that the cancel refuses
    assert_not_found(await stack.get(ownerless, None))
    assert_not_found(await stack.cancel(ownerless, None))
    assert await stack.untouched(ownerless)
