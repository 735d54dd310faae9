"""Spans, counters and one structured log line per message outcome.

Providers are injectable so tests read counters with an in-memory reader; production uses the
global providers, which `configure_azure_monitor` fills when App Insights is configured.

A consumer's span is the core's (`exactly_once.telemetry`): `process <destination>` by the
OpenTelemetry messaging conventions, with the Service Bus attributes and the disposition, and
the conventions' metrics beside the app's `orders.*` counters (which the dashboards and alerts
in infra/ query). Inside the core worker's span for the same delivery, it is that span.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, MeterProvider
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.telemetry import BrokerDelivery, Destination, Telemetry

# Log values the producer's bytes cannot forge: the core's rule, for the app's lines too.
from exactly_once.telemetry import log_value as log_value
from orders.domain.received import ReceivedOrderMessage

INSTRUMENTATION_NAME = "orders.consumer"
# A decision's log line when the host's binding did not carry the delivery count.
UNKNOWN = "unknown"

logger = logging.getLogger("orders.consumer")


class HttpTelemetry:
    """The HTTP API's idempotency counters: how often retries are answered, and how."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = metrics.get_meter("orders.http", meter_provider=meter_provider)

        def counter(name: str, description: str) -> Counter:
            return meter.create_counter(name, unit="{request}", description=description)

        self.replays = counter("orders.http.replays", "Retries answered with the first response")
        self.in_progress = counter("orders.http.in_progress", "409: same key still in progress")
        self.key_reused = counter("orders.http.key_reused", "422: a key reused for another body")
        self.takeovers = counter("orders.http.takeovers", "Expired claims taken over")
        self.order_id_conflicts = counter(
            "orders.http.order_id_conflicts", "409: an orderId taken by a different payload"
        )
        self.server_errors = counter("orders.http.server_errors", "5xx answers")


class ConsumerTelemetry:
    """The order consumer's span (on `destination`, the orders queue, when named) and its
    `orders.*` counters."""

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        destination: str | None = None,
    ) -> None:
        meter = metrics.get_meter(INSTRUMENTATION_NAME, meter_provider=meter_provider)
        self._messaging = MessagingSpans(destination, meter_provider, tracer_provider)
        self._processed = meter.create_counter(
            "orders.processed", unit="{message}", description="New orders written"
        )
        self._duplicates = meter.create_counter(
            "orders.duplicates", unit="{message}", description="Redeliveries recognised"
        )
        self._mismatches = meter.create_counter(
            "orders.mismatches", unit="{message}", description="orderId reused with new payload"
        )
        self._dead_lettered = meter.create_counter(
            "orders.dead_lettered", unit="{message}", description="Messages dead-lettered"
        )
        self._abandoned = meter.create_counter(
            "orders.abandoned", unit="{message}", description="Messages abandoned for retry"
        )

    @contextmanager
    def message_span(self, message: ReceivedOrderMessage) -> Iterator[Span]:
        # A child of the producer's span when the message carries its context.
        with self._messaging.span(message) as span:
            yield span

    def record(self, span: Span, message: ReceivedOrderMessage, decision: Decision) -> None:
        self._messaging.record(span, decision)
        dedup_key = decision.key or message.message_id or ""
        span.set_attribute("orders.dedup_key", dedup_key)
        span.set_attribute("orders.outcome", str(decision.outcome))
        attributes = {"outcome": str(decision.outcome)}
        if decision.dead_letter_reason:
            attributes["reason"] = decision.dead_letter_reason
            span.set_attribute("orders.dead_letter_reason", decision.dead_letter_reason)

        match decision.outcome:
            case Outcome.PROCESSED:
                self._processed.add(1, attributes)
            case Outcome.DUPLICATE:
                self._duplicates.add(1, attributes)
            case Outcome.MISMATCH:
                self._mismatches.add(1, attributes)
                self._dead_lettered.add(1, attributes)
            case Outcome.REJECTED | Outcome.STORE_REFUSED | Outcome.EFFECT_CONFLICT:
                self._dead_lettered.add(1, attributes)
            case Outcome.TRANSIENT_FAILURE | Outcome.UNEXPECTED_FAILURE:
                self._abandoned.add(1, attributes)
                span.set_status(Status(StatusCode.ERROR, decision.error or decision.outcome))

        log_fields = {
            "outcome": str(decision.outcome),
            "settlement": decision.settlement.value,
            "dedup_key": dedup_key,
            "message_id": message.message_id,
            "correlation_id": message.correlation_id,
            "delivery_count": UNKNOWN if message.delivery_count is None else message.delivery_count,
            "dead_letter_reason": decision.dead_letter_reason,
        }
        text = " ".join(
            f"{key}={log_value(value)}" for key, value in log_fields.items() if value is not None
        )
        alert = _ALERTS.get(decision.outcome)
        if alert is not None:
            logger.error(
                "%s: %s; %s",
                alert,
                text,
                log_value(decision.dead_letter_description),
                extra=log_fields,
            )
        elif decision.outcome is Outcome.UNEXPECTED_FAILURE:
            logger.error(
                "order message failed unexpectedly: %s error=%s",
                text,
                log_value(decision.error),
                extra=log_fields,
            )
        elif decision.outcome in (Outcome.REJECTED, Outcome.TRANSIENT_FAILURE):
            logger.warning("order message %s: %s", str(decision.outcome), text, extra=log_fields)
        else:
            logger.info("order message %s: %s", str(decision.outcome), text, extra=log_fields)


