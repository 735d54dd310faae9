"""The core's telemetry as an exporter receives it: spans and metrics by the OpenTelemetry
messaging semantic conventions (the version `SEMCONV_VERSION` names), read from the SDK's
in-memory exporter and reader, for a worker on a topic subscription of our Service Bus emulator
with its records in our Cosmos DB emulator, both through the real SDKs."""

from __future__ import annotations

import asyncio
import importlib
import json
import pkgutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from core_support import lease_ended, queue_config, unique
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel

from exactly_once import (
    Backoff,
    ConsumerOptions,
    CosmosStore,
    Decision,
    DelayedRetries,
    Effects,
    Outcome,
    exactly_once,
)
from exactly_once._claims import Claims
from exactly_once._records import Record, RecordStatus
from exactly_once.exceptions import TransientStoreError
from exactly_once.retries import Retrier
from exactly_once.telemetry import (
    SCHEMA_URL,
    SEMCONV_VERSION,
    BrokerDelivery,
    Destination,
    Telemetry,
)
from exactly_once.worker import WorkerOptions, run_worker
from servicebus_emulator import RunningEmulator, start_in_background

TOPIC, SUBSCRIPTION = "greeting-events", "audit"
PRODUCER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def topic_config() -> dict[str, Any]:
    """The core's queue plus one topic with one subscription (no duplicate detection)."""
    config = queue_config()
    [namespace] = config["UserConfig"]["Namespaces"]
    namespace["Topics"] = [
        {
            "Name": TOPIC,
            "Properties": {"DefaultMessageTimeToLive": "PT1H", "RequiresDuplicateDetection": False},
            "Subscriptions": [
                {
                    "Name": SUBSCRIPTION,
                    "Properties": {
                        "DeadLetteringOnMessageExpiration": True,
                        "DefaultMessageTimeToLive": "PT1H",
                        "LockDuration": "PT30S",
                        "MaxDeliveryCount": 10,
                        "RequiresSession": False,
                    },
                }
            ],
        }
    ]
    return config


@pytest.fixture
def topic_servicebus() -> Iterator[RunningEmulator]:
    running = start_in_background(config=topic_config())
    yield running
    running.stop()


class Greeting(BaseModel):
    name: str


