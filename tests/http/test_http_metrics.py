"""The HTTP API's counters, read through the OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

import httpx
from fakes import (
    FakeIdempotencyStore,
    FakeOrderReader,
    FakeOrderStore,
    RecordingPublisher,
    order_payload,
)
from http_support import FakeClock, new_order_id, runtime_over
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from exactly_once.exceptions import TransientStoreError
from orders.bootstrap import HttpRuntime
from orders.entrypoints.http_api import create_app


def totals(reader: InMemoryMetricReader) -> dict[str, int]:
    found: dict[str, int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = [p for p in metric.data.data_points if isinstance(p, NumberDataPoint)]
                found[metric.name] = sum(int(point.value) for point in points)
    return found


async def test_replays_conflicts_reuse_and_outages_are_counted() -> None:
    reader = InMemoryMetricReader()
    store = FakeIdempotencyStore()
    runtime = runtime_over(
        store, RecordingPublisher(), FakeOrderReader(FakeOrderStore()), FakeClock()
    )

    async def factory() -> HttpRuntime:
        return runtime

    app = create_app(factory, meter_provider=MeterProvider(metric_readers=[reader]))
    order_id = new_order_id()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as client:

        async def post(body: dict[str, object], key: str) -> int:
            response = await client.post("/api/orders", json=body, headers={"Idempotency-Key": key})
            return response.status_code

        first = await post(order_payload(order_id), "k1")
        replayed = await post(order_payload(order_id), "k1")
        reused = await post(order_payload(order_id, currency="USD"), "k1")
        conflict = await post(order_payload(order_id, currency="USD"), "k2")
        store.fail_next("claim", TransientStoreError("503"))
        outage = await post(order_payload(new_order_id()), "k3")

    assert [first, replayed, reused, conflict, outage] == [202, 202, 422, 409, 503]
    counted = totals(reader)
    assert counted["orders.http.replays"] == 1
    assert counted["orders.http.key_reused"] == 1
    assert counted["orders.http.order_id_conflicts"] == 1
    assert counted["orders.http.server_errors"] == 1
    assert counted.get("orders.http.in_progress", 0) == 0