# The order consumer's outcomes logged as errors, each with what an operator reads first.
_ALERTS: dict[StrEnum, str] = {
    # A producer reused an orderId for a different order.
    Outcome.MISMATCH: "ALERT orderId reused with a different payload",
    # A document of the order stored without the order: nothing the message did, and nothing
    # a redelivery can mend; an operator looks at the partition.
    Outcome.EFFECT_CONFLICT: "order message conflicts with a stored document",
}


class SubscriberTelemetry:
    """Spans and `orders.<consumer>.*` counters for one fan-out consumer (billing, shipping,
    status): what the order consumer's `ConsumerTelemetry` gives the orders queue."""

    def __init__(
        self,
        consumer: str,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        destination: str | None = None,
    ) -> None:
        self._consumer = consumer
        name = f"orders.{consumer}"
        meter = metrics.get_meter(name, meter_provider=meter_provider)
        self._messaging = MessagingSpans(destination, meter_provider, tracer_provider)
        self._decisions = meter.create_counter(
            f"{name}.decisions", unit="{message}", description=f"{consumer}: messages decided"
        )
        self._dead_lettered = meter.create_counter(
            f"{name}.dead_lettered", unit="{message}", description=f"{consumer}: dead-lettered"
        )
        self._abandoned = meter.create_counter(
            f"{name}.abandoned", unit="{message}", description=f"{consumer}: abandoned for retry"
        )

    @contextmanager
    def message_span(self, message: ReceivedOrderMessage) -> Iterator[Span]:
        # A child of the dispatcher's (or producer's) span when the message carries its context.
        with self._messaging.span(message, {"orders.consumer": self._consumer}) as span:
            yield span

    def record(self, span: Span, decision: Decision) -> None:
        self._messaging.record(span, decision)
        attributes = {"outcome": str(decision.outcome), "settlement": decision.settlement.value}
        span.set_attribute("orders.outcome", str(decision.outcome))
        if decision.key:
            span.set_attribute("orders.order_id", decision.key)
        if decision.dead_letter_reason:
            attributes["reason"] = decision.dead_letter_reason
            span.set_attribute("orders.dead_letter_reason", decision.dead_letter_reason)
        self._decisions.add(1, attributes)
        match decision.settlement:
            case Settlement.DEAD_LETTER:
                self._dead_lettered.add(1, attributes)
            case Settlement.ABANDON:
                self._abandoned.add(1, attributes)
        if decision.outcome in (Outcome.TRANSIENT_FAILURE, Outcome.UNEXPECTED_FAILURE):
            span.set_status(Status(StatusCode.ERROR, decision.error or decision.outcome))


