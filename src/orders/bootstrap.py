"""The composition root: the one place that wires real adapters into the core.

Every runtime is built here, by one mechanism: an `AsyncExitStack` that registers each
resource's cleanup the moment the resource exists (the process credential first, created
lazily on first use), is unwound if any later step fails, and is handed over to the runtime
with `pop_all()` when the build succeeds. Hosts (Functions, worker, HTTP API, load, verify,
benchmarks) get a runtime and close it; tests build the same core over fakes of the ports.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exactly_once.records import DEFAULT_LEASE_SECONDS
from orders.adapters.cosmos_client import (
    idempotency_container,
    inbox_container,
    leases_container,
    orders_container,
)
from orders.adapters.cosmos_fenced import CosmosFencedDocuments
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.adapters.cosmos_layout import CosmosLayout
from orders.adapters.cosmos_order_reader import CosmosOrderReader
from orders.adapters.cosmos_outbox import CosmosOutboxFeed, dispatcher_leases
from orders.adapters.cosmos_store import CosmosOrderStore
from orders.adapters.decision_journals import JournalFolder
from orders.adapters.monitoring import configure_monitoring
from orders.adapters.payments_http import HttpPaymentGateway

# Re-exported: the CLI and the entrypoints make one and hand it to the runtimes they build.
from orders.adapters.process_clients import ProcessClients as ProcessClients
from orders.adapters.servicebus_counts import ServiceBusEntityCounter
from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters
from orders.adapters.servicebus_peek import PeekReceivers
from orders.adapters.servicebus_publisher import (
    ServiceBusEventPublisher,
    ServiceBusOrderPublisher,
    ServiceBusStatusPublisher,
)
from orders.observability import SubscriberTelemetry
from orders.service.billing import AfterCharge, AfterRefund
from orders.service.console import OperationsConsole
from orders.service.dispatcher import (
    DEFAULT_POLL_SECONDS,
    AfterPublish,
    OutboxDispatcher,
)
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.instrumented import InstrumentedHandler
from orders.service.order_lookup import OrderLookup
from orders.service.payment_port import PaymentGateway
from orders.service.ports import (
    DocumentLayout,
    MessageHandler,
    OrderPublisher,
    OrderStore,
    StatusPublisher,
)
from orders.service.registry import (
    CONSUMERS,
    ConsumerSpec,
)
from orders.service.saga import OrderSaga
from orders.service.subscribers import Source
from orders.settings import Settings

if TYPE_CHECKING:
    from orders.adapters.cosmos_client import ContainerProxy, CosmosClient

logger = logging.getLogger("orders")

# How the consumer's store is made from the orders container (a benchmark swaps in its own).
StoreFactory = Callable[["ContainerProxy"], OrderStore]
# How every consumer's documents and ids are laid out in Cosmos DB: one mapping, no I/O.
DOCUMENT_LAYOUT: DocumentLayout = CosmosLayout()


# --- Building blocks: each registers its cleanup before it can fail ---------------------------


def _clients(
    stack: AsyncExitStack,
    settings: Settings,
    clients: ProcessClients | None,
    **cosmos_client_options: Any,
) -> ProcessClients:
    """`clients` when given (its owner closes it); else clients of the runtime's own, closed
    last with `stack` (registered first, before anything that uses them)."""
    if clients is not None:
        if cosmos_client_options:
            raise ValueError("Cosmos client options go to the shared ProcessClients")
        return clients
    own = ProcessClients(settings, **cosmos_client_options)
    stack.push_async_callback(own.close)
    return own


# --- Runtimes ---------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Runtime:
    """What a host runs, and everything it holds open: the build's `AsyncExitStack`, handed
    over with `pop_all()`, so `close()` runs every cleanup the build registered, last first."""

    resources: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def close(self) -> None:
        await self.resources.aclose()


@dataclass
class HttpRuntime(Runtime):
    """What the HTTP API needs; tests build one over fakes."""

    intake: IdempotentOrderIntake
    lookup: OrderLookup
    default_scope: str
    # Trust X-MS-CLIENT-PRINCIPAL-ID only where the platform sets it (App Service auth on).
    trust_principal_header: bool = False


async def build_http_runtime(
    settings: Settings,
    *,
    publisher: OrderPublisher | None = None,
    status_publisher: StatusPublisher | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    create_local_resources: bool | None = None,
    clients: ProcessClients | None = None,
    **cosmos_client_options: Any,
) -> HttpRuntime:
    """The HTTP API over Cosmos (idempotency records, order reads) and a Service Bus sender."""
    if publisher is None or status_publisher is None:
        settings.require_servicebus()
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        shared = _clients(stack, settings, clients, **cosmos_client_options)
        client = await shared.cosmos(create_local_resources)
        status: StatusPublisher | None = status_publisher
        if publisher is None or status is None:
            servicebus = shared.servicebus()
            if publisher is None:
                sender = ServiceBusOrderPublisher(servicebus, settings.orders_queue)
                stack.push_async_callback(sender.close)
                publisher = sender
            if status is None:
                status_sender = ServiceBusStatusPublisher(
                    servicebus, settings.status_queue, sessions=settings.status_sessions
                )
                stack.push_async_callback(status_sender.close)
                status = status_sender
        store = CosmosIdempotencyStore(idempotency_container(client, settings))
        intake = IdempotentOrderIntake(
            store,
            publisher,
            status=status,
            saga=OrderSaga(
                CosmosFencedDocuments(orders_container(client, settings)), DOCUMENT_LAYOUT
            ),
            ttl_seconds=settings.idempotency_ttl_seconds,
            lease_seconds=lease_seconds,
        )
        lookup = OrderLookup(
            CosmosOrderReader(orders_container(client, settings)), store, DOCUMENT_LAYOUT
        )
        return HttpRuntime(
            intake,
            lookup,
            settings.idempotency_scope,
            trust_principal_header=settings.platform_auth_enabled,
            resources=stack.pop_all(),
        )


async def http_runtime_from_env() -> HttpRuntime:
    """The HTTP API's runtime from app settings (the Functions host)."""
    clients = shared_process_clients()
    return await build_http_runtime(clients.settings, clients=clients)


