"""W3C trace context across the broker: producers put it on the message, consumers continue it.

The Azure SDKs carry it the same way when their own tracing is on: `traceparent` (and
`tracestate`) as application properties, plus `Diagnostic-Id` with the same value, which older
consumers read. A consumer's span is then a child of the producer's, so one trace id follows an
order from the HTTP request to the stored document.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
DIAGNOSTIC_ID = "Diagnostic-Id"
CARRIED = (TRACEPARENT, TRACESTATE, DIAGNOSTIC_ID)


def current_trace_properties() -> dict[str, str]:
    """The active span's context as message application properties (empty without a span)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if TRACEPARENT in carrier:
        carrier[DIAGNOSTIC_ID] = carrier[TRACEPARENT]
    return carrier


def current_trace_id() -> str | None:
    """The active trace id as 32 hex digits (a CorrelationId logs and traces share)."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def context_from(properties: Mapping[str, str]) -> Context:
    """The producer's context from a message's properties (`Diagnostic-Id` as a fallback)."""
    carrier = {key: properties[key] for key in (TRACEPARENT, TRACESTATE) if key in properties}
    if TRACEPARENT not in carrier and DIAGNOSTIC_ID in properties:
        carrier[TRACEPARENT] = properties[DIAGNOSTIC_ID]
    return propagate.extract(carrier)
