"""Trace context on messages: what producers write and what consumers accept."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from orders.tracing import context_from, current_trace_id, current_trace_properties

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_without_a_span_nothing_is_written() -> None:
    assert current_trace_properties() == {} and current_trace_id() is None


def test_a_span_is_written_as_traceparent_and_diagnostic_id() -> None:
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        properties = current_trace_properties()
        trace_id = current_trace_id()

    assert properties["traceparent"] == properties["Diagnostic-Id"]
    assert trace_id == format(span.get_span_context().trace_id, "032x")
    assert properties["traceparent"].split("-")[1] == trace_id


def test_a_consumer_continues_traceparent_or_an_older_producers_diagnostic_id() -> None:
    for properties in ({"traceparent": PARENT}, {"Diagnostic-Id": PARENT}):
        parent = trace.get_current_span(context_from(properties)).get_span_context()
        assert format(parent.trace_id, "032x") == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert format(parent.span_id, "016x") == "00f067aa0ba902b7"
    garbage = trace.get_current_span(context_from({"traceparent": "not\na-trace"}))
    assert not garbage.get_span_context().is_valid
