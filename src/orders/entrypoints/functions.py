"""The Azure Functions triggers' bodies (function_app.py only declares the bindings).

Each Service Bus trigger's body is the guide's one call: the consumer's door
(`adapters.servicebus_consumers`, a route the import contracts name) `with_message_actions`, its
delayed retries scheduled by a `CopyScheduler` on its entity. The consumer's core is built on
first use (never at import: the host imports function_app.py before any setting or network is
needed) over the process's one set of clients.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from exactly_once.decisions import Decision, Outcome
from exactly_once.delayed_retries import CopyScheduler, DelayedRetries
from exactly_once.retries import LockRenewal, Retrier
from exactly_once.servicebus import ExactlyOnceConsumer, FunctionsMessageActions
from orders.adapters.monitoring import configure_monitoring
from orders.adapters.servicebus_consumers import DoorConsumer, door_consumer
from orders.bootstrap import (
    DispatcherRuntime,
    SubscriberRuntime,
    build_dispatcher_runtime,
    build_subscriber_runtime,
    shared_process_clients,
)
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints.lazy_runtime import Lazy
from orders.exceptions import ServiceNotReadyError
from orders.service.ports import MessageHandler
from orders.service.registry import CONSUMERS, ORDERS, ConsumerSpec
from orders.service.subscribers import Source
from orders.settings import MonitoringSettings

logger = logging.getLogger("orders")

__all__ = [
    "configure_function_monitoring",
    "dispatch_outbox_changes",
    "function_dispatcher_runtime",
    "function_later_retries",
    "function_retrier",
    "function_subscriber_runtimes",
    "hold_function_budgets",
    "log_functions_worker",
    "process_event_message",
    "use_function_consumer",
]


def configure_function_monitoring(env: Mapping[str, str] | None = None) -> bool:
    """Telemetry export for the Functions worker, at import of function_app.py: the host
    forwards no worker logs in its OpenTelemetry mode, so everything before the first runtime
    build (indexing, a failed build) would otherwise be lost. Only the telemetry settings are
    read, and a failure is logged, never raised: an app that cannot export still runs."""
    try:
        return configure_monitoring(MonitoringSettings.from_env(env))
    except Exception:
        logger.exception("Azure Monitor OpenTelemetry export could not be configured")
        return False


# The Python worker's distributions (Python <= 3.12, then 3.13+) and the first release of each
# that indexes a parameter typed as the binding extension's `ServiceBusMessageActions` (a
# settlement client with no binding): an older worker refuses to index the app at all, HTTP
# included (infra/README.md, "The Functions host this app needs").
SETTLEMENT_CLIENT_WORKERS: dict[str, tuple[int, int, int]] = {
    "azure-functions-worker": (4, 40, 0),
    "azure-functions-runtime": (1, 3, 0),
}
SERVICEBUS_BINDING = "azurefunctions-extensions-bindings-servicebus"
UNKNOWN_RELEASE = "unknown"
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def installed_release(distributions: Iterable[str]) -> tuple[str, str] | None:
    """The first of `distributions` installed in this process, with its version, from its
    distribution metadata; None when none is (the worker may run without metadata)."""
    for name in distributions:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def log_functions_worker() -> str:
    """One log line at import of function_app.py naming the Python worker release the app runs
    on (`unknown` without its metadata) and the Service Bus binding extension's; a warning when
    the worker is older than the first that indexes the settlement-client parameter. Returns
    the worker as logged."""
    worker = installed_release(SETTLEMENT_CLIENT_WORKERS)
    binding = installed_release([SERVICEBUS_BINDING])
    named = UNKNOWN_RELEASE if worker is None else f"{worker[0]} {worker[1]}"
    logger.info(
        "Functions Python worker: %s; Service Bus binding extension: %s",
        named,
        UNKNOWN_RELEASE if binding is None else f"{binding[0]} {binding[1]}",
    )
    if worker is not None:
        # Plain X.Y.Z releases: their three numbers are what is compared.
        found = _RELEASE.match(worker[1])
        needed = SETTLEMENT_CLIENT_WORKERS[worker[0]]
        if found is not None and tuple(int(part) for part in found.groups()) < needed:
            logger.warning(
                "Functions Python worker %s is older than %s %s, the first that indexes the "
                "Service Bus triggers' message_actions parameter: the host will index no "
                "function of this app (infra/README.md)",
                named,
                worker[0],
                ".".join(str(part) for part in needed),
            )
    return named


def _subscriber_from_env(spec: ConsumerSpec) -> Callable[[], Awaitable[SubscriberRuntime]]:
    async def build() -> SubscriberRuntime:
        clients = shared_process_clients()
        return await build_subscriber_runtime(clients.settings, spec, clients=clients)

    return build


async def _dispatcher_from_env() -> DispatcherRuntime:
    clients = shared_process_clients()
    return await build_dispatcher_runtime(clients.settings, clients=clients)


# One runtime of each per Functions worker process. The host gives no shutdown hook, so they
# live as long as the process.
function_subscriber_runtimes: dict[str, Lazy[SubscriberRuntime]] = {
    spec.name: Lazy(_subscriber_from_env(spec), f"{spec.name} consumer") for spec in CONSUMERS
}
function_dispatcher_runtime: Lazy[DispatcherRuntime] = Lazy(
    _dispatcher_from_env, "outbox dispatcher"
)


# A transient decision is decided again after a backoff before the message is given back; the
# host renews the lock meanwhile, up to host.json's maxAutoLockRenewalDuration (above the
# budget: tests/infra hold them so). Counted on the global meter the monitoring configures.
function_retrier = Retrier()


def hold_function_budgets(host_json: Path) -> LockRenewal:
    """At import of function_app.py: the registered consumers' in-place backoff plus their
    longest attempt must stay under the lock renewal of the host that runs them (host.json's
    `maxAutoLockRenewalDuration`); else `BudgetError`, naming both numbers, and the app does
    not start. Every built-in consumer shares `function_retrier`, so one check covers them; a
    consumer that is a door of its own checks its backoff when it is made (`exactly_once(...)`,
    against its `ConsumerOptions.lock_renewal`: by default the Functions host's 5 minutes)."""
    renewal = LockRenewal.from_host_json(host_json)
    renewal.check(
        function_retrier.backoff,
        what=f"the Functions consumers ({', '.join(spec.name for spec in CONSUMERS)})",
    )
    return renewal


class LaterRetries:
    """Where a Functions consumer's delayed retries go (a `CopyScheduler` on its queue or its
    topic, over the process's one Service Bus client: managed identity in Azure, which holds
    Data Owner there) and how many and how far apart (ORDERS_DELAYED_RETRIES / _SECONDS)."""

    def __init__(self, scheduler: CopyScheduler, policy: DelayedRetries, source: str) -> None:
        self.scheduler = scheduler
        self.policy = policy
        self.source = source  # the entity's path: the delivery span's destination

    async def close(self) -> None:
        await self.scheduler.close()


def _later_retries_from_env(spec: ConsumerSpec) -> Callable[[], Awaitable[LaterRetries]]:
    async def build() -> LaterRetries:
        clients = shared_process_clients()
        source = str(spec.source(clients.settings))
        settings = clients.settings
        policy = DelayedRetries(settings.delayed_retries, settings.delayed_retry_seconds)
        return LaterRetries(CopyScheduler(clients.servicebus(), source), policy, source)

    return build


# One scheduler per consumer and process, built on first use like the runtimes (a sender's link
# opens on its first schedule).
function_later_retries: dict[str, Lazy[LaterRetries]] = {
    spec.name: Lazy(_later_retries_from_env(spec), f"{spec.name} consumer's delayed retries")
    for spec in CONSUMERS
}


async def _later_retries(consumer: str) -> LaterRetries | None:
    """The consumer's delayed retries; None (its failure logged by `Lazy`) when even the
    Service Bus client cannot be built: a failure then is abandoned, as without them."""
    try:
        return await function_later_retries[consumer].get()
    except ServiceNotReadyError:
        return None


def use_function_consumer(consumer: MessageHandler | None) -> None:
    """Let tests supply the order consumer the Function uses (None: build from settings again)."""
    runtime = None
    if consumer is not None:
        runtime = SubscriberRuntime(Source(queue=ORDERS), consumer)
    function_subscriber_runtimes[ORDERS].use(runtime)


async def process_event_message(
    consumer: str, received_message: Any, message_actions: FunctionsMessageActions
) -> Decision:
    """A registered consumer's trigger body (the order consumer's too): the guide's one call,
    the consumer's door `with_message_actions`, settled explicitly.

    Nothing here leaves the function with an error (the host would abandon at once, spending a
    delivery): a core that cannot be built yet (`ServiceNotReadyError`: a setting, a role
    assignment, the store unreachable at start) is a transient failure, backed off in place
    while the host renews the lock; what the backoff did not fix comes back later as a
    scheduled copy (`exactly_once.delayed_retries`), and only after its delayed retries is it
    dead-lettered `RetriesExhausted`. Without a scheduler (no Service Bus client to build one)
    it is abandoned instead.

    A consumer added as docs/new-consumer.md shows is a door of its own (`@exactly_once`): once
    built, it is called as it is, and its own options (backoff, delayed retries, key, telemetry)
    decide; until it can be built, the core's door above backs the build off as for any other."""
    later_retries = await _later_retries(consumer)
    door = await _own_door(consumer) or _function_door(
        consumer, function_retrier, later_retries.policy if later_retries is not None else None
    )
    return await door.with_message_actions(
        received_message,
        message_actions,
        destination=later_retries.source if later_retries is not None else None,
        scheduler=later_retries.scheduler if later_retries is not None else None,
    )


async def _own_door(consumer: str) -> ExactlyOnceConsumer[Any] | None:
    """The registered consumer when it is a door of its own (`@exactly_once`), built on first
    use; None for a core (the app's door is made over it) or while it cannot be built."""
    try:
        registered = (await function_subscriber_runtimes[consumer].get()).handler
    except ServiceNotReadyError:
        return None
    return registered if isinstance(registered, ExactlyOnceConsumer) else None


class HandedToItsOwnDoor:
    """The core of a consumer whose own door was built while the app's door was backing its
    build off: gives the message back (`not_ours`, not retried in place), whose redelivery its
    own door decides."""

    def __init__(self, consumer: str) -> None:
        self.consumer = consumer

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        del message
        return Decision.abandon(
            Outcome.NOT_OURS, f"consumer {self.consumer!r} is built now: its own door decides"
        )


@functools.cache
def _function_door(
    consumer: str, retrier: Retrier, delayed_retries: DelayedRetries | None
) -> DoorConsumer:
    """The consumer's door under the Functions host: its core built on first use, backed off
    in place by `retrier`'s backoff (`function_retrier`, which the lock renewal of host.json
    holds) and retried later by `delayed_retries`; one per process (per backoff and policy)."""

    async def core() -> MessageHandler:
        registered = (await function_subscriber_runtimes[consumer].get()).handler
        if isinstance(registered, ExactlyOnceConsumer):
            # Built during this delivery's backoff, and a door of its own: not this door's to
            # decide. Handed back, the redelivery goes through its own door.
            return HandedToItsOwnDoor(consumer)
        return registered

    return door_consumer(
        consumer,
        core,
        delayed_retries=delayed_retries,
        backoff=retrier.backoff,
        telemetry=retrier.telemetry,
    )


async def dispatch_outbox_changes(documents: list[dict[str, Any]]) -> int:
    """The Cosmos DB trigger's body: the host's batch of changes through the dispatcher's core.

    The host keeps the checkpoint in its own lease container; a raised error (a failed publish)
    makes its retry policy deliver the batch again, and the re-publish is a duplicate.
    """
    runtime = await function_dispatcher_runtime.get()
    return await runtime.dispatcher.dispatch(documents)
