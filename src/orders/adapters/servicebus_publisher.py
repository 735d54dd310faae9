"""Publishing an accepted order to the queue with MessageId = orderId.

The MessageId is what makes a second publish harmless: the queue's duplicate detection drops it
inside its window, and the idempotent consumer recognises it after that.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)
from opentelemetry import trace
from opentelemetry.trace import TracerProvider

from orders.domain.model import OrderPlaced
from orders.exceptions import PublishError, TransientPublishError
from orders.tracing import current_trace_id, current_trace_properties

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OperationTimeoutError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
    ConnectionError,
    asyncio.TimeoutError,
)


def order_message_body(order: OrderPlaced) -> bytes:
    """The validated order as the consumer's contract expects it (prices as JSON numbers).

    Prices have at most 15 significant digits, so a double carries them exactly and the
    consumer, which parses numbers as decimals, reads back the same amounts.
    """
    return json.dumps(order.canonical_payload()).encode()


class ServiceBusOrderPublisher:
    """`OrderPublisher` over one long-lived sender of the process's client."""

    def __init__(
        self,
        client: ServiceBusClient,
        queue_name: str,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._client = client
        self._tracer = trace.get_tracer("orders.publisher", tracer_provider=tracer_provider)
        self._queue_name = queue_name
        self._sender: ServiceBusSender | None = None
        # One send at a time: the SDK's sender (re)opens its link without a lock of its own,
        # and concurrent opens race. A send takes milliseconds, so the wait is short.
        self._lock = asyncio.Lock()

    async def publish(self, order: OrderPlaced) -> None:
        with self._tracer.start_as_current_span(
            "orders.publish",
            kind=trace.SpanKind.PRODUCER,
            attributes={"messaging.system": "servicebus", "messaging.message.id": order.order_id},
        ):
            message = ServiceBusMessage(
                order_message_body(order),
                message_id=order.order_id,
                content_type="application/json",
                subject="OrderPlaced",
                correlation_id=current_trace_id(),
                application_properties=cast(dict[str | bytes, Any], current_trace_properties()),
            )
            await self._send(message)

    async def _send(self, message: ServiceBusMessage) -> None:
        async with self._lock:
            try:
                if self._sender is None:
                    self._sender = self._client.get_queue_sender(self._queue_name)
                await self._sender.send_messages(message)
            except TRANSIENT_ERRORS as exc:
                raise TransientPublishError(f"Service Bus send failed: {exc!r}") from exc
            except ServiceBusError as exc:
                raise PublishError(f"Service Bus rejected the send: {exc!r}") from exc

    async def close(self) -> None:
        async with self._lock:
            if self._sender is not None:
                await self._sender.close()
                self._sender = None