class Exported:
    """An SDK with in-memory export, and the core's `Telemetry` on it."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.telemetry = Telemetry(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
        )

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {
            metric.name: metric
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    def total(self, name: str) -> int:
        points = self.metrics()[name].data.data_points
        return sum(int(point.value) for point in points if isinstance(point, NumberDataPoint))


async def test_a_worker_on_a_subscription_exports_spans_and_metrics_by_the_conventions(
    topic_servicebus: RunningEmulator, store: CosmosStore
) -> None:
    exported = Exported()
    options = WorkerOptions(
        concurrency=1,  # one at a time, in the order sent: which body of `reused` is first
        backoff=Backoff(first_delay_seconds=0.05, max_delay_seconds=0.1, budget_seconds=5),
        # Off: "buggy" is abandoned and delivered again, so a span counts a second delivery
        # (tests/core/test_delayed_retries.py has the copies a delayed retry sends instead).
        delayed_retries=DelayedRetries(retries=0),
    )
    # "flaky" fails for now once (decided again after a backoff, in the same delivery); "buggy"
    # fails unexpectedly on its first attempt and its immediate retries (abandoned, then
    # delivered again).
    failures_left = {"flaky": 1, "buggy": 1 + options.backoff.immediate_retries}

    @exactly_once(
        consumer="greeter",
        parse=Greeting.model_validate_json,
        store=store,
        options=ConsumerOptions(telemetry=exported.telemetry),
    )
    async def greet(greeting: Greeting, effects: Effects) -> Outcome:
        if failures_left.get(greeting.name, 0) > 0:
            failures_left[greeting.name] -= 1
            if greeting.name == "flaky":
                raise TransientStoreError("503 from the store, for now")
            raise RuntimeError("a bug, this once")
        return await effects.inbox(
            effects.message_id, [{"id": f"greeting-{effects.message_id}", "to": greeting.name}]
        )

    new, reused, bad, flaky, buggy = (unique(name) for name in ("new", "reused", "bad", "f", "b"))
    traceparent = f"00-{PRODUCER_TRACE}-00f067aa0ba902b7-01"
    sent = [
        ServiceBusMessage(
            b'{"name": "ada"}', message_id=new, application_properties={"traceparent": traceparent}
        ),
        ServiceBusMessage(b'{"name": "ada"}', message_id=new),  # a resend: a duplicate
        ServiceBusMessage(b'{"name": "bob"}', message_id=reused),
        ServiceBusMessage(b'{"name": "eve"}', message_id=reused),  # the id reused: a mismatch
        ServiceBusMessage(b"not json", message_id=bad),
        ServiceBusMessage(b'{"name": "flaky"}', message_id=flaky),
        ServiceBusMessage(b'{"name": "buggy"}', message_id=buggy),
    ]
    expected_spans = len(sent) + 1  # the buggy one is delivered twice
    stop = asyncio.Event()
    sent_at = time.time()
    async with ServiceBusClient.from_connection_string(
        topic_servicebus.connection_string
    ) as client:
        async with client.get_topic_sender(TOPIC) as sender:
            await sender.send_messages(sent)
        worker = asyncio.create_task(
            run_worker(
                client,
                topic_name=TOPIC,
                subscription_name=SUBSCRIPTION,
                handle=greet.decide_message,
                stop=stop,
                options=options,
                retrier=Retrier(options.backoff, telemetry=exported.telemetry),
            )
        )
        deadline = time.monotonic() + 60
        while len(exported.spans.get_finished_spans()) < expected_spans:
            assert time.monotonic() < deadline, exported.spans.get_finished_spans()
            assert not worker.done(), "the worker ended before `stop`"
            await asyncio.sleep(0.1)  # polling the exporter, bounded by the deadline
        stop.set()
        stats = await asyncio.wait_for(worker, 30)
    assert stats.settled == expected_spans

    spans = exported.spans.get_finished_spans()
    assert len(spans) == expected_spans

    def spans_of(message_id: str) -> list[ReadableSpan]:
        """Its deliveries' spans in the order they started (one message at a time)."""
        found = [s for s in spans if (s.attributes or {})["messaging.message.id"] == message_id]
        return sorted(found, key=lambda span: span.start_time or 0)

    for span in spans:
        attributes = dict(span.attributes or {})
        assert span.name == f"process {TOPIC}"
        assert span.kind is SpanKind.CONSUMER
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.schema_url == SCHEMA_URL
        assert {key: attributes[key] for key in COMMON} == {
            "messaging.system": "servicebus",
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": TOPIC,
            "messaging.destination.subscription.name": SUBSCRIPTION,
            "exactly_once.consumer": "greeter",
        }
        enqueued = attributes["messaging.servicebus.message.enqueued_time"]
        assert isinstance(enqueued, int) and sent_at - 5 <= enqueued <= time.time() + 5

    def seen(span: ReadableSpan) -> tuple[object, ...]:
        attributes = dict(span.attributes or {})
        return (
            attributes["exactly_once.outcome"],
            attributes.get("messaging.servicebus.disposition_status"),
            attributes.get("error.type"),
            span.status.status_code is StatusCode.ERROR,
        )

    first, resend = spans_of(new)
    assert seen(first) == ("processed", "complete", None, False)
    assert seen(resend) == ("duplicate", "complete", None, False)
    assert [seen(span) for span in spans_of(reused)] == [
        ("processed", "complete", None, False),
        ("mismatch", "dead_letter", "mismatch", True),
    ]
    assert [seen(span) for span in spans_of(bad)] == [("rejected", "dead_letter", "rejected", True)]
    # Backed off once in its delivery: one span, settled once, as complete.
    assert [seen(span) for span in spans_of(flaky)] == [("processed", "complete", None, False)]
    # Abandoned, then delivered again: the delivery count says which delivery each span was.
    assert [
        (*seen(span), (span.attributes or {})["messaging.servicebus.message.delivery_count"])
        for span in spans_of(buggy)
    ] == [
        ("unexpected_failure", "abandon", "unexpected_failure", True, 1),
        ("processed", "complete", None, False, 2),
    ]
    assert {(s.attributes or {})["messaging.servicebus.message.delivery_count"] for s in spans} == {
        1,
        2,
    }
    # The span continues the producer's trace, carried on the message as the Azure SDKs do.
    assert format(first.context.trace_id, "032x") == PRODUCER_TRACE

    metrics = exported.metrics()
    duration = metrics["messaging.process.duration"]
    assert duration.unit == "s"
    points = duration.data.data_points
    assert all(isinstance(point, HistogramDataPoint) for point in points)
    by_error = {
        str(dict(point.attributes or {}).get("error.type")): getattr(point, "count", 0)
        for point in points
    }
    assert by_error == {"None": 5, "mismatch": 1, "rejected": 1, "unexpected_failure": 1}
    for point in points:
        attributes = dict(point.attributes or {})
        assert attributes["messaging.system"] == "servicebus"
        assert attributes["messaging.operation.name"] == "process"
        assert attributes["messaging.destination.name"] == TOPIC
        assert attributes["messaging.destination.subscription.name"] == SUBSCRIPTION
    assert exported.total("messaging.client.consumed.messages") == expected_spans
    # Ours: one count per delivery by outcome, and the duplicates, mismatches and backoffs.
    assert exported.total("exactly_once.messages") == expected_spans
    assert exported.total("exactly_once.duplicates") == 1
    assert exported.total("exactly_once.mismatches") == 1
    # The flaky one's wait, and the buggy one's immediate retries in its first delivery.
    assert exported.total("exactly_once.backoffs") == 1 + options.backoff.immediate_retries
    assert "exactly_once.takeovers" not in metrics


COMMON = (
    "messaging.system",
    "messaging.operation.name",
    "messaging.operation.type",
    "messaging.destination.name",
    "messaging.destination.subscription.name",
    "exactly_once.consumer",
)