# What the operator commands hold, named for the CLI (which imports no adapter).
DeadLetterTools = ServiceBusDeadLetters
KeyTools = CosmosIdempotencyStore


@asynccontextmanager
async def dead_letter_tools(
    settings: Settings, source: Source | None = None
) -> AsyncIterator[DeadLetterTools]:
    """What `orders dlq` works with: Service Bus alone, so it works while Cosmos DB is down.
    `source` defaults to the orders queue."""
    settings.require_servicebus()
    async with AsyncExitStack() as stack:
        servicebus = _clients(stack, settings, None).servicebus()
        yield ServiceBusDeadLetters(servicebus, source or Source(queue=settings.orders_queue))


@asynccontextmanager
async def idempotency_key_tools(settings: Settings) -> AsyncIterator[KeyTools]:
    """What `orders keys` works with: Cosmos DB alone, so it works while Service Bus is down."""
    async with AsyncExitStack() as stack:
        cosmos = await _clients(stack, settings, None).cosmos(create_local_resources=False)
        yield CosmosIdempotencyStore(idempotency_container(cosmos, settings))


@dataclass
class ConsoleRuntime(Runtime):
    """What the operations console works with; tests build one over fakes."""

    console: OperationsConsole
    # As in HttpRuntime: the principal header names who acted only where the platform sets it.
    trust_principal_header: bool = False


