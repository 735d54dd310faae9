"""Counters and spans per outcome, read through the OpenTelemetry SDK's in-memory readers."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fakes import LAYOUT, FakeLeaseStore, FakeOrderStore, new_write, order_payload
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from exactly_once.change_feed import ChangePage
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.exceptions import StoreRefusedError, TransientStoreError
from orders.adapters.cosmos_layout import OUTBOX_DOCUMENT_TYPE
from orders.domain.events import OrderEvent
from orders.domain.received import ReceivedOrderMessage
from orders.exceptions import TransientPublishError
from orders.observability import (
    ConsumerTelemetry,
    DispatcherTelemetry,
    SubscriberTelemetry,
    log_value,
)
from orders.service.consumer import OrderConsumer
from orders.service.dispatcher import OutboxDispatcher
from orders.service.instrumented import InstrumentedHandler


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


async def test_an_effect_conflict_is_counted_dead_lettered_and_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A line stored without its order: the core's conflict, dead-lettered on the first
    # delivery, so the dashboards' dead-letter count must see it.
    reader = InMemoryMetricReader()
    telemetry = ConsumerTelemetry(MeterProvider(metric_readers=[reader]), TracerProvider())
    store = FakeOrderStore()
    store.seed_document("t-5", {"id": "t-5:line:001", "orderId": "t-5"})
    payload = json.dumps(order_payload("t-5")).encode()

    decision = await OrderConsumer(store, LAYOUT, telemetry).handle(
        ReceivedOrderMessage(payload, "t-5")
    )

    assert decision.outcome is Outcome.EFFECT_CONFLICT
    assert counter_totals(reader)["orders.dead_lettered"] == 1
    [logged] = [r for r in caplog.records if r.name == "orders.consumer" and "t-5" in r.message]
    assert logged.levelno == logging.ERROR and "t-5:line:001" in logged.getMessage()


async def test_each_outcome_counts_and_spans_carry_the_dedup_key() -> None:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = ConsumerTelemetry(
        MeterProvider(metric_readers=[reader]), tracer_provider, destination="orders"
    )
    store = FakeOrderStore()
    consumer = OrderConsumer(store, LAYOUT, telemetry)

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
    store.fail_next(StoreRefusedError("Cosmos DB answered 413: too large"))
    await consumer.handle(message(order_payload("t-4")))

    totals = counter_totals(reader)
    # The app's counters, which the dashboards and alerts in infra/ query, keep their names.
    assert {name: total for name, total in totals.items() if name.startswith("orders.")} == {
        "orders.processed": 1,
        "orders.duplicates": 1,
        "orders.mismatches": 1,
        "orders.dead_lettered": 3,
        "orders.abandoned": 1,
    }
    # Beside them, the core's counters and the conventions' consumed messages.
    assert (
        totals["exactly_once.duplicates"],
        totals["exactly_once.mismatches"],
        totals["messaging.client.consumed.messages"],
    ) == (1, 1, 6)
    spans = exporter.get_finished_spans()
    assert {span.name for span in spans} == {"process orders"}
    attributes = [dict(span.attributes or {}) for span in spans]
    assert [a["messaging.servicebus.disposition_status"] for a in attributes] == [
        "complete",
        "complete",
        "dead_letter",
        "dead_letter",
        "abandon",
        "dead_letter",
    ]
    assert [a.get("error.type") for a in attributes] == [
        None,
        None,
        "mismatch",
        "rejected",
        "transient_failure",
        "store_refused",
    ]
    assert {a["messaging.destination.name"] for a in attributes} == {"orders"}
    assert [a["orders.outcome"] for a in attributes] == [
        "processed",
        "duplicate",
        "mismatch",
        "rejected",
        "transient_failure",
        "store_refused",
    ]
    assert attributes[1]["orders.dedup_key"] == "t-1"
    # The SDK's 2 (earlier attempts) is the conventions' 3 (deliveries, this one included).
    assert attributes[1]["messaging.servicebus.message.delivery_count"] == 3
    assert attributes[1]["messaging.message.id"] == "t-1"
    assert attributes[1]["messaging.system"] == "servicebus"
    assert attributes[1]["messaging.operation.name"] == "process"


async def test_untrusted_values_cannot_forge_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    consumer = OrderConsumer(
        FakeOrderStore(), LAYOUT, ConsumerTelemetry(MeterProvider(), TracerProvider())
    )
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


# --- the fan-out consumers and the outbox dispatcher (issue 23) --------------------------------


class DecidesInTurn:
    """A subscriber core that answers with the decisions it is given, in turn."""

    def __init__(self, *decisions: Decision) -> None:
        self._decisions = list(decisions)

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        return self._decisions.pop(0)


def counter_points(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    """(metric, outcome attribute) -> total."""
    totals: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    if isinstance(point, NumberDataPoint):
                        key = (metric.name, str(dict(point.attributes or {}).get("outcome", "")))
                        totals[key] = totals.get(key, 0) + int(point.value)
    return totals


@pytest.mark.parametrize("consumer", ["billing", "shipping", "status"])
async def test_every_fanout_consumer_gets_spans_and_its_counters(consumer: str) -> None:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = SubscriberTelemetry(
        consumer,
        MeterProvider(metric_readers=[reader]),
        tracer_provider,
        destination=f"order-events/Subscriptions/{consumer}",
    )
    handler = InstrumentedHandler(
        DecidesInTurn(
            Decision(Outcome.PROCESSED, Settlement.COMPLETE, key="o-1"),
            Decision(Outcome.DUPLICATE, Settlement.COMPLETE, key="o-1"),
            Decision(
                Outcome.REJECTED, Settlement.DEAD_LETTER, key=None, dead_letter_reason="BadEvent"
            ),
            Decision(Outcome.TRANSIENT_FAILURE, Settlement.ABANDON, key="o-2", error="503"),
        ),
        telemetry,
    )
    decisions = [
        await handler.handle(ReceivedOrderMessage(b"{}", f"m-{n}", n, "corr")) for n in range(4)
    ]

    assert [d.outcome for d in decisions] == [
        Outcome.PROCESSED,
        Outcome.DUPLICATE,
        Outcome.REJECTED,
        Outcome.TRANSIENT_FAILURE,
    ]
    prefix = f"orders.{consumer}"
    points = counter_points(reader)
    assert {key: total for key, total in points.items() if key[0].startswith("orders.")} == {
        (f"{prefix}.decisions", "processed"): 1,
        (f"{prefix}.decisions", "duplicate"): 1,
        (f"{prefix}.decisions", "rejected"): 1,
        (f"{prefix}.decisions", "transient_failure"): 1,
        (f"{prefix}.dead_lettered", "rejected"): 1,
        (f"{prefix}.abandoned", "transient_failure"): 1,
    }
    spans = exporter.get_finished_spans()
    assert points[("messaging.client.consumed.messages", "")] == 4
    assert [span.name for span in spans] == ["process order-events"] * 4
    attributes = [dict(span.attributes or {}) for span in spans]
    assert {a["messaging.destination.subscription.name"] for a in attributes} == {consumer}
    assert {a["orders.consumer"] for a in attributes} == {consumer}
    assert [a["orders.outcome"] for a in attributes] == [
        "processed",
        "duplicate",
        "rejected",
        "transient_failure",
    ]
    assert attributes[2]["orders.dead_letter_reason"] == "BadEvent"
    assert attributes[3]["messaging.servicebus.message.delivery_count"] == 4
    assert [a["messaging.servicebus.disposition_status"] for a in attributes] == [
        "complete",
        "complete",
        "dead_letter",
        "abandon",
    ]
    assert spans[3].status.status_code is StatusCode.ERROR
    assert spans[0].status.status_code is not StatusCode.ERROR


class FailingEvents:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.published: list[str] = []

    async def publish_event(
        self, event: OrderEvent, trace_context: dict[str, str], *, message_id: str
    ) -> None:
        if self.fail:
            raise TransientPublishError("broker unavailable")
        self.published.append(event.event_id)


class MarkOnlyFeed:
    async def feed_ranges(self) -> list[str]:
        raise AssertionError("not read in dispatch()")

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        raise AssertionError("not read in dispatch()")

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        return None


def _outbox(order_id: str, written_at: int) -> dict[str, Any]:
    record = new_write(order_id)
    [outbox] = [d for d in record if d.get("type") == OUTBOX_DOCUMENT_TYPE]
    return {**outbox, "_ts": written_at}


async def test_the_dispatcher_counts_publishes_failures_and_a_lag_that_grows_while_it_fails() -> (
    None
):
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    now = [1_000.0]
    telemetry = DispatcherTelemetry(
        MeterProvider(metric_readers=[reader]), tracer_provider, clock=lambda: now[0]
    )
    events = FailingEvents(fail=True)
    dispatcher = OutboxDispatcher(
        MarkOnlyFeed(), events, FakeLeaseStore(), LAYOUT, telemetry=telemetry
    )
    batch = [_outbox("o-1", written_at=990)]

    # Two failed attempts of the same batch, 10 s and 70 s after its write, then a success.
    for at in (1_000.0, 1_060.0):
        now[0] = at
        with pytest.raises(TransientPublishError):
            await dispatcher.dispatch(batch)
    events.fail = False
    now[0] = 1_100.0
    assert await dispatcher.dispatch(batch) == 1

    data = reader.get_metrics_data()
    assert data is not None
    metrics = {
        metric.name: metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }

    def total(name: str) -> int:
        points = metrics[name].data.data_points
        return sum(int(p.value) for p in points if isinstance(p, NumberDataPoint))

    assert total("orders.dispatcher.failures") == 2
    assert total("orders.dispatcher.published") == 1
    (lag,) = metrics["orders.dispatcher.lag"].data.data_points
    assert isinstance(lag, HistogramDataPoint)
    assert lag.count == 3
    assert (lag.min, lag.max) == (10.0, 110.0)
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["orders.dispatcher.dispatch"] * 3
    assert [s.status.status_code for s in spans][:2] == [StatusCode.ERROR, StatusCode.ERROR]
    assert dict(spans[2].attributes or {})["orders.dispatcher.published"] == 1


def test_a_document_without_a_server_timestamp_records_no_lag() -> None:
    reader = InMemoryMetricReader()
    telemetry = DispatcherTelemetry(MeterProvider(metric_readers=[reader]), clock=lambda: 5.0)
    telemetry.attempting({"id": "x"})
    telemetry.attempting({"id": "y", "_ts": True})
    data = reader.get_metrics_data()
    names = (
        {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
        if data is not None
        else set()
    )
    assert "orders.dispatcher.lag" not in names
