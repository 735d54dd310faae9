"""Publishing with a MessageId that stays the same for every publish of one thing: an accepted
order to the queue (orderId), an outbox event to the topic (the `messageId` stored on its outbox
entry: its eventId and a nonce no other sender can guess).

The MessageId is what makes a second publish harmless: the entity's duplicate detection drops it
inside its window, and the idempotent consumers recognise it after that.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    OperationTimeoutError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, TracerProvider

from orders.domain.events import OrderEvent
from orders.domain.model import OrderPlaced
from orders.domain.ownership import OWNER_PROPERTY
from orders.domain.status import OrderStatusChanged, new_status_message_id
from orders.exceptions import PublishError, PublishRefusedError, TransientPublishError
from orders.tracing import context_from, current_trace_id, current_trace_properties

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


class _OneSender:
    """One long-lived sender of the process's client, for a queue or a topic."""

    def __init__(
        self,
        client: ServiceBusClient,
        entity: str,
        *,
        topic: bool = False,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._client = client
        self._tracer = trace.get_tracer("orders.publisher", tracer_provider=tracer_provider)
        self._entity = entity
        self._topic = topic
        self._sender: ServiceBusSender | None = None
        # One send at a time: the SDK's sender (re)opens its link without a lock of its own,
        # and concurrent opens race. A send takes milliseconds, so the wait is short.
        self._lock = asyncio.Lock()

    async def _send(self, message: ServiceBusMessage) -> None:
        async with self._lock:
            try:
                if self._sender is None:
                    self._sender = (
                        self._client.get_topic_sender(self._entity)
                        if self._topic
                        else self._client.get_queue_sender(self._entity)
                    )
                await self._sender.send_messages(message)
            except TRANSIENT_ERRORS as exc:
                raise TransientPublishError(f"Service Bus send failed: {exc!r}") from exc
            except MessageSizeExceededError as exc:
                # The message itself, not the broker's state: no retry sends it.
                raise PublishRefusedError(f"Service Bus refused the message: {exc}") from exc
            except ServiceBusError as exc:
                raise PublishError(f"Service Bus rejected the send: {exc!r}") from exc

    @contextmanager
    def _send_span(self, message_id: str, context: Context | None = None) -> Iterator[Span]:
        """The producer's `send <destination>` span, by the OpenTelemetry messaging conventions
        the consumers' spans follow (`exactly_once.telemetry`)."""
        with self._tracer.start_as_current_span(
            f"send {self._entity}",
            context=context,
            kind=trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": "servicebus",
                "messaging.operation.name": "send",
                "messaging.operation.type": "send",
                "messaging.destination.name": self._entity,
                "messaging.message.id": message_id,
            },
        ) as span:
            yield span

    async def close(self) -> None:
        async with self._lock:
            if self._sender is not None:
                await self._sender.close()
                self._sender = None


class ServiceBusOrderPublisher(_OneSender):
    """`OrderPublisher`: the order to the orders queue, MessageId = orderId, its owner in the
    `orderOwner` application property."""

    def __init__(
        self,
        client: ServiceBusClient,
        queue_name: str,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        super().__init__(client, queue_name, tracer_provider=tracer_provider)

    async def publish(self, order: OrderPlaced, owner_scope: str) -> None:
        with self._send_span(order.order_id):
            properties: dict[str | bytes, Any] = {OWNER_PROPERTY: owner_scope}
            properties.update(current_trace_properties())
            message = ServiceBusMessage(
                order_message_body(order),
                message_id=order.order_id,
                content_type="application/json",
                subject="OrderPlaced",
                correlation_id=current_trace_id(),
                application_properties=properties,
            )
            await self._send(message)


class ServiceBusStatusPublisher(_OneSender):
    """`StatusPublisher`: absolute status updates to the status queue.

    On a session queue the SessionId is the orderId, so one order's updates are received in
    the order they were sent, by one receiver at a time.
    """

    def __init__(self, client: ServiceBusClient, queue_name: str, *, sessions: bool) -> None:
        super().__init__(client, queue_name)
        self._sessions = sessions

    async def publish_status(self, change: OrderStatusChanged) -> None:
        message_id = new_status_message_id(change)
        with self._send_span(message_id):
            message = ServiceBusMessage(
                change.body(),
                message_id=message_id,
                content_type="application/json",
                subject="OrderStatusChanged",
                correlation_id=change.order_id,
                session_id=change.order_id if self._sessions else None,
                application_properties=cast(dict[str | bytes, Any], current_trace_properties()),
            )
            await self._send(message)


class ServiceBusEventPublisher(_OneSender):
    """`EventPublisher`: an outbox event to the events topic, MessageId = its outbox entry's.

    The span continues the trace the consumer stored with the outbox entry, so one trace id
    follows the order from the HTTP request through the dispatcher to every subscriber.
    """

    def __init__(
        self,
        client: ServiceBusClient,
        topic_name: str,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        super().__init__(client, topic_name, topic=True, tracer_provider=tracer_provider)

    async def publish_event(
        self, event: OrderEvent, trace_context: dict[str, str], *, message_id: str
    ) -> None:
        with self._send_span(message_id, context_from(trace_context)):
            message = ServiceBusMessage(
                event.body(),
                message_id=message_id,
                content_type="application/json",
                subject=event.event_type,
                correlation_id=event.order_id,
                application_properties=cast(dict[str | bytes, Any], current_trace_properties()),
            )
            await self._send(message)
