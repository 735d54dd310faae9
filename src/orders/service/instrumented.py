"""Every fan-out consumer (billing, shipping, status) under the same spans and counters.

The order consumer instruments itself (`ConsumerTelemetry`); the subscribers' cores stay free of
telemetry and get it here, one wrapper for all three, in every host that builds them (the
Functions triggers and `orders worker`).
"""

from __future__ import annotations

from exactly_once.decisions import Decision
from orders.domain.received import ReceivedOrderMessage
from orders.observability import SubscriberTelemetry
from orders.service.ports import MessageHandler


class InstrumentedHandler:
    """A `MessageHandler` that decides through `handler` inside a span, and counts the outcome."""

    def __init__(self, handler: MessageHandler, telemetry: SubscriberTelemetry) -> None:
        self.handler = handler
        self._telemetry = telemetry

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        with self._telemetry.message_span(message) as span:
            decision = await self.handler.handle(message)
            self._telemetry.record(span, decision)
            return decision
