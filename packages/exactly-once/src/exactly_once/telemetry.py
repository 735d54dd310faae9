"""Spans and metrics by the OpenTelemetry messaging semantic conventions, through the API only.

The application chooses the SDK and the exporter (or none: the API's no-op default). The names
follow the messaging and Azure messaging conventions at `SEMCONV_VERSION` (their status is
Development, so the version is pinned here and stated as the tracer's schema URL): one
`process <destination>` span (kind CONSUMER) per delivery with the Service Bus attributes, the
histogram `messaging.process.duration` and the counter `messaging.client.consumed.messages`.
What the conventions have no name for is ours, under `exactly_once.*`: the decision's outcome,
and the counters for messages, duplicates, mismatches, takeovers and backoffs.

One delivery, one span: whoever settles (the worker, `ExactlyOnceConsumer.process`) opens it,
and the decisions made inside it (a backoff decides again) enrich that span rather than open
their own; it ends with the settlement, whose disposition it records.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue

from exactly_once._logs import log_value
from exactly_once.decisions import Outcome, Settleable, Settlement

__all__ = [
    "INSTRUMENTATION_NAME",
    "SCHEMA_URL",
    "SEMCONV_VERSION",
    "BrokerDelivery",
    "Destination",
    "Telemetry",
    "failed",
    "log_value",
    "took_over",
]

INSTRUMENTATION_NAME = "exactly_once"
SEMCONV_VERSION = "1.40.0"
"""The semantic-conventions release whose messaging and Azure messaging names we emit."""
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

MESSAGING_SYSTEM = "servicebus"
PROCESS = "process"
PROCESS_DURATION = "messaging.process.duration"
CONSUMED_MESSAGES = "messaging.client.consumed.messages"
MESSAGES_COUNTER = "exactly_once.messages"
DUPLICATES_COUNTER = "exactly_once.duplicates"
MISMATCHES_COUNTER = "exactly_once.mismatches"
TAKEOVERS_COUNTER = "exactly_once.takeovers"
BACKOFFS_COUNTER = "exactly_once.backoffs"

# The Service Bus attributes as the conventions' registry names them (model/messaging/registry.yaml
# at v1.40.0, and still so at v1.44.0): under `messaging.servicebus.*`.
DISPOSITION_STATUS = "messaging.servicebus.disposition_status"
DELIVERY_COUNT = "messaging.servicebus.message.delivery_count"
ENQUEUED_TIME = "messaging.servicebus.message.enqueued_time"

# The Service Bus dispositions by settlement (the conventions' values are our settlements').
DISPOSITIONS = {
    Settlement.COMPLETE.value: "complete",
    Settlement.ABANDON.value: "abandon",
    Settlement.DEAD_LETTER.value: "dead_letter",
    # A delayed retry completes the delivery once its copy is scheduled.
    Settlement.RETRY_LATER.value: "complete",
}


@dataclass(frozen=True)
class Destination:
    """Where a message was received from: a queue, or a topic and one of its subscriptions."""

    name: str
    subscription: str | None = None

    @classmethod
    def of_entity(cls, entity_path: str) -> Destination:
        """From an entity path as the SDK names it: `queue` or `topic/Subscriptions/sub`."""
        topic, separator, subscription = entity_path.partition("/Subscriptions/")
        return cls(topic, subscription) if separator else cls(entity_path)

    def attributes(self) -> dict[str, AttributeValue]:
        """The destination attributes, on the span and on the metrics alike."""
        named: dict[str, AttributeValue] = {"messaging.destination.name": self.name}
        if self.subscription is not None:
            named["messaging.destination.subscription.name"] = self.subscription
        return named


@dataclass(frozen=True)
class BrokerDelivery:
    """What the broker said of one delivery, in broker-neutral terms (the adapter fills it)."""

    message_id: str | None
    destination: Destination | None = None
    delivery_count: int | None = None
    """Deliveries attempted, this one included (1 for the first), as the conventions count."""
    enqueued_time: datetime | None = None
    trace_context: Mapping[str, str] | None = None
    """The producer's W3C context (`traceparent`, `tracestate`), continued by the span."""


