"""Every metric the dashboards and alerts in infra/ query is one the app emits.

The alerts and the workbook query `customMetrics` by name; a metric renamed in the code (issue
36 moved the spans to the OpenTelemetry messaging conventions, and kept the `orders.*` counters)
would leave an alert that never fires. The names are read from dashboards.bicep and checked
against what the app's telemetry classes emit into an in-memory reader.
"""

from __future__ import annotations

import re

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from exactly_once.decisions import Decision, Outcome, Settlement
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.received import ReceivedOrderMessage
from orders.observability import (
    ConsumerTelemetry,
    DispatcherTelemetry,
    HttpTelemetry,
    SubscriberTelemetry,
)

from .bicep_model import INFRA

DASHBOARDS = INFRA / "modules" / "dashboards.bicep"


def queried_names() -> tuple[set[str], set[tuple[str, str]]]:
    """The exact names the queries filter on, and the (prefix, suffix) patterns they use."""
    text = DASHBOARDS.read_text()
    exact = set(re.findall(r'name == "([^"]+)"', text))
    for listed in re.findall(r"name in \(([^)]*)\)", text):
        exact.update(re.findall(r'"([^"]+)"', listed))
    patterns = set(re.findall(r'name startswith "([^"]+)" and name endswith "([^"]+)"', text))
    patterns.update(
        (prefix, "") for prefix in re.findall(r'name startswith "([^"]+)"(?! and name)', text)
    )
    return exact, patterns


def emitted_names() -> set[str]:
    """Every metric the app's telemetry classes emit, each driven through every outcome."""
    reader = InMemoryMetricReader()
    meters, tracers = MeterProvider(metric_readers=[reader]), TracerProvider()
    message = ReceivedOrderMessage(b"{}", "m-1", 0)
    decisions = [
        Decision(outcome, settlement, key="o-1", dead_letter_reason="Reason")
        for outcome in (*Outcome, *OrderOutcome)
        for settlement in Settlement
    ]
    consumer = ConsumerTelemetry(meters, tracers, destination="orders")
    subscriber = SubscriberTelemetry("billing", meters, tracers, "order-events/Subscriptions/b")
    for decision in decisions:
        with consumer.message_span(message) as span:
            consumer.record(span, message, decision)
        with subscriber.message_span(message) as span:
            subscriber.record(span, decision)
    dispatcher = DispatcherTelemetry(meters, tracers, clock=lambda: 10.0)
    with dispatcher.batch_span(1) as span:
        dispatcher.attempting({"_ts": 1})
        dispatcher.published(span, 1)
        dispatcher.failed(span, RuntimeError("x"))
    dispatcher.parked("PublishRefused")
    http = HttpTelemetry(meters)
    for counter in vars(http).values():
        counter.add(1)
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def test_every_metric_the_alerts_and_the_workbook_query_is_emitted() -> None:
    exact, patterns = queried_names()
    emitted = emitted_names()

    assert exact, "no metric names found in dashboards.bicep: the query syntax changed?"
    assert {"orders.mismatches", "orders.dispatcher.lag"} <= exact  # the parse reads the alerts
    assert ("orders.http.", "") in patterns
    assert exact - emitted == set()
    for prefix, suffix in patterns:
        assert [name for name in emitted if name.startswith(prefix) and name.endswith(suffix)], (
            prefix,
            suffix,
        )


def test_the_conventions_metrics_are_emitted_beside_the_queried_ones() -> None:
    # What a dashboard of the conventions would query; the app's own names stay as they are.
    assert {
        "messaging.process.duration",
        "messaging.client.consumed.messages",
        "exactly_once.messages",
        "exactly_once.duplicates",
        "exactly_once.mismatches",
    } <= emitted_names()
