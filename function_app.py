"""Azure Functions (Python v2 model) entry point: declarations only, logic lives in src/orders.

The deployment ships `src/orders` beside this file (see .funcignore) rather than installing the
package, so `src` goes on sys.path before the import.
"""

from __future__ import annotations

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

import azure.functions as func  # noqa: E402
import azurefunctions.extensions.bindings.servicebus as servicebus  # noqa: E402

from orders.entrypoints.functions import process_order_message  # noqa: E402
from orders.entrypoints.http_api import create_app  # noqa: E402

# The HTTP API (FastAPI) and the Service Bus trigger share one app. The host's routePrefix `api`
# matches the app's own `/api/...` routes, so paths are the same here and under `orders serve`.
app = func.AsgiFunctionApp(app=create_app(), http_auth_level=func.AuthLevel.FUNCTION)


@app.service_bus_queue_trigger(
    arg_name="received_message",
    queue_name="%ORDERS_QUEUE%",
    connection="ServiceBusConnection",
    auto_complete_messages=False,
)
async def process_order(
    received_message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
) -> None:
    """Idempotent consumer: settles every message explicitly (complete/abandon/dead-letter)."""
    await process_order_message(received_message, message_actions)