class DispatcherTelemetry:
    """The outbox dispatcher's span per batch, its `orders.dispatcher.*` counters, and its lag:
    how long each outbox document waited, from its write (Cosmos DB's `_ts`) to this attempt to
    publish it. Recorded on every attempt, retries included, so a dispatcher that keeps failing
    shows a lag that keeps growing (the alert in infra/modules/dashboards.bicep)."""

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        meter = metrics.get_meter("orders.dispatcher", meter_provider=meter_provider)
        self._tracer = trace.get_tracer("orders.dispatcher", tracer_provider=tracer_provider)
        self._clock = clock
        self._published = meter.create_counter(
            "orders.dispatcher.published", unit="{event}", description="Events published, marked"
        )
        self._failures = meter.create_counter(
            "orders.dispatcher.failures",
            unit="{batch}",
            description="Batches that failed (publish or mark) and will be read again",
        )
        self._parked = meter.create_counter(
            "orders.dispatcher.parked",
            unit="{document}",
            description="Outbox documents set aside because they can never be published",
        )
        self._lag = meter.create_histogram(
            "orders.dispatcher.lag",
            unit="s",
            description="Seconds from an outbox document's write to an attempt to publish it",
        )

    @contextmanager
    def batch_span(self, documents: int) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            "orders.dispatcher.dispatch",
            kind=trace.SpanKind.PRODUCER,
            attributes={"orders.dispatcher.documents": documents},
        ) as span:
            yield span

    def attempting(self, document: Mapping[str, object]) -> None:
        """Before publishing `document`: record how long it has waited (its `_ts`, if any)."""
        written = document.get("_ts")
        if isinstance(written, int | float) and not isinstance(written, bool):
            self._lag.record(max(0.0, self._clock() - float(written)))

    def published(self, span: Span, count: int) -> None:
        span.set_attribute("orders.dispatcher.published", count)
        if count:
            self._published.add(count)

    def parked(self, reason: str) -> None:
        """An outbox document set aside for `reason` (the dispatcher's `ParkReason`)."""
        self._parked.add(1, {"reason": reason})

    def failed(self, span: Span, error: BaseException) -> None:
        self._failures.add(1, {"error": type(error).__name__})
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


class MessagingSpans:
    """The core's `process` span for a received order message, on `destination` (an entity
    path: `queue` or `topic/Subscriptions/subscription`; None when the host does not say)."""

    def __init__(
        self,
        destination: str | None,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._destination = Destination.of_entity(destination) if destination else None
        self._telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)

    @contextmanager
    def span(
        self, message: ReceivedOrderMessage, extra: Mapping[str, AttributeValue] | None = None
    ) -> Iterator[Span]:
        delivered = delivered_of(message, self._destination)
        with self._telemetry.message_span(None, message.message_id, delivered=delivered) as span:
            span.set_attributes(dict(extra or {}))
            yield span

    def record(self, span: Span, decision: Decision) -> None:
        """The disposition (and error.type) by the conventions, and the core's counts."""
        self._telemetry.record(span, None, decision)


def delivered_of(
    message: ReceivedOrderMessage, destination: Destination | None = None
) -> BrokerDelivery:
    """What the core's telemetry records of a received order message."""
    return BrokerDelivery(
        message.message_id,
        destination,
        # Earlier attempts as the SDK reports them; the conventions count this one too. Not
        # carried by the binding: no attribute, never a count of 1.
        delivery_count=None if message.delivery_count is None else message.delivery_count + 1,
        trace_context=message.trace_context,
    )
