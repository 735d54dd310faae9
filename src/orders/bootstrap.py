"""The composition root: wiring only, the one place that puts real adapters under the core.

Every runtime is built by one mechanism: an `AsyncExitStack` that registers each resource's
cleanup the moment the resource exists, is unwound if a later step fails, and is handed to the
`Runtime` with `pop_all()`, whose `close()` unwinds it. Hosts (the Functions triggers, the
workers, the HTTP API, the console) get a runtime and close it; tests build the same core over
fakes of the ports. What runs a runtime, reads for an audit or decodes a host's input lives in
the entrypoints and adapters (`pyproject.toml` names each entrypoint's route to an adapter).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from exactly_once import ExactlyOnceConsumer
from exactly_once.cosmos import CosmosStore
from exactly_once.options import DEFAULT_LEASE_SECONDS
from exactly_once.store import DocumentCreator, DocumentStore
from orders.adapters.cosmos_billing import billing_stores
from orders.adapters.cosmos_client import (
    Containers,
    idempotency_container,
    inbox_container,
    leases_container,
    order_partitioned_store,
    order_store,
    orders_container,
)

# Re-exported for the worker's benchmark hook: how the order consumer's store is made.
from orders.adapters.cosmos_client import StoreFactory as StoreFactory
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.adapters.cosmos_layout import CosmosLayout
from orders.adapters.cosmos_order_reader import CosmosOrderReader
from orders.adapters.cosmos_outbox import CosmosOutboxFeed, dispatcher_leases
from orders.adapters.decision_journals import JournalFolder
from orders.adapters.monitoring import configure_monitoring
from orders.adapters.payments_http import HttpPaymentGateway

# Re-exported: the hosts make (or share) the process's clients and hand them to the runtimes.
from orders.adapters.process_clients import ProcessClients as ProcessClients
from orders.adapters.process_clients import given_or_own
from orders.adapters.process_clients import shared_process_clients as shared_process_clients
from orders.adapters.servicebus_counts import ServiceBusEntityCounter
from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters
from orders.adapters.servicebus_peek import PeekReceivers
from orders.adapters.servicebus_publisher import (
    ServiceBusEventPublisher,
    ServiceBusOrderPublisher,
    ServiceBusStatusPublisher,
)
from orders.observability import SubscriberTelemetry
from orders.service.billing import AfterCharge, AfterRefund, BillingStores
from orders.service.console import OperationsConsole
from orders.service.dispatcher import DEFAULT_POLL_SECONDS, AfterPublish, OutboxDispatcher
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.instrumented import InstrumentedHandler
from orders.service.order_lookup import OrderLookup
from orders.service.payment_port import PaymentGateway
from orders.service.ports import (
    DocumentLayout,
    OrderPublisher,
    StatusPublisher,
)
from orders.service.registry import ConsumerSpec, console_sources
from orders.service.runtimes import ConsoleRuntime as ConsoleRuntime
from orders.service.runtimes import DispatcherRuntime as DispatcherRuntime
from orders.service.runtimes import HttpRuntime as HttpRuntime
from orders.service.runtimes import Runtime as Runtime
from orders.service.runtimes import SubscriberRuntime as SubscriberRuntime
from orders.service.saga import OrderSaga
from orders.settings import Settings

# How every consumer's documents and ids are laid out in Cosmos DB: one mapping, no I/O.
DOCUMENT_LAYOUT: DocumentLayout = CosmosLayout()


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
        shared = given_or_own(stack, settings, clients, **cosmos_client_options)
        client = await shared.cosmos(create_local_resources)
        if publisher is None:
            publisher = ServiceBusOrderPublisher(shared.servicebus(), settings.orders_queue)
            stack.push_async_callback(publisher.close)
        status = status_publisher
        if status is None:
            status = ServiceBusStatusPublisher(
                shared.servicebus(), settings.status_queue, sessions=settings.status_sessions
            )
            stack.push_async_callback(status.close)
        store = CosmosIdempotencyStore(idempotency_container(client, settings))
        intake = IdempotentOrderIntake(
            store,
            publisher,
            status=status,
            saga=OrderSaga(
                order_partitioned_store(orders_container(client, settings)), DOCUMENT_LAYOUT
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


async def build_console_runtime(
    settings: Settings, *, clients: ProcessClients | None = None
) -> ConsoleRuntime:
    """The console over one Service Bus client (peeks, the dead-letter tools), the orders
    container, and the workers' journals where a folder of them is configured (locally)."""
    settings.require_servicebus()
    async with AsyncExitStack() as stack:
        shared = given_or_own(stack, settings, clients)
        cosmos = await shared.cosmos(create_local_resources=False)
        servicebus = shared.servicebus()
        folder = settings.decisions_folder
        payments = None
        if settings.payments_url:
            payments = HttpPaymentGateway(
                settings.payments_url,
                settings.payments_timeout_seconds,
                token=settings.payments_token,
            )
            stack.push_async_callback(payments.close)
        # Every page peeks: the console's receivers stay open (one per entity and sub-queue).
        peeks = PeekReceivers(servicebus)
        stack.push_async_callback(peeks.close)
        console = OperationsConsole(
            console_sources(settings),
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


@dataclass
class _Wiring:
    """What a registered consumer's factory builds on (`ConsumerWiring`): ports over the shared
    clients, each made on first use, its cleanup registered on the runtime's stack."""

    stack: AsyncExitStack
    clients: ProcessClients
    containers: Containers
    after_charge: AfterCharge | None = None
    after_refund: AfterRefund | None = None
    store_factory: StoreFactory = order_store  # a benchmark swaps in its own
    _status: ServiceBusStatusPublisher | None = field(default=None, init=False)

    @property
    def settings(self) -> Settings:
        return self.clients.settings

    @property
    def layout(self) -> DocumentLayout:
        # The consumers' records expire past every redelivery of their message (issue 34).
        return CosmosLayout(record_ttl_seconds=self.settings.record_ttl_seconds)

    def order_store(self) -> DocumentCreator:
        return self.store_factory(self.containers)

    def inbox_store(self) -> CosmosStore:
        return order_partitioned_store(self.containers.inbox())

    def orders(self) -> DocumentStore:
        return order_partitioned_store(self.containers.orders())

    def billing_records(self) -> BillingStores:
        return billing_stores(self.containers.inbox())

    def saga(self) -> OrderSaga:
        return OrderSaga(self.orders(), DOCUMENT_LAYOUT)

    def status_publisher(self) -> StatusPublisher:
        if self._status is None:
            settings = self.settings
            self._status = ServiceBusStatusPublisher(
                self.clients.servicebus(), settings.status_queue, sessions=settings.status_sessions
            )
            self.stack.push_async_callback(self._status.close)
        return self._status

    def payments(self) -> PaymentGateway:
        settings = self.settings
        gateway = HttpPaymentGateway(
            settings.require_payments(),
            settings.payments_timeout_seconds,
            token=settings.payments_token,
        )
        self.stack.push_async_callback(gateway.close)
        return gateway


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
    """A registered consumer (its registry entry's factory) and where it competes, under its
    spans and `orders.<consumer>.*` counters unless it instruments itself or is a door of its
    own."""
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        shared = given_or_own(stack, settings, clients, **cosmos_client_options)
        cosmos = await shared.cosmos(create_local_resources)
        stores = store_factory or order_store
        containers = Containers(cosmos, settings)
        wiring = _Wiring(stack, shared, containers, after_charge, after_refund, stores)
        source, consumer = spec.source(settings), spec.factory(wiring)
        # A door of its own (`@exactly_once`) records its own spans and counts.
        if not spec.instruments_itself and not isinstance(consumer, ExactlyOnceConsumer):
            telemetry = SubscriberTelemetry(spec.name, destination=str(source))
            consumer = InstrumentedHandler(consumer, telemetry)
        return SubscriberRuntime(source, consumer, resources=stack.pop_all())


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
        shared = given_or_own(stack, settings, clients)
        cosmos = await shared.cosmos(create_local_resources)
        publisher = ServiceBusEventPublisher(shared.servicebus(), settings.order_events_topic)
        stack.push_async_callback(publisher.close)
        feed = CosmosOutboxFeed(orders_container(cosmos, settings))
        dispatcher = OutboxDispatcher(
            feed,
            publisher,
            dispatcher_leases(leases_container(cosmos, settings), lease_seconds),
            DOCUMENT_LAYOUT,
            after_publish=after_publish,
            poll_seconds=poll_seconds,
            lease_seconds=lease_seconds,
            parking=feed,  # a poison document is parked on itself
        )
        # Last registered, first run: the leases are given up before the clients close.
        stack.push_async_callback(dispatcher.release)
        return DispatcherRuntime(dispatcher, resources=stack.pop_all())
