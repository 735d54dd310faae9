"""The app's consumers through the core's door: for the built-in ones, the one module that
calls `exactly_once(...)`.

Every registered consumer is driven as a user of the core drives theirs: an
`ExactlyOnceConsumer` made by `@exactly_once`, whose `with_message_actions` the Functions
triggers call and whose `decide_message` the core's worker loop runs
(`adapters/servicebus_worker.py`). A consumer added as docs/new-consumer.md shows is one already
(its registry entry builds the user's own door; `registered_door` hands it over as it is). The
four built-in ones (orders, billing, shipping, status) are cores, each made a door here: the
door parses, frames every exception, backs off, retries later, records the span and the
counts, logs the outcome line and settles; each consumer's own core (`service/`) reads the
message whole (`read=`: the app's `ReceivedOrderMessage`, with its owner property, trace
context and enqueued time), decides over its own stores and mechanisms (no `store=`: billing's
two phases, shipping's inbox batch, the order's entity, the status's versioned replace) and
names its own key in its `Decision`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from exactly_once import Backoff, ConsumerOptions, DelayedRetries, Effects, exactly_once
from exactly_once.decisions import Decision
from exactly_once.servicebus import ExactlyOnceConsumer
from exactly_once.telemetry import Telemetry
from orders.adapters.servicebus import to_received_order_message
from orders.domain.received import ReceivedOrderMessage
from orders.exceptions import ServiceNotReadyError
from orders.service.ports import MessageHandler, RegisteredConsumer

# The consumer's core, or the build of it on first use (the Functions host imports the app
# before any setting or network is there): a build that fails raises `ServiceNotReadyError`,
# which the door backs off in place as a transient failure and builds again on the next attempt.
HandlerBuild = Callable[[], Awaitable[MessageHandler]]
# What the door backs off in place besides what the core knows is transient: the runtime that
# could not be built yet. The consumers' own failures are framed by their cores already
# (`service/subscriber.decided`).
DOOR_TRANSIENT = (ServiceNotReadyError,)

DoorConsumer = ExactlyOnceConsumer[ReceivedOrderMessage]


def door_consumer(
    name: str,
    handler: HandlerBuild,
    *,
    delayed_retries: DelayedRetries | None = None,
    backoff: Backoff | None = None,
    telemetry: Telemetry | None = None,
) -> DoorConsumer:
    """The registered consumer `name` as the core's `ExactlyOnceConsumer` over the build of its
    core (`built(handler)` for one built already); `delayed_retries` where a host schedules
    them (the Functions triggers: ORDERS_DELAYED_RETRIES / _SECONDS), `backoff` and
    `telemetry` those of the host that backs off in place (the worker loop brings its own)."""

    @exactly_once(
        consumer=name,
        read=to_received_order_message,
        options=ConsumerOptions(
            transient=DOOR_TRANSIENT,
            delayed_retries=delayed_retries,
            backoff=backoff,
            telemetry=telemetry,
        ),
    )
    async def decide(message: ReceivedOrderMessage, effects: Effects) -> Decision:
        del effects  # the core keeps its own records, over its own stores
        return await (await handler()).handle(message)

    return decide


def built(handler: MessageHandler) -> HandlerBuild:
    """A core built already (the worker's, a test's), as `door_consumer` takes it."""

    async def ready() -> MessageHandler:
        return handler

    return ready


def registered_door(name: str, registered: RegisteredConsumer) -> ExactlyOnceConsumer[Any]:
    """What the registry's entry `name` built, as the door a host drives: a consumer that is a
    door of its own (made with `@exactly_once`, docs/new-consumer.md) as it is, its own options
    (backoff, delayed retries, key, telemetry) deciding; a core made a door by `door_consumer`."""
    if isinstance(registered, ExactlyOnceConsumer):
        return registered
    return door_consumer(name, built(registered))