async def build_console_runtime(
    settings: Settings, *, clients: ProcessClients | None = None
) -> ConsoleRuntime:
    """The console over one Service Bus client (peeks, the dead-letter tools), the orders
    container, and the workers' journals where a folder of them is configured (locally)."""
    settings.require_servicebus()
    async with AsyncExitStack() as stack:
        shared = _clients(stack, settings, clients)
        cosmos = await shared.cosmos(create_local_resources=False)
        servicebus = shared.servicebus()
        # Every registered consumer's entity (the queues first, the orders queue first of
        # all), then any other subscription ORDERS_CONSOLE_SUBSCRIPTIONS names.
        sources = [spec.source(settings) for spec in sorted(CONSUMERS, key=lambda s: s.on_topic)]
        for topic, subscription in settings.console_subscriptions:
            named = Source(topic=topic, subscription=subscription)
            if named not in sources:
                sources.append(named)
        folder = settings.decisions_folder
        payments = None
        if settings.payments_url:
            payments = HttpPaymentGateway(settings.payments_url, settings.payments_timeout_seconds)
            stack.push_async_callback(payments.close)
        # Every page peeks: the console's receivers stay open (one per entity and sub-queue).
        peeks = PeekReceivers(servicebus)
        stack.push_async_callback(peeks.close)
        console = OperationsConsole(
            sources,
            ServiceBusEntityCounter(servicebus, peeks),
            lambda source: ServiceBusDeadLetters(servicebus, source, peeks),
            CosmosOrderReader(orders_container(cosmos, settings)),
            JournalFolder(Path(folder)) if folder else None,
            layout=DOCUMENT_LAYOUT,
            duplicate_window=timedelta(seconds=settings.duplicate_window_seconds),
            inbox=CosmosOrderReader(inbox_container(cosmos, settings)),
            payments=payments,
        )
        return ConsoleRuntime(console, settings.platform_auth_enabled, resources=stack.pop_all())


async def console_runtime_from_env() -> ConsoleRuntime:
    clients = shared_process_clients()
    return await build_console_runtime(clients.settings, clients=clients)


_shared_clients: ProcessClients | None = None


def shared_process_clients() -> ProcessClients:
    """The clients every runtime built from app settings shares: the Functions host builds up to
    seven in one process (the four registered consumers, the dispatcher, the HTTP API
    and the console), on one credential, one Cosmos client and one Service Bus client. They
    live as long as the process (the host gives no shutdown hook); settings that changed since
    (tests) get clients of their own."""
    global _shared_clients
    settings = Settings.from_env()
    if _shared_clients is None or _shared_clients.settings != settings:
        _shared_clients = ProcessClients(settings)
    return _shared_clients


# --- Processes that run to an end -------------------------------------------------------------


@dataclass
class SubscriberRuntime(Runtime):
    """One fan-out consumer of the events topic and where it competes."""

    source: Source
    handler: MessageHandler


class _Wiring:
    """What a registered consumer's factory builds on (`ConsumerWiring`): ports over the shared
    clients, each made on first use, its cleanup registered on the runtime's stack."""

    def __init__(
        self,
        stack: AsyncExitStack,
        clients: ProcessClients,
        cosmos: CosmosClient,
        after_charge: AfterCharge | None = None,
        after_refund: AfterRefund | None = None,
        store_factory: StoreFactory | None = None,
    ) -> None:
        self._stack = stack
        self._clients = clients
        self._cosmos = cosmos
        self._store_factory = store_factory or CosmosOrderStore
        self._after_charge = after_charge
        self._after_refund = after_refund
        self._status: ServiceBusStatusPublisher | None = None

    @property
    def settings(self) -> Settings:
        return self._clients.settings

    @property
    def layout(self) -> DocumentLayout:
        # The consumers' records expire past every redelivery of their message (issue 34).
        return CosmosLayout(record_ttl_seconds=self.settings.record_ttl_seconds)

    @property
    def after_charge(self) -> AfterCharge | None:
        return self._after_charge

    @property
    def after_refund(self) -> AfterRefund | None:
        return self._after_refund

    def order_store(self) -> OrderStore:
        return self._store_factory(orders_container(self._cosmos, self.settings))

    def inbox(self) -> CosmosFencedDocuments:
        return CosmosFencedDocuments(inbox_container(self._cosmos, self.settings))

    def orders(self) -> CosmosFencedDocuments:
        return CosmosFencedDocuments(orders_container(self._cosmos, self.settings))

    def saga(self) -> OrderSaga:
        return OrderSaga(self.orders(), DOCUMENT_LAYOUT)

    def status_publisher(self) -> StatusPublisher:
        if self._status is None:
            settings = self.settings
            self._status = ServiceBusStatusPublisher(
                self._clients.servicebus(), settings.status_queue, sessions=settings.status_sessions
            )
            self._stack.push_async_callback(self._status.close)
        return self._status

    def payments(self) -> PaymentGateway:
        settings = self.settings
        gateway = HttpPaymentGateway(settings.require_payments(), settings.payments_timeout_seconds)
        self._stack.push_async_callback(gateway.close)
        return gateway


