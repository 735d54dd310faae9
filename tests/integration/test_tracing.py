"""One trace id from the HTTP request to the stored order: W3C trace context travels on the
message (traceparent, tracestate, Diagnostic-Id) and the consumer's span is a child of the
publish span. Real broker (our emulator, through the SDK); the stores are fakes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from azure.servicebus.aio import ServiceBusClient
from fakes import (
    LAYOUT,
    FakeIdempotencyStore,
    FakeLeaseStore,
    FakeOrderReader,
    FakeOrderStore,
    NoChangesFeed,
    order_payload,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from orders.adapters.servicebus import to_received_order_message
from orders.adapters.servicebus_publisher import ServiceBusEventPublisher, ServiceBusOrderPublisher
from orders.bootstrap import HttpRuntime
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints.http_api import create_app
from orders.entrypoints.localstack import QueueOptions
from orders.observability import ConsumerTelemetry
from orders.service.consumer import OrderConsumer
from orders.service.dispatcher import OutboxDispatcher
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.order_lookup import OrderLookup
from servicebus_emulator import RunningEmulator, start_in_background

QUEUE = "orders"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    running = start_in_background(config=QueueOptions(name=QUEUE).config())
    yield running
    running.stop()


SENT = (
    "messaging.system",
    "messaging.operation.name",
    "messaging.operation.type",
    "messaging.destination.name",
    "messaging.message.id",
)
RECEIVED = (
    "messaging.system",
    "messaging.operation.name",
    "messaging.destination.name",
    "messaging.message.id",
    "messaging.servicebus.message.delivery_count",
    "messaging.servicebus.disposition_status",
)


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    [span] = [span for span in spans if span.name == name]
    return span


async def test_one_trace_links_post_publish_and_consume(emulator: RunningEmulator) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    order_id = f"o-{uuid.uuid4().hex[:10]}"
    store = FakeOrderStore()

    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        publisher = ServiceBusOrderPublisher(client, QUEUE, tracer_provider=provider)
        keys = FakeIdempotencyStore()
        intake = IdempotentOrderIntake(keys, publisher, ttl_seconds=600)

        async def runtime() -> HttpRuntime:
            return HttpRuntime(intake, OrderLookup(FakeOrderReader(store), keys, LAYOUT), "tests")

        app = create_app(runtime, tracer_provider=provider)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            # The caller's own trace is continued, not replaced.
            posted = await http.post(
                "/api/orders",
                json=order_payload(order_id),
                headers={
                    "Idempotency-Key": "k1",
                    "traceparent": f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01",
                },
            )
        await publisher.close()
        async with client.get_queue_receiver(QUEUE) as receiver:
            [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            telemetry = ConsumerTelemetry(tracer_provider=provider, destination=QUEUE)
            consumer = OrderConsumer(store, LAYOUT, telemetry)
            decision = await consumer.handle(to_received_order_message(message))
            await receiver.complete_message(message)

    spans = exporter.get_finished_spans()
    server = by_name(spans, "POST /api/orders")
    publish = by_name(spans, f"send {QUEUE}")
    consume = by_name(spans, f"process {QUEUE}")
    assert posted.status_code == 202 and decision.outcome.value == "processed"
    assert {format(s.context.trace_id, "032x") for s in (server, publish, consume)} == {
        CLIENT_TRACE
    }
    assert publish.parent is not None and publish.parent.span_id == server.context.span_id
    assert consume.parent is not None and consume.parent.span_id == publish.context.span_id
    assert publish.kind is SpanKind.PRODUCER and consume.kind is SpanKind.CONSUMER
    # Both by the OpenTelemetry messaging conventions (exactly_once.telemetry.SEMCONV_VERSION).
    assert {key: (publish.attributes or {})[key] for key in SENT} == {
        "messaging.system": "servicebus",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": QUEUE,
        "messaging.message.id": order_id,
    }
    assert {key: (consume.attributes or {})[key] for key in RECEIVED} == {
        "messaging.system": "servicebus",
        "messaging.operation.name": "process",
        "messaging.destination.name": QUEUE,
        "messaging.message.id": order_id,
        "messaging.servicebus.message.delivery_count": 1,
        "messaging.servicebus.disposition_status": "complete",
    }
    # The message carries it as the Azure SDKs do, and the CorrelationId is the trace id.
    properties = message.application_properties or {}
    assert properties[b"Diagnostic-Id"] == properties[b"traceparent"]
    assert message.correlation_id == CLIENT_TRACE
    # The owner travels beside the trace and is kept on the stored order.
    assert store.partitions[order_id][order_id]["ownerScope"] == "app:tests"


async def test_the_trace_continues_through_the_outbox_dispatcher_to_a_subscriber(
    emulator: RunningEmulator,
) -> None:
    """The consumer stores its trace with the outbox event; the dispatcher publishes in it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    order_id = f"o-{uuid.uuid4().hex[:10]}"
    store = FakeOrderStore()
    traceparent = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"
    received = ReceivedOrderMessage(
        body=json.dumps(order_payload(order_id)).encode(),
        message_id=order_id,
        trace_context={"traceparent": traceparent},
    )
    await OrderConsumer(store, LAYOUT, ConsumerTelemetry(tracer_provider=provider)).handle(received)
    topic = QueueOptions().events_topic

    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        events = ServiceBusEventPublisher(client, topic, tracer_provider=provider)
        unused = FakeLeaseStore()
        dispatcher = OutboxDispatcher(MarkingFeed(), events, unused, LAYOUT)
        assert await dispatcher.dispatch(store.documents(order_id)) == 1
        await events.close()
        async with client.get_subscription_receiver(topic, "shipping") as receiver:
            [event] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.complete_message(event)

    spans = exporter.get_finished_spans()
    consume = by_name(spans, "process")  # no destination named: the operation alone
    dispatch = by_name(spans, f"send {topic}")
    assert format(dispatch.context.trace_id, "032x") == CLIENT_TRACE
    assert dispatch.parent is not None and dispatch.parent.span_id == consume.context.span_id
    properties = event.application_properties or {}
    assert CLIENT_TRACE in str(properties[b"traceparent"])
    [entry] = [d for d in store.documents(order_id) if d["type"] == "outbox"]
    assert event.message_id == entry["messageId"]  # drawn when the entry was written
    assert event.correlation_id == order_id


class MarkingFeed(NoChangesFeed):
    """The dispatcher's `dispatch` only marks; reading the feed is not under test here."""

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        self.marked = document["id"]
