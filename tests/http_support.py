"""Helpers of the HTTP API tests: the real app over fakes of its ports.

A module of its own rather than conftest.py: several test areas have a conftest.py, so
`from conftest import ...` would pick whichever was collected last.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fakes import (
    LAYOUT,
    FakeIdempotencyStore,
    FakeOrderReader,
    FakeOrderStore,
    RecordingPublisher,
)

from exactly_once._ports import DocumentStore, RecordStore
from exactly_once._records import Record, lease_is_live
from exactly_once.worker import WorkerOptions, WorkerStats
from orders.bootstrap import HttpRuntime
from orders.entrypoints.http_api import create_app
from orders.entrypoints.worker import run_subscriber
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.order_lookup import OrderLookup
from orders.service.ports import IdempotencyStore, OrderPublisher, OrderReader
from orders.service.registry import ORDERS, consumer_named
from orders.service.saga import OrderSaga
from orders.settings import Settings

LEASE_SECONDS = 30.0
DEFAULT_SCOPE = "tests"
TTL_SECONDS = 600


@dataclass
class FakeClock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Api:
    """An httpx client on the app, plus the fakes behind it to assert on."""

    client: httpx.AsyncClient
    store: IdempotencyStore
    publisher: RecordingPublisher
    order_store: FakeOrderStore
    clock: FakeClock
    builds: list[HttpRuntime] = field(default_factory=list)

    async def post(self, body: Any, key: str | None = "key-1", **headers: str) -> httpx.Response:
        all_headers = dict(headers)
        if key is not None:
            all_headers["Idempotency-Key"] = key
        if isinstance(body, bytes):
            return await self.client.post("/api/orders", content=body, headers=all_headers)
        return await self.client.post("/api/orders", json=body, headers=all_headers)


def runtime_over(
    store: IdempotencyStore,
    publisher: OrderPublisher,
    reader: OrderReader,
    clock: FakeClock,
    *,
    lease_seconds: float = LEASE_SECONDS,
    orders: DocumentStore | None = None,
) -> HttpRuntime:
    intake = IdempotentOrderIntake(
        store,
        publisher,
        status=publisher if isinstance(publisher, RecordingPublisher) else None,
        saga=OrderSaga(orders, LAYOUT) if orders is not None else None,
        ttl_seconds=TTL_SECONDS,
        lease_seconds=lease_seconds,
        clock=clock,
    )
    # As behind App Service authentication: the platform sets the principal header.
    return HttpRuntime(
        intake,
        OrderLookup(reader, store, LAYOUT),
        default_scope=DEFAULT_SCOPE,
        trust_principal_header=True,
    )


async def api_over(
    store: IdempotencyStore, *, lease_seconds: float = LEASE_SECONDS
) -> AsyncIterator[Api]:
    publisher = RecordingPublisher()
    order_store = FakeOrderStore()
    clock = FakeClock()
    if isinstance(store, FakeIdempotencyStore):
        store.database_clock = clock  # leases are judged by the (fake) database's clock
    builds: list[HttpRuntime] = []

    async def factory() -> HttpRuntime:
        runtime = runtime_over(
            store,
            publisher,
            FakeOrderReader(order_store),
            clock,
            lease_seconds=lease_seconds,
            orders=order_store,
        )
        builds.append(runtime)
        return runtime

    transport = httpx.ASGITransport(app=create_app(factory))
    async with httpx.AsyncClient(transport=transport, base_url="http://orders.test") as client:
        yield Api(client, store, publisher, order_store, clock, builds)


def new_order_id() -> str:
    return f"o-{uuid.uuid4().hex[:12]}"


PROBLEM = "application/problem+json"


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"] == f"urn:orders:problem:{slug}"
    assert body["title"] and body["detail"]
    return body


async def lease_over(records: RecordStore, record: Record, within: float = 10.0) -> None:
    """Poll (with a deadline) until the database's clock says the record's lease has ended:
    leases are judged by the database's time alone, which a test cannot advance."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await records.read(record.key, record.partition)
        if found.record is None or not lease_is_live(found.record, found.database_now_ms):
            return
        await asyncio.sleep(0.1)  # polling the database's clock, bounded by the deadline
    raise AssertionError(f"the lease of {record.key} did not end within {within} s")


class RunningWorker:
    """The order worker (`run_subscriber` of the order consumer, the standalone host) on a real
    broker and store, running in the test's event loop until `stopped()`."""

    def __init__(self, settings: Settings) -> None:
        self.stop = asyncio.Event()
        options = WorkerOptions(concurrency=2, prefetch=0, receive_wait_seconds=0.5)
        self.task: asyncio.Task[WorkerStats] = asyncio.create_task(
            run_subscriber(settings, consumer_named(ORDERS), options, self.stop)
        )

    async def stopped(self) -> WorkerStats:
        self.stop.set()
        return await asyncio.wait_for(self.task, timeout=30)
