"""Service Bus: turning received messages into the core's view, and settling them.

Two hosts settle through the same `MessageSettler` port: the Functions SDK-type binding's
`ServiceBusMessageActions` and the SDK's own `ServiceBusReceiver` (the standalone worker).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Protocol

# Re-exported: the composition root names these types without importing the SDK itself.
from azure.servicebus import ServiceBusReceivedMessage as ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient as ServiceBusClient
from azure.servicebus.aio import ServiceBusReceiver
from azure.servicebus.amqp import AmqpMessageBodyType

from orders.adapters.identity import ProcessCredential
from orders.domain.received import BodyKind, ReceivedOrderMessage
from orders.settings import Settings
from orders.tracing import CARRIED

BODY_KINDS = {
    AmqpMessageBodyType.DATA: BodyKind.DATA,
    AmqpMessageBodyType.VALUE: BodyKind.VALUE,
    AmqpMessageBodyType.SEQUENCE: BodyKind.SEQUENCE,
}


def message_body_bytes(message: ServiceBusReceivedMessage) -> bytes:
    """A data body's bytes (one chunk per AMQP data section, joined); b"" for any other kind,
    which the core refuses by its kind alone."""
    body: Any = message.body
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, Iterable) and not isinstance(body, str | dict):
        chunks = list(body)
        if all(isinstance(chunk, bytes | bytearray) for chunk in chunks):
            return b"".join(bytes(chunk) for chunk in chunks)
    return b""


def to_received_order_message(message: ServiceBusReceivedMessage) -> ReceivedOrderMessage:
    message_id = message.message_id
    correlation_id = message.correlation_id
    properties = message.application_properties or {}
    trace_context: dict[str, str] = {}
    for name in CARRIED:
        value = properties.get(name.encode(), properties.get(name))
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if isinstance(value, str):
            trace_context[name] = value
    return ReceivedOrderMessage(
        body=message_body_bytes(message),
        message_id=str(message_id) if message_id is not None else None,
        delivery_count=message.delivery_count or 0,
        correlation_id=str(correlation_id) if correlation_id is not None else None,
        body_kind=BODY_KINDS.get(message.body_type, BodyKind.VALUE),
        trace_context=trace_context,
    )


class FunctionsMessageActions(Protocol):
    """What we use of `azurefunctions.extensions.bindings.servicebus.ServiceBusMessageActions`."""

    def complete(self, message: Any) -> None: ...

    def abandon(self, message: Any) -> None: ...

    def deadletter(
        self, message: Any, *, deadletter_reason: str, deadletter_error_description: str
    ) -> None: ...


class FunctionsSettler:
    """Settles through the Functions host (synchronous gRPC calls, run off the event loop)."""

    def __init__(self, actions: FunctionsMessageActions, message: ServiceBusReceivedMessage):
        self._actions = actions
        self._message = message

    async def complete(self) -> None:
        await asyncio.to_thread(self._actions.complete, self._message)

    async def abandon(self) -> None:
        await asyncio.to_thread(self._actions.abandon, self._message)

    async def dead_letter(self, *, reason: str, description: str) -> None:
        await asyncio.to_thread(
            lambda: self._actions.deadletter(
                self._message,
                deadletter_reason=reason,
                deadletter_error_description=description,
            )
        )


class ReceiverSettler:
    """Settles through an SDK receiver in PeekLock mode (the standalone worker).

    `wire`, when given, is held for each settlement: the worker's turn on the receiver's
    connection (see servicebus_worker)."""

    def __init__(
        self,
        receiver: ServiceBusReceiver,
        message: ServiceBusReceivedMessage,
        wire: asyncio.Lock | None = None,
    ) -> None:
        self._receiver = receiver
        self._message = message
        self._wire = wire or contextlib.nullcontext()

    async def complete(self) -> None:
        async with self._wire:
            await self._receiver.complete_message(self._message)

    async def abandon(self) -> None:
        async with self._wire:
            await self._receiver.abandon_message(self._message)

    async def dead_letter(self, *, reason: str, description: str) -> None:
        async with self._wire:
            await self._receiver.dead_letter_message(
                self._message, reason=reason, error_description=description
            )


def create_servicebus_client(
    settings: Settings, identity: ProcessCredential | None = None
) -> ServiceBusClient:
    """A connection string for emulators; otherwise Entra ID through the process's credential."""
    settings.require_servicebus()
    if settings.servicebus_connection_string:
        return ServiceBusClient.from_connection_string(settings.servicebus_connection_string)
    if identity is None:
        raise ValueError("without a connection string the client needs the ProcessCredential")
    assert settings.servicebus_namespace is not None
    return ServiceBusClient(settings.servicebus_namespace, identity.get())