async def test_a_claim_taken_over_is_counted_on_the_delivery_under_way(store: CosmosStore) -> None:
    exported = Exported()
    key = unique("key")
    wanted = Record(key, key, "hash", RecordStatus.IN_PROGRESS, owner="first", lease_seconds=1)
    first = await Claims(store, owner="first", lease_seconds=1).own(wanted)
    await lease_ended(store, first)

    with exported.telemetry.message_span("greeter", key) as span:
        taken = await Claims(store, owner="second").own(wanted)
        exported.telemetry.record(span, "greeter", Decision.complete())

    assert taken.owner == "second"
    assert exported.total("exactly_once.takeovers") == 1


def semantic_convention_names() -> set[str]:
    """Every attribute and metric name in the installed `opentelemetry-semantic-conventions`,
    which is generated from the conventions' registry (stable and incubating modules alike)."""
    import opentelemetry.semconv._incubating.attributes as incubating_attributes
    import opentelemetry.semconv._incubating.metrics as incubating_metrics
    import opentelemetry.semconv.attributes as stable_attributes

    names: set[str] = set()
    for package in (stable_attributes, incubating_attributes, incubating_metrics):
        for module_info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{module_info.name}")
            names.update(value for value in vars(module).values() if isinstance(value, str))
    return names


def test_every_name_the_core_emits_is_the_conventions_or_its_own() -> None:
    """The names were checked by hand against the conventions' model at the pinned version
    (model/messaging/registry.yaml and metrics.yaml at tag v1.40.0); this keeps them true
    against the generated package, so a name the conventions do not have (an
    `azure.servicebus.*` the registry never defined, say) fails here."""
    from opentelemetry.semconv.schemas import Schemas

    assert f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}" == SCHEMA_URL
    assert SCHEMA_URL in {schema.value for schema in Schemas}
    exported = Exported()
    enqueued = datetime(2026, 1, 2, tzinfo=UTC)
    delivered = BrokerDelivery(
        "m-1", Destination.of_entity("events/Subscriptions/audit"), 3, enqueued
    )
    with exported.telemetry.message_span("c", "m-1", delivered=delivered) as span:
        exported.telemetry.record(span, "c", Decision.complete(Outcome.PROCESSED))
    with exported.telemetry.message_span("c", "m-2", delivered=delivered) as span:
        exported.telemetry.record(span, "c", Decision.abandon(Outcome.TRANSIENT_FAILURE, "down"))
    spans = exported.spans.get_finished_spans()
    emitted = {key for span in spans for key in (span.attributes or {})}
    emitted |= set(exported.metrics())
    emitted |= {
        key
        for metric in exported.metrics().values()
        for point in metric.data.data_points
        for key in point.attributes or {}
    }

    ours = {name for name in emitted if name.startswith("exactly_once.")}
    assert emitted - ours <= semantic_convention_names(), emitted - ours
    assert {
        "messaging.servicebus.message.delivery_count",
        "messaging.servicebus.message.enqueued_time",
        "messaging.servicebus.disposition_status",
        "messaging.process.duration",
        "messaging.client.consumed.messages",
        "error.type",
    } <= emitted
    [completed, abandoned] = spans
    assert dict(completed.attributes or {})["messaging.servicebus.message.delivery_count"] == 3
    assert dict(completed.attributes or {})["messaging.servicebus.message.enqueued_time"] == int(
        enqueued.timestamp()
    )
    assert dict(completed.attributes or {})["messaging.servicebus.disposition_status"] == "complete"
    assert dict(abandoned.attributes or {})["error.type"] == "transient_failure"


def test_a_subscription_entity_path_is_a_topic_and_its_subscription() -> None:
    assert Destination.of_entity("events/Subscriptions/audit") == Destination("events", "audit")
    assert Destination.of_entity("orders") == Destination("orders")
    assert json.dumps(Destination("events", "audit").attributes()) == json.dumps(
        {"messaging.destination.name": "events", "messaging.destination.subscription.name": "audit"}
    )


class LockLost(Exception):
    """Stands for the SDK's `MessageLockLostError`: the broker refused the settlement."""


def test_a_settlement_that_raises_is_the_error_type_and_no_disposition() -> None:
    exported = Exported()
    delivered = BrokerDelivery("m-1", Destination("orders"), delivery_count=1)

    with (
        pytest.raises(LockLost),
        exported.telemetry.message_span("c", "m-1", delivered=delivered) as span,
    ):
        exported.telemetry.record(span, "c", Decision.complete())
        raise LockLost("the lock expired before the settlement")

    [finished] = exported.spans.get_finished_spans()
    attributes = dict(finished.attributes or {})
    assert attributes["error.type"] == f"{__name__}.LockLost"
    assert "messaging.servicebus.disposition_status" not in attributes
    assert finished.status.status_code is StatusCode.ERROR
    assert [event.name for event in finished.events] == ["exception"]
    [point] = exported.metrics()["messaging.process.duration"].data.data_points
    assert dict(point.attributes or {})["error.type"] == f"{__name__}.LockLost"
