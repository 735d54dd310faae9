"""The composition root: the one place that wires real adapters into the core.

Every host (Function, worker, CLI, HTTP API) builds its graph here; tests build the same core
(`OrderConsumer`, `IdempotentOrderIntake`) over fakes of the ports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orders.adapters.cosmos_audit import documents_of_run
from orders.adapters.cosmos_client import (
    create_cosmos_client,
    ensure_local_resources,
    idempotency_container,
    orders_container,
)
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.adapters.cosmos_order_reader import CosmosOrderReader
from orders.adapters.cosmos_store import CosmosOrderStore
from orders.adapters.identity import ProcessCredential
from orders.adapters.monitoring import configure_monitoring
from orders.adapters.servicebus import (
    FunctionsMessageActions,
    FunctionsSettler,
    create_servicebus_client,
    to_received_order_message,
)
from orders.adapters.servicebus_load import ServiceBusLoadSender, peek_dead_letters
from orders.adapters.servicebus_publisher import ServiceBusOrderPublisher
from orders.adapters.servicebus_worker import run_worker_on
from orders.domain.load_plan import LoadPlan
from orders.domain.outcomes import Decision
from orders.observability import ConsumerTelemetry
from orders.service.consumer import OrderConsumer
from orders.service.idempotency import DEFAULT_LEASE_SECONDS, IdempotentOrderIntake
from orders.service.load import LoadResult, run_load
from orders.service.order_lookup import OrderLookup
from orders.service.ports import MessageHandler, OrderPublisher
from orders.service.verify import VerifyReport, audit
from orders.service.worker_options import WorkerOptions, WorkerStats
from orders.settings import Settings

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusReceivedMessage


@dataclass
class ConsumerRuntime:
    consumer: OrderConsumer
    settings: Settings
    identity: ProcessCredential
    orders_container: Any  # the Cosmos container proxy, for hosts that need a second handler
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


async def _closing_on_failure(
    closers: list[Callable[[], Awaitable[None]]], build: Awaitable[None]
) -> None:
    try:
        await build
    except BaseException:
        for close in reversed(closers):
            await close()
        raise


async def build_consumer_runtime(
    settings: Settings,
    *,
    telemetry: ConsumerTelemetry | None = None,
    create_local_resources: bool | None = None,
    **cosmos_client_options: Any,
) -> ConsumerRuntime:
    """Build the consumer over Cosmos; with emulator keys also create the containers."""
    configure_monitoring(settings)
    identity = ProcessCredential(settings)
    client = create_cosmos_client(settings, identity, **cosmos_client_options)
    closers: list[Callable[[], Awaitable[None]]] = [identity.close, client.close]
    if create_local_resources is None:
        create_local_resources = settings.uses_emulator_keys
    if create_local_resources:
        await _closing_on_failure(closers, ensure_local_resources(client, settings))
    container = orders_container(client, settings)
    consumer = OrderConsumer(CosmosOrderStore(container), telemetry)
    return ConsumerRuntime(consumer, settings, identity, container, closers)


class _FunctionHostState:
    """One consumer per Functions worker process, built on the first message (not at import)."""

    def __init__(self) -> None:
        self.consumer: OrderConsumer | None = None
        self.runtime: ConsumerRuntime | None = None
        self.lock = asyncio.Lock()


_function_host = _FunctionHostState()


async def function_consumer() -> OrderConsumer:
    if _function_host.consumer is not None:
        return _function_host.consumer
    async with _function_host.lock:
        if _function_host.consumer is None:
            runtime = await build_consumer_runtime(Settings.from_env())
            _function_host.runtime = runtime
            _function_host.consumer = runtime.consumer
        return _function_host.consumer


def use_function_consumer(consumer: OrderConsumer | None) -> None:
    """Let tests supply the consumer the Function uses.

    The Functions host gives no shutdown hook, so a built runtime lives as long as the worker
    process; replacing it here is for tests, which never build a real one.
    """
    _function_host.consumer = consumer
    _function_host.runtime = None


@dataclass
class HttpRuntime:
    """What the HTTP API needs; tests build one over fakes."""

    intake: IdempotentOrderIntake
    lookup: OrderLookup
    default_scope: str
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


async def build_http_runtime(
    settings: Settings,
    *,
    publisher: OrderPublisher | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    create_local_resources: bool | None = None,
    **cosmos_client_options: Any,
) -> HttpRuntime:
    """The HTTP API over Cosmos (idempotency records, order reads) and a Service Bus sender."""
    if publisher is None:
        settings.require_servicebus()
    configure_monitoring(settings)
    identity = ProcessCredential(settings)
    client = create_cosmos_client(settings, identity, **cosmos_client_options)
    closers: list[Callable[[], Awaitable[None]]] = [identity.close, client.close]
    try:
        if create_local_resources is None:
            create_local_resources = settings.uses_emulator_keys
        if create_local_resources:
            await ensure_local_resources(client, settings)
        if publisher is None:
            servicebus_client = create_servicebus_client(settings, identity)
            servicebus_publisher = ServiceBusOrderPublisher(
                servicebus_client, settings.orders_queue
            )
            closers += [servicebus_client.close, servicebus_publisher.close]
            publisher = servicebus_publisher
    except BaseException:
        for close in reversed(closers):
            await close()
        raise
    store = CosmosIdempotencyStore(idempotency_container(client, settings))
    intake = IdempotentOrderIntake(
        store,
        publisher,
        ttl_seconds=settings.idempotency_ttl_seconds,
        lease_seconds=lease_seconds,
    )
    lookup = OrderLookup(CosmosOrderReader(orders_container(client, settings)), store)
    return HttpRuntime(intake, lookup, settings.idempotency_scope, closers)


async def run_worker(
    settings: Settings,
    options: WorkerOptions,
    stop: asyncio.Event,
    *,
    after_decision: Callable[[Decision], None] | None = None,
    handler: Callable[[ConsumerRuntime], MessageHandler] = lambda runtime: runtime.consumer,
) -> WorkerStats:
    """Wire the consumer (Cosmos) and a Service Bus client, then compete until `stop`."""
    settings.require_servicebus()
    runtime = await build_consumer_runtime(settings)
    try:
        async with create_servicebus_client(settings, runtime.identity) as client:
            return await run_worker_on(
                client, settings.orders_queue, handler(runtime), options, stop, after_decision
            )
    finally:
        await runtime.close()


async def process_function_message(
    received_message: ServiceBusReceivedMessage | Any, message_actions: FunctionsMessageActions
) -> Decision:
    """The Functions trigger's body: the host's message and actions through the one core."""
    consumer = await function_consumer()
    return await consumer.handle_and_settle(
        to_received_order_message(received_message),
        FunctionsSettler(message_actions, received_message),
    )


async def http_runtime_from_env() -> HttpRuntime:
    """The HTTP API's runtime from app settings (Functions host, `orders serve`)."""
    return await build_http_runtime(Settings.from_env())