@dataclass
class _Delivery:
    """The open span of one delivery and the last decision made in it."""

    telemetry: Telemetry
    span: trace.Span
    consumer: str | None
    destination: Destination | None
    started: float
    decision: Settleable | None = None
    error_type: str | None = None
    """Set when the delivery failed around its decision (the handler raised, settling did)."""

    def joined(self, consumer: str | None, delivered: BrokerDelivery | None) -> None:
        """A decision of `consumer` joins this delivery; a destination it knows and the host
        did not (the Functions binding names none) names the span."""
        if consumer is not None:
            self.consumer = consumer
            self.span.set_attribute("exactly_once.consumer", consumer)
        if self.destination is None and delivered is not None and delivered.destination:
            self.destination = delivered.destination
            self.span.set_attributes(self.destination.attributes())
            self.span.update_name(f"{PROCESS} {self.destination.name}")


_current: contextvars.ContextVar[_Delivery | None] = contextvars.ContextVar(
    "exactly_once_delivery", default=None
)


class Telemetry:
    """One span per delivery and the counts of its decision. Providers default to the global
    ones."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(
            INSTRUMENTATION_NAME, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
        )
        meter = metrics.get_meter(
            INSTRUMENTATION_NAME, meter_provider=meter_provider, schema_url=SCHEMA_URL
        )
        self._duration = meter.create_histogram(
            PROCESS_DURATION, unit="s", description="Duration of processing operation."
        )
        self._consumed = meter.create_counter(
            CONSUMED_MESSAGES,
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )

        def counter(name: str, unit: str, description: str) -> metrics.Counter:
            return meter.create_counter(name, unit=unit, description=description)

        self._messages = counter(
            MESSAGES_COUNTER, "{message}", "Messages decided, by consumer, outcome and settlement"
        )
        self._duplicates = counter(
            DUPLICATES_COUNTER, "{message}", "Deliveries whose effect an earlier one had done"
        )
        self._mismatches = counter(
            MISMATCHES_COUNTER, "{message}", "Keys reused with another payload (dead-lettered)"
        )
        self._takeovers = counter(
            TAKEOVERS_COUNTER, "{claim}", "Claims taken over from another owner whose lease ended"
        )
        self._backoffs = counter(
            BACKOFFS_COUNTER,
            "{retry}",
            "Waits before deciding a message again in the same delivery, by outcome "
            "and source (a transient failure backing off instead of being given back)",
        )

    @contextmanager
    def message_span(
        self,
        consumer: str | None,
        message_id: str | None,
        *,
        delivered: BrokerDelivery | None = None,
    ) -> Iterator[trace.Span]:
        """The `process` span of one delivery; inside one already open, that one (a decision
        made again after a backoff belongs to the same delivery)."""
        open_delivery = _current.get()
        if open_delivery is not None:
            open_delivery.joined(consumer, delivered)
            yield open_delivery.span
            return
        delivered = delivered or BrokerDelivery(message_id)
        destination = delivered.destination
        name = f"{PROCESS} {destination.name}" if destination is not None else PROCESS
        attributes = self._span_attributes(delivered)
        if consumer is not None:
            attributes["exactly_once.consumer"] = consumer
        with self._tracer.start_as_current_span(
            name,
            context=_producer_context(delivered.trace_context),
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            delivery = _Delivery(self, span, consumer, destination, time.perf_counter())
            token = _current.set(delivery)
            try:
                yield span
            except BaseException as exc:
                failed(exc)
                raise
            finally:
                _current.reset(token)
                self._finish(delivery)

    def record(self, span: trace.Span, consumer: str | None, decision: Settleable) -> None:
        """Tag the delivery's span with `decision`; the last one made in a delivery is the one
        settled, so the disposition and the counts are taken when the span ends."""
        outcome = str(getattr(decision, "outcome", ""))
        attributes: dict[str, AttributeValue] = {
            "exactly_once.outcome": outcome,
            "exactly_once.settlement": str(decision.settlement),
        }
        if consumer is not None:
            attributes["exactly_once.consumer"] = consumer
        span.set_attributes(attributes)
        if decision.dead_letter_reason is not None:
            span.set_attribute("exactly_once.dead_letter_reason", decision.dead_letter_reason)
        open_delivery = _current.get()
        if open_delivery is not None and open_delivery.span is span:
            open_delivery.decision = decision
        else:
            # A span of the caller's own: count this decision now.
            self._count(decision, consumer)

    def count_backoff(self, outcome: str, source: str) -> None:
        """Count one wait before a message is decided again (see `exactly_once._backoff`)."""
        attributes = {"exactly_once.outcome": outcome}
        if source:
            attributes["messaging.destination.name"] = source
        self._backoffs.add(1, attributes)

    def count_takeover(self) -> None:
        """Count one claim taken over from an owner whose lease ended (`exactly_once._claims`)."""
        self._takeovers.add(1)

    def _span_attributes(self, delivered: BrokerDelivery) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.name": PROCESS,
            "messaging.operation.type": PROCESS,
        }
        if delivered.destination is not None:
            attributes.update(delivered.destination.attributes())
        if delivered.message_id is not None:
            attributes["messaging.message.id"] = delivered.message_id
        if delivered.delivery_count is not None and delivered.delivery_count > 0:
            attributes[DELIVERY_COUNT] = delivered.delivery_count
        if delivered.enqueued_time is not None:
            # Epoch seconds, as the conventions' example (1701393730) has it.
            attributes[ENQUEUED_TIME] = int(delivered.enqueued_time.timestamp())
        return attributes

    def _finish(self, delivery: _Delivery) -> None:
        decision, span, error_type = delivery.decision, delivery.span, delivery.error_type
        if decision is not None:
            settlement = str(decision.settlement)
            disposition = DISPOSITIONS.get(settlement, settlement)
            if error_type is None:
                span.set_attribute(DISPOSITION_STATUS, disposition)
            if error_type is None and settlement != Settlement.COMPLETE.value:
                # Handed back or dead-lettered: the message was not processed, and why is the
                # outcome (a low-cardinality name, as error.type wants).
                error_type = str(getattr(decision, "outcome", "")) or settlement
            self._count(decision, delivery.consumer)
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            error = getattr(decision, "error", None) if decision is not None else None
            span.set_status(trace.Status(trace.StatusCode.ERROR, error or error_type))
        metric_attributes: dict[str, AttributeValue] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.name": PROCESS,
        }
        if delivery.destination is not None:
            metric_attributes.update(delivery.destination.attributes())
        if error_type is not None:
            metric_attributes["error.type"] = error_type
        self._duration.record(time.perf_counter() - delivery.started, metric_attributes)
        self._consumed.add(1, metric_attributes)

    def _count(self, decision: Settleable, consumer: str | None) -> None:
        outcome = str(getattr(decision, "outcome", ""))
        attributes: dict[str, AttributeValue] = {
            "exactly_once.outcome": outcome,
            "exactly_once.settlement": str(decision.settlement),
        }
        if consumer is not None:
            attributes["exactly_once.consumer"] = consumer
        self._messages.add(1, attributes)
        if outcome == Outcome.DUPLICATE.value:
            self._duplicates.add(1, attributes)
        elif outcome == Outcome.MISMATCH.value:
            self._mismatches.add(1, attributes)


def failed(exc: BaseException) -> None:
    """Mark the delivery under way as failed by `exc` (the handler raised, or settling did: a
    lost lock), whatever its decision said; its error.type is the exception's type."""
    delivery = _current.get()
    if delivery is not None:
        delivery.error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        delivery.span.record_exception(exc)


def took_over() -> None:
    """Count a takeover on the telemetry of the delivery under way (the global providers'
    outside one): the claim logic then needs no telemetry of its own."""
    delivery = _current.get()
    (delivery.telemetry if delivery is not None else _default()).count_takeover()


_fallback: list[Telemetry] = []


def _default() -> Telemetry:
    if not _fallback:
        _fallback.append(Telemetry())
    return _fallback[0]


def _producer_context(carried: Mapping[str, str] | None) -> Context | None:
    """The producer's context from W3C properties; None (the current context) without them."""
    if not carried:
        return None
    carrier = {key: carried[key] for key in ("traceparent", "tracestate") if key in carried}
    if "traceparent" not in carrier and "Diagnostic-Id" in carried:
        carrier["traceparent"] = carried["Diagnostic-Id"]
    return propagate.extract(carrier) if carrier else None
