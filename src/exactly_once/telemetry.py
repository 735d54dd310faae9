"""Spans and counters for every outcome, through the OpenTelemetry API only.

The application chooses the SDK and the exporter (or none: the API's no-op default); the core
names its instruments `exactly_once.*` and tags them with the consumer, outcome and settlement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import metrics, trace

from exactly_once.decisions import Decision

INSTRUMENTATION_NAME = "exactly_once"
MESSAGES_COUNTER = "exactly_once.messages"
BACKOFFS_COUNTER = "exactly_once.backoffs"


class Telemetry:
    """One span per message and one count per decision. Providers default to the global ones."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION_NAME, meter_provider=meter_provider)
        self._messages = meter.create_counter(
            MESSAGES_COUNTER,
            unit="{message}",
            description="Messages decided, by consumer, outcome and settlement",
        )
        self._backoffs = meter.create_counter(
            BACKOFFS_COUNTER,
            unit="{retry}",
            description="Waits before deciding a message again in the same delivery, by outcome "
            "and source (a transient failure backing off instead of being given back)",
        )

    @contextmanager
    def message_span(self, consumer: str, message_id: str | None) -> Iterator[trace.Span]:
        """The span around one message's decision (a consumer span, as messaging spans are)."""
        with self._tracer.start_as_current_span(
            f"exactly_once {consumer}", kind=trace.SpanKind.CONSUMER
        ) as span:
            span.set_attribute("exactly_once.consumer", consumer)
            if message_id is not None:
                span.set_attribute("messaging.message.id", message_id)
            yield span

    def record(self, span: trace.Span, consumer: str, decision: Decision) -> None:
        """Tag the span with the decision and count it."""
        attributes = {
            "exactly_once.consumer": consumer,
            "exactly_once.outcome": decision.outcome.value,
            "exactly_once.settlement": decision.settlement.value,
        }
        span.set_attributes(attributes)
        if decision.dead_letter_reason is not None:
            span.set_attribute("exactly_once.dead_letter_reason", decision.dead_letter_reason)
        if decision.error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, decision.error))
        self._messages.add(1, attributes)

    def count_backoff(self, outcome: str, source: str) -> None:
        """Count one wait before a message is decided again (see `exactly_once.backoff`)."""
        attributes = {"exactly_once.outcome": outcome}
        if source:
            attributes["messaging.destination.name"] = source
        self._backoffs.add(1, attributes)
