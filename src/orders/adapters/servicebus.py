"""Service Bus: the app's view of a received message, and the process's client.

Both hosts settle through the core's door (`adapters/servicebus_consumers.py`), whose reader is
`to_received_order_message`: the SDK's message as the app's consumers read it.
"""

from __future__ import annotations

import contextlib

# Re-exported: the composition root names these types without importing the SDK itself.
from azure.servicebus import ServiceBusReceivedMessage as ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient as ServiceBusClient
from azure.servicebus.amqp import AmqpMessageBodyType

from exactly_once.delayed_retries import original_message_id
from exactly_once.servicebus import FunctionsMessageActions as FunctionsMessageActions
from exactly_once.servicebus import body_bytes
from orders.adapters.identity import ProcessCredential
from orders.domain.ownership import OWNER_PROPERTY
from orders.domain.received import BodyKind, ReceivedOrderMessage
from orders.settings import Settings
from orders.tracing import CARRIED

# The core's body reader, under the name the app's adapters have always used.
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
