"""The Azure Functions Service Bus trigger's body (function_app.py only declares the binding)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orders.adapters.servicebus import (
    FunctionsMessageActions,
    FunctionsSettler,
    to_received_order_message,
)
from orders.bootstrap import function_consumer
from orders.domain.outcomes import Decision

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusReceivedMessage


async def process_order_message(
    received_message: ServiceBusReceivedMessage | Any,
    message_actions: FunctionsMessageActions,
) -> Decision:
    consumer = await function_consumer()
    return await consumer.handle_and_settle(
        to_received_order_message(received_message),
        FunctionsSettler(message_actions, received_message),
    )
