"""Counters and spans per outcome, read through the OpenTelemetry SDK's in-memory readers."""

from __future__ import annotations

import json
import logging

import pytest
from fakes import FakeOrderStore, order_payload
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orders.domain.received import ReceivedOrderMessage
from orders.exceptions import TransientStoreError
from orders.observability import ConsumerTelemetry, log_value
from orders.service.consumer import OrderConsumer


def counter_totals(reader: InMemoryMetricReader) -> dict[str, int]:
    totals: dict[str, int] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points = [p for p in metric.data.data_points if isinstance(p, NumberDataPoint)]
                totals[metric.name] = sum(int(point.value) for point in points)
    return totals


async def test_each_outcome_counts_and_spans_carry_the_dedup_key() -> None:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = ConsumerTelemetry(MeterProvider(metric_readers=[reader]), tracer_provider)
    store = FakeOrderStore()
    consumer = OrderConsumer(store, telemetry)

    def message(payload: dict[str, object], delivery_count: int = 1) -> ReceivedOrderMessage:
        return ReceivedOrderMessage(
            json.dumps(payload).encode(), str(payload["orderId"]), delivery_count, "corr"
        )

    await consumer.handle(message(order_payload("t-1")))
    await consumer.handle(message(order_payload("t-1"), delivery_count=2))
    await consumer.handle(message(order_payload("t-1", customerId="x")))
    await consumer.handle(ReceivedOrderMessage(b"nope", "t-2"))
    store.fail_next(TransientStoreError("503"))
    await consumer.handle(message(order_payload("t-3")))

    assert counter_totals(reader) == {
        "orders.processed": 1,
        "orders.duplicates": 1,
        "orders.mismatches": 1,
        "orders.dead_lettered": 2,
        "orders.abandoned": 1,
    }
    spans = exporter.get_finished_spans()
    attributes = [dict(span.attributes or {}) for span in spans]
    assert [a["orders.outcome"] for a in attributes] == [
        "processed",
        "duplicate",
        "mismatch",
        "rejected",
        "transient_failure",
    ]
    assert attributes[1]["orders.dedup_key"] == "t-1"
    assert attributes[1]["messaging.servicebus.message.delivery_count"] == 2
    assert attributes[1]["messaging.message.id"] == "t-1"


async def test_untrusted_values_cannot_forge_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    consumer = OrderConsumer(FakeOrderStore(), ConsumerTelemetry(MeterProvider(), TracerProvider()))
    forged = 't-9\nERROR ALERT outcome=processed dedup_key="x"'

    with caplog.at_level(logging.INFO, logger="orders.consumer"):
        await consumer.handle(
            ReceivedOrderMessage(json.dumps(order_payload("t-9")).encode(), forged, 0, "c\r\nx")
        )

    [record] = [r for r in caplog.records if "outcome=" in r.getMessage()]
    line = record.getMessage()
    assert "\n" not in line and "\r" not in line
    assert f"message_id={json.dumps(forged)}" in line
    assert 'correlation_id="c\\r\\nx"' in line
    assert " outcome=rejected " in line  # the real outcome, once
    assert record.message_id == forged  # type: ignore[attr-defined]  # the structured field


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("o-1", "o-1"),
        ("a b", '"a b"'),
        ("x=1", '"x=1"'),
        ("", '""'),
        ("line\u2028break", '"line\\u2028break"'),
        ('quote"', '"quote\\""'),
    ],
)
def test_log_values_are_plain_only_when_they_cannot_split_a_field(value: str, written: str) -> None:
    assert log_value(value) == written
