"""Azure Functions (Python v2 model) entry point: declarations only, logic lives in src/orders.

The deployment ships `src/orders` and the core's `packages/exactly-once/src/exactly_once` beside
this file (see .funcignore) rather than installing them (requirements.txt is hash-locked, and a
folder has no hash), so both source folders go on sys.path before the import.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Protocol

_HERE = Path(__file__).resolve().parent
for _source in (_HERE / "packages" / "exactly-once" / "src", _HERE / "src"):
    if str(_source) not in sys.path:
        sys.path.insert(0, str(_source))

import azure.functions as func  # noqa: E402
import azurefunctions.extensions.bindings.servicebus as servicebus  # noqa: E402

from orders.entrypoints.functions import (  # noqa: E402
    configure_function_monitoring,
    dispatch_outbox_changes,
    hold_function_budgets,
    log_functions_worker,
    process_event_message,
)

# First, before anything else of ours runs: in its OpenTelemetry mode the host forwards no worker
# logs, so only our own exporter carries them, and it must exist before the first one.
configure_function_monitoring()
# Then the worker release this app runs on, before the host's indexing can refuse it.
log_functions_worker()

from orders.entrypoints.http_api import create_app  # noqa: E402
from orders.service.registry import CONSUMERS, ConsumerSpec  # noqa: E402
from orders.settings import status_sessions_enabled  # noqa: E402

# The HTTP API (FastAPI) and the Service Bus triggers share one app. The host's routePrefix `api`
# matches the app's own `/api/...` routes, so paths are the same here and under `orders serve`.
app = func.AsgiFunctionApp(app=create_app(), http_auth_level=func.AuthLevel.FUNCTION)

# The consumers back off in place while the host renews their messages' locks: a budget that
# does not fit host.json's maxAutoLockRenewalDuration stops the app here, at start-up.
hold_function_budgets(_HERE / "host.json")


# --- Fan-out: the outbox dispatcher -----------------------------------------------------------


@app.cosmos_db_trigger(
    arg_name="changes",
    connection="CosmosConnection",
    database_name="%COSMOS_DATABASE%",
    container_name="%COSMOS_CONTAINER%",
    lease_container_name="%COSMOS_LEASES_CONTAINER%",
    # Managed identity cannot create containers (a control-plane operation): Bicep does.
    create_lease_container_if_not_exists=False,
    start_from_beginning=True,  # type: ignore[arg-type]  # the stub says `time`; the host wants a bool
)
# Without a retry policy the host checkpoints past a failed batch; with it, a failed publish
# delivers the same batch again (and the re-publish is a duplicate the subscribers absorb).
# Unbounded on purpose: only transient or unknown failures raise (an outage, a missing role);
# a document that can never be published is parked by the dispatcher and the batch goes on.
@app.retry(
    strategy="exponential_backoff",
    max_retry_count="-1",
    minimum_interval="00:00:01",
    maximum_interval="00:01:00",
)
async def dispatch_outbox(changes: func.DocumentList) -> None:
    """Outbox dispatcher: publish each new OrderAccepted event, then mark it dispatched."""
    await dispatch_outbox_changes([dict(document) for document in changes])


# --- The registered consumers: one trigger per entry of the registry, the order consumer's too ---
# The host indexes functions by running this file, so triggers declared in a loop are indexed
# like written ones. Each keeps its registry entry's function name (deployed apps keep their
# functions and `AzureWebJobs.<name>.Disabled` settings) and binds to the entity its entry's
# setting names (`process_order` on %ORDERS_QUEUE%). The status queue's binding follows
# STATUS_SESSIONS, the setting the Bicep sets and settings.py reads for every host: the host
# indexes with the app settings in the environment.
STATUS_SESSIONS = status_sessions_enabled()


class ConsumerTrigger(Protocol):
    """A registered consumer's trigger, called by keyword as the host calls it."""

    async def __call__(
        self,
        *,
        received_message: servicebus.ServiceBusReceivedMessage,
        message_actions: servicebus.ServiceBusMessageActions,
    ) -> None: ...


def _consumer_body(spec: ConsumerSpec) -> ConsumerTrigger:
    async def body(
        *,
        received_message: servicebus.ServiceBusReceivedMessage,
        message_actions: servicebus.ServiceBusMessageActions,
    ) -> None:
        await process_event_message(spec.name, received_message, message_actions)

    body.__name__ = body.__qualname__ = spec.function_name
    body.__doc__ = spec.description
    return body


def _register(spec: ConsumerSpec) -> ConsumerTrigger:
    named = app.function_name(name=spec.function_name)
    if spec.on_topic:
        trigger = app.service_bus_topic_trigger(
            arg_name="received_message",
            topic_name="%ORDER_EVENTS_TOPIC%",
            subscription_name=f"%{spec.setting}%",
            connection="ServiceBusConnection",
            auto_complete_messages=False,
        )
    else:
        trigger = app.service_bus_queue_trigger(
            arg_name="received_message",
            queue_name=f"%{spec.setting}%",
            connection="ServiceBusConnection",
            auto_complete_messages=False,
            is_sessions_enabled=spec.sessions and STATUS_SESSIONS,
        )
    return named(trigger(_consumer_body(spec)))  # type: ignore[no-any-return]


# By consumer name: the trigger as the host calls it (tests call it the same way).
consumer_triggers: dict[str, ConsumerTrigger] = {spec.name: _register(spec) for spec in CONSUMERS}