async def prepare_local_cosmos(settings: Settings) -> None:
    """Create the database and containers on an emulator (Azure gets them from Bicep)."""
    async with create_cosmos_client(settings) as client:  # emulator keys only
        await ensure_local_resources(client, settings)


async def send_load(
    settings: Settings,
    plan: LoadPlan,
    *,
    duplicate_window_seconds: float,
    on_sent: Callable[[int], None] = lambda count: None,
) -> LoadResult:
    identity = ProcessCredential(settings)
    try:
        async with (
            create_servicebus_client(settings, identity) as client,
            ServiceBusLoadSender(client, settings.orders_queue) as sender,
        ):
            return await run_load(
                plan, sender, duplicate_window_seconds=duplicate_window_seconds, on_sent=on_sent
            )
    finally:
        await identity.close()


async def verify_run(settings: Settings, plan: LoadPlan) -> VerifyReport:
    """Audit Cosmos and the dead-letter queue against what a load run sent."""
    identity = ProcessCredential(settings)
    try:
        async with (
            create_cosmos_client(settings, identity) as cosmos,
            create_servicebus_client(settings, identity) as bus,
        ):
            documents = await documents_of_run(orders_container(cosmos, settings), plan.run_id)
            dead_letters = await peek_dead_letters(bus, settings.orders_queue)
    finally:
        await identity.close()
    return audit(plan, documents, dead_letters)