async def _subscriber(
    stack: AsyncExitStack,
    clients: ProcessClients,
    spec: ConsumerSpec,
    create_local_resources: bool | None = None,
    after_charge: AfterCharge | None = None,
    after_refund: AfterRefund | None = None,
    store_factory: StoreFactory | None = None,
) -> tuple[Source, MessageHandler]:
    """The consumer's source and core (its registry entry's factory), under its spans and
    `orders.<consumer>.*` counters unless it instruments itself."""
    cosmos = await clients.cosmos(create_local_resources)
    wiring = _Wiring(stack, clients, cosmos, after_charge, after_refund, store_factory)
    core = spec.factory(wiring)
    source = spec.source(clients.settings)
    if spec.instruments_itself:
        return source, core
    telemetry = SubscriberTelemetry(spec.name, destination=str(source))
    return source, InstrumentedHandler(core, telemetry)


async def build_subscriber_runtime(
    settings: Settings,
    spec: ConsumerSpec,
    *,
    create_local_resources: bool | None = None,
    clients: ProcessClients | None = None,
    after_charge: AfterCharge | None = None,
    after_refund: AfterRefund | None = None,
    store_factory: StoreFactory | None = None,
    **cosmos_client_options: Any,
) -> SubscriberRuntime:
    """A registered consumer (its registry entry's factory) and where it competes."""
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        shared = _clients(stack, settings, clients, **cosmos_client_options)
        source, handler = await _subscriber(
            stack, shared, spec, create_local_resources, after_charge, after_refund, store_factory
        )
        return SubscriberRuntime(source, handler, resources=stack.pop_all())


@dataclass
class DispatcherRuntime(Runtime):
    dispatcher: OutboxDispatcher


async def build_dispatcher_runtime(
    settings: Settings,
    *,
    after_publish: AfterPublish | None = None,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    create_local_resources: bool | None = None,
    clients: ProcessClients | None = None,
) -> DispatcherRuntime:
    """The outbox dispatcher over the orders container's change feed and the events topic."""
    settings.require_servicebus()
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        shared = _clients(stack, settings, clients)
        cosmos = await shared.cosmos(create_local_resources)
        publisher = ServiceBusEventPublisher(shared.servicebus(), settings.order_events_topic)
        stack.push_async_callback(publisher.close)
        dispatcher = OutboxDispatcher(
            CosmosOutboxFeed(orders_container(cosmos, settings)),
            publisher,
            dispatcher_leases(leases_container(cosmos, settings), lease_seconds),
            DOCUMENT_LAYOUT,
            after_publish=after_publish,
            poll_seconds=poll_seconds,
            lease_seconds=lease_seconds,
        )
        # Last registered, first run: the leases are given up before the clients close.
        stack.push_async_callback(dispatcher.release)
        return DispatcherRuntime(dispatcher, resources=stack.pop_all())
