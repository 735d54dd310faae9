"""Service Bus: turning received messages into the core's view, and settling them.

Two hosts settle through the core's one `Settler` port (`exactly_once.decisions`): the
Functions SDK-type binding's `ServiceBusMessageActions` and the SDK's own `ServiceBusReceiver`
(the standalone worker). The settlers are the `exactly_once` core's, under the names the app
has always used.
"""

from __future__ import annotations

import contextlib
from typing import Any

# Re-exported: the composition root names these types without importing the SDK itself.
from azure.servicebus import ServiceBusReceivedMessage as ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient as ServiceBusClient
from azure.servicebus.amqp import AmqpMessageBodyType

from exactly_once.delayed_retries import CopyScheduler, original_message_id
from exactly_once.servicebus import FunctionsMessageActions as FunctionsMessageActions
from exactly_once.servicebus import MessageActionsSettler, body_bytes
from exactly_once.servicebus import ReceiverSettler as ReceiverSettler
from orders.adapters.identity import ProcessCredential
from orders.domain.ownership import OWNER_PROPERTY
from orders.domain.received import BodyKind, ReceivedOrderMessage
from orders.settings import Settings
from orders.tracing import CARRIED

# The core's settler and body reader, under the names the app's hosts have always used.
FunctionsSettler = MessageActionsSettler
message_body_bytes = body_bytes

BODY_KINDS = {
    AmqpMessageBodyType.DATA: BodyKind.DATA,
    AmqpMessageBodyType.VALUE: BodyKind.VALUE,
    AmqpMessageBodyType.SEQUENCE: BodyKind.SEQUENCE,
}


def to_received_order_message(message: ServiceBusReceivedMessage) -> ReceivedOrderMessage:
    # A delayed retry's copy is the message it was copied from (`exactly_once.delayed_retries`).
    message_id = original_message_id(message)
    correlation_id = message.correlation_id
    properties = message.application_properties or {}
    trace_context: dict[str, str] = {}
    for name in CARRIED:
        value = properties.get(name.encode(), properties.get(name))
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if isinstance(value, str):
            trace_context[name] = value
    owner: object = properties.get(OWNER_PROPERTY.encode(), properties.get(OWNER_PROPERTY))
    if isinstance(owner, bytes):
        # Undecodable bytes stay bytes: the consumer refuses them as no owner scope.
        with contextlib.suppress(UnicodeDecodeError):
            owner = owner.decode()
    return ReceivedOrderMessage(
        body=message_body_bytes(message),
        message_id=str(message_id) if message_id is not None else None,
        delivery_count=message.delivery_count,  # None: the binding did not carry it
        correlation_id=str(correlation_id) if correlation_id is not None else None,
        body_kind=BODY_KINDS.get(message.body_type, BodyKind.VALUE),
        trace_context=trace_context,
        owner_property=owner,
        enqueued_time=message.enqueued_time_utc,
    )


def from_functions_host(
    received_message: ServiceBusReceivedMessage | Any,
    message_actions: FunctionsMessageActions,
    scheduler: CopyScheduler | None = None,
) -> tuple[ReceivedOrderMessage, FunctionsSettler]:
    """The Functions host's message and message actions as the core's message and settler;
    a delayed retry's copy is scheduled through `scheduler` (without one: abandoned)."""
    return (
        to_received_order_message(received_message),
        FunctionsSettler(message_actions, received_message, scheduler),
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
