"""The Azure Functions Service Bus trigger's body (function_app.py only declares the binding)."""

from __future__ import annotations

from orders.bootstrap import (
    configure_function_monitoring,
    dispatch_function_documents,
    process_function_event,
    process_function_message,
)

__all__ = [
    "configure_function_monitoring",
    "dispatch_outbox_changes",
    "process_event_message",
    "process_order_message",
]

# The host hands over its message and message actions; the composition root does the rest.
process_order_message = process_function_message
process_event_message = process_function_event
dispatch_outbox_changes = dispatch_function_documents
