"""End to end: `orders serve` (a real uvicorn process) -> our Service Bus emulator -> the worker
-> our Cosmos emulator, driven over HTTP like a client would.

POST is accepted (202), GET says "accepted" while the order waits in the queue, the worker
stores it, GET shows it; the client's retry is a replay and publishes nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes import order_payload
from http_support import RunningWorker, lease_over
from servers import free_port, stop_process, wait_for_port

from exactly_once._records import Record
from orders.adapters.cosmos_client import create_cosmos_client, idempotency_container
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.adapters.servicebus import create_servicebus_client
from orders.adapters.servicebus_publisher import ServiceBusOrderPublisher
from orders.bootstrap import HttpRuntime, build_http_runtime
from orders.domain.hashing import request_hash
from orders.domain.idempotency import key_claim, record_id
from orders.domain.messages import parse_order
from orders.entrypoints.http_api import create_app
from orders.entrypoints.localstack import QueueOptions
from orders.settings import Settings

pytestmark = pytest.mark.slow


def queue_config(queue: str) -> dict[str, Any]:
    # A long duplicate-detection window: the takeover test relies on the broker dropping the
    # second publish, however slow a loaded machine makes the crash-and-retry in between.
    return QueueOptions(
        name=queue, duplicate_window_seconds=60, lock_seconds=5, max_delivery_count=3
    ).config()


@pytest.fixture
def environment(python_cosmos: Any) -> Iterator[dict[str, str]]:
    from servicebus_emulator import start_in_background

    queue = f"orders-{uuid.uuid4().hex[:8]}"
    servicebus = start_in_background(config=queue_config(queue))
    try:
        yield {
            "COSMOS_ENDPOINT": python_cosmos.endpoint,
            "COSMOS_KEY": python_cosmos.key,
            "COSMOS_DATABASE": f"e2e-{uuid.uuid4().hex[:8]}",
            "ORDERS_QUEUE": queue,
            "ServiceBusConnection": servicebus.connection_string,
            "IDEMPOTENCY_TTL_SECONDS": "600",
        }
    finally:
        servicebus.stop()


@pytest.fixture
def served_url(environment: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """`orders serve` on a free port, as a user starts it; its log goes to a file."""
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "orders.cli", "serve", "--port", str(port)],
            env={**os.environ, **environment},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, process)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(process)


@pytest.fixture
async def api(served_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=served_url, timeout=30) as client:
        yield client


async def poll_until_stored(client: httpx.AsyncClient, location: str) -> httpx.Response:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = await client.get(location)
        if response.status_code != 202:
            return response
        await asyncio.sleep(0.1)  # polling a queue we do not control, bounded by the deadline
    raise TimeoutError(f"{location} still 'accepted' after 30 s")


async def test_post_is_queued_stored_by_the_worker_and_replayed_on_retry(
    api: httpx.AsyncClient, environment: dict[str, str]
) -> None:
    order_id = f"o-{uuid.uuid4().hex[:10]}"
    headers = {"Idempotency-Key": f"client-{uuid.uuid4()}"}

    placed = await api.post("/api/orders", json=order_payload(order_id), headers=headers)
    location = placed.headers["location"]
    queued = await api.get(location)
    worker = RunningWorker(Settings.from_env(environment))
    try:
        stored = await poll_until_stored(api, location)
        retried = await api.post("/api/orders", json=order_payload(order_id), headers=headers)
        reused = await api.post(
            "/api/orders", json=order_payload(order_id, currency="USD"), headers=headers
        )
    finally:
        stats = await worker.stopped()

    assert placed.status_code == 202 and placed.json()["orderId"] == order_id
    assert queued.status_code == 202 and queued.json()["status"] == "accepted"
    assert stored.status_code == 200, stored.text
    assert stored.json()["status"] == "placed"
    assert stored.json()["totalAmount"] == "5.5"
    assert [line["sku"] for line in stored.json()["lines"]] == ["sku-apple", "sku-pear"]
    assert retried.status_code == 202
    assert retried.headers["idempotent-replayed"] == "true"
    assert retried.json() == placed.json()
    assert reused.status_code == 422
    assert reused.headers["content-type"] == "application/problem+json"
    # One message reached the queue: the replay and the 422 published nothing.
    assert stats.received == 1 and stats.settled == 1


async def test_the_served_openapi_document_and_problem_answers(api: httpx.AsyncClient) -> None:
    document = await api.get("/api/openapi.json")
    missing_key = await api.post("/api/orders", json=order_payload("o-x"))
    unknown = await api.get(f"/api/orders/o-{uuid.uuid4().hex}")

    assert document.status_code == 200 and "/api/orders" in document.json()["paths"]
    assert missing_key.status_code == 400
    assert missing_key.json()["type"] == "urn:orders:problem:missing-idempotency-key"
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == "application/problem+json"


async def test_a_crashed_claim_is_taken_over_and_the_broker_drops_the_second_send(
    environment: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given an API instance that published the order and died before recording the response
    settings = Settings.from_env(environment)
    order_id = f"o-{uuid.uuid4().hex[:10]}"
    key = f"client-{uuid.uuid4()}"
    runtime = await build_http_runtime(settings)
    try:
        async with create_servicebus_client(settings) as servicebus:
            crashed = ServiceBusOrderPublisher(servicebus, settings.orders_queue)
            await crashed.publish(
                parse_order(json.dumps(order_payload(order_id)).encode()), "app:default"
            )
            await crashed.close()
        async with create_cosmos_client(settings) as cosmos:
            store = CosmosIdempotencyStore(idempotency_container(cosmos, settings))
            abandoned = await store.claim(abandoned_claim(order_id, key, settings))
            await lease_over(store, abandoned)  # its owner is gone and its lease has ended

            # When the client retries
            async def factory() -> HttpRuntime:
                return runtime

            transport = httpx.ASGITransport(app=create_app(factory))
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
                retried = await client.post(
                    "/api/orders", json=order_payload(order_id), headers={"Idempotency-Key": key}
                )
                worker = RunningWorker(settings)
                try:
                    stored = await poll_until_stored(client, retried.headers["location"])
                finally:
                    stats = await worker.stopped()
            record = await idempotency_container(cosmos, settings).read_item(
                record_id("app:default", key), partition_key=record_id("app:default", key)
            )
        async with (
            create_servicebus_client(settings) as servicebus,
            servicebus.get_queue_receiver(settings.orders_queue) as receiver,
        ):
            left_in_queue = await receiver.peek_messages(max_message_count=10, sequence_number=1)
    finally:
        await runtime.close()

    # Then the retry took the claim over and published again; the queue's duplicate detection
    # dropped that second send, so the worker saw one message and stored one order
    assert retried.status_code == 202 and "idempotent-replayed" not in retried.headers
    assert record["status"] == "completed"
    assert stored.status_code == 200 and stored.json()["orderId"] == order_id
    assert any("took over the expired claim" in r.getMessage() for r in caplog.records)
    assert stats.received == 1 and left_in_queue == []


def abandoned_claim(order_id: str, key: str, settings: Settings) -> Record:
    order = parse_order(json.dumps(order_payload(order_id)).encode())
    # A lease of 0 s ends with the second of the claim's write, by the database's clock.
    return key_claim(
        "app:default",
        key,
        order_id,
        request_hash(order.canonical_payload()),
        owner="http-crashed",
        lease_seconds=0,
        ttl_seconds=settings.idempotency_ttl_seconds,
    )
