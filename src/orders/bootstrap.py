"""The composition root: the one place that wires real adapters into the core.

Every runtime is built here, by one mechanism: an `AsyncExitStack` that registers each
resource's cleanup the moment the resource exists (the process credential first, created
lazily on first use), is unwound if any later step fails, and is handed over to the runtime
with `pop_all()` when the build succeeds. Hosts (Functions, worker, HTTP API, load, verify,
benchmarks) get a runtime and close it; tests build the same core over fakes of the ports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from exactly_once.backoff import Retry
from exactly_once.records import DEFAULT_LEASE_SECONDS
from orders.adapters.cosmos_audit import documents_of_run
from orders.adapters.cosmos_client import (
    LocalContainer,
    create_cosmos_client,
    ensure_local_containers,
    ensure_local_resources,
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
from orders.adapters.identity import ProcessCredential
from orders.adapters.monitoring import configure_monitoring
from orders.adapters.payments_http import HttpPaymentGateway
from orders.adapters.servicebus import (
    FunctionsMessageActions as FunctionsMessageActions,  # what the Functions entrypoints hand in
)
from orders.adapters.servicebus import (
    FunctionsSettler,
    create_servicebus_client,
    to_received_order_message,
)
from orders.adapters.servicebus_counts import ServiceBusEntityCounter
from orders.adapters.servicebus_dead_letters import ServiceBusDeadLetters
from orders.adapters.servicebus_load import ServiceBusLoadSender, peek_dead_letters
from orders.adapters.servicebus_peek import PeekReceivers
from orders.adapters.servicebus_publisher import (
    ServiceBusEventPublisher,
    ServiceBusOrderPublisher,
    ServiceBusStatusPublisher,
)
from orders.adapters.servicebus_worker import run_session_worker_on, run_worker_on
from orders.domain.load_plan import LoadPlan, PlannedCancel
from orders.domain.outcomes import Decision
from orders.domain.ownership import app_scope
from orders.domain.received import ReceivedOrderMessage
from orders.exceptions import (
    ServiceNotReadyError,
)
from orders.observability import ConsumerTelemetry, SubscriberTelemetry
from orders.service.billing import AfterCharge, AfterRefund
from orders.service.cancels import (
    CancelResults,
    StoreProbe,
    intake_canceller,
    run_cancels,
)
from orders.service.console import OperationsConsole
from orders.service.consumer import OrderConsumer
from orders.service.dispatcher import (
    DEFAULT_POLL_SECONDS,
    AfterPublish,
    DispatcherStats,
    OutboxDispatcher,
)
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.instrumented import InstrumentedHandler
from orders.service.load import LoadResult, run_load
from orders.service.order_lookup import OrderLookup
from orders.service.payment_port import PaymentGateway
from orders.service.ports import (
    DocumentLayout,
    MessageHandler,
    MessageSettler,
    OrderPublisher,
    OrderStore,
    StatusPublisher,
)
from orders.service.registry import (
    BILLING,
    CONSUMERS,
    ConsumerSpec,
)
from orders.service.saga import OrderSaga
from orders.service.subscribers import Source
from orders.service.verify import VerifyReport
from orders.service.verify_run import RunRecords, audit_run
from orders.service.worker_options import WorkerOptions
from orders.service.worker_stats import WorkerStats
from orders.settings import MonitoringSettings, Settings

if TYPE_CHECKING:
    from orders.adapters.cosmos_client import ContainerProxy, CosmosClient
    from orders.adapters.servicebus import ServiceBusClient, ServiceBusReceivedMessage

logger = logging.getLogger("orders")

# How the consumer's store is made from the orders container (a benchmark swaps in its own).
StoreFactory = Callable[["ContainerProxy"], OrderStore]
# How every consumer's documents and ids are laid out in Cosmos DB: one mapping, no I/O.
DOCUMENT_LAYOUT: DocumentLayout = CosmosLayout()


# --- Building blocks: each registers its cleanup before it can fail ---------------------------


class ProcessClients:
    """One credential, one Cosmos client and one Service Bus client, each made on first use,
    shared by every runtime built over them, and closed once, by `close()`.

    The SDKs want one client per process (each keeps a connection pool; the credential keeps
    one token cache). Whoever makes a ProcessClients closes it: a runtime built without one
    makes its own and closes it with itself; `orders serve` shares one between the API and the
    console; the Functions host shares `shared_process_clients()` between all its runtimes.
    """

    def __init__(self, settings: Settings, **cosmos_client_options: Any) -> None:
        self.settings = settings
        self._cosmos_client_options = cosmos_client_options
        self._identity: ProcessCredential | None = None
        self._cosmos: CosmosClient | None = None
        self._servicebus: ServiceBusClient | None = None
        self._local_resources_ready = False
        self._preparing = asyncio.Lock()

    @property
    def identity(self) -> ProcessCredential:
        if self._identity is None:
            self._identity = ProcessCredential(self.settings)
        return self._identity

    async def cosmos(self, create_local_resources: bool | None = None) -> CosmosClient:
        """The Cosmos client; where wanted (by default: with emulator keys) the database and
        containers are created first, once per process."""
        if self._cosmos is None:
            self._cosmos = create_cosmos_client(
                self.settings, self.identity, **self._cosmos_client_options
            )
        if create_local_resources is None:
            create_local_resources = self.settings.uses_emulator_keys
        if create_local_resources and not self._local_resources_ready:
            async with self._preparing:
                if not self._local_resources_ready:
                    await ensure_local_resources(self._cosmos, self.settings)
                    self._local_resources_ready = True
        return self._cosmos

    def servicebus(self) -> ServiceBusClient:
        if self._servicebus is None:
            self._servicebus = create_servicebus_client(self.settings, self.identity)
        return self._servicebus

    async def close(self) -> None:
        """The clients, then the credential they use (the SDK clients do not close it)."""
        servicebus, self._servicebus = self._servicebus, None
        cosmos, self._cosmos = self._cosmos, None
        identity, self._identity = self._identity, None
        self._local_resources_ready = False
        if servicebus is not None:
            await servicebus.close()
        if cosmos is not None:
            await cosmos.close()
        if identity is not None:
            await identity.close()


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


@dataclass
class ConsumerRuntime:
    """The consumer and everything it holds open (closed with `close()`)."""

    consumer: OrderConsumer
    resources: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def close(self) -> None:
        await self.resources.aclose()


async def build_consumer_runtime(
    settings: Settings,
    *,
    telemetry: ConsumerTelemetry | None = None,
    create_local_resources: bool | None = None,
    store_factory: StoreFactory | None = None,
    clients: ProcessClients | None = None,
    **cosmos_client_options: Any,
) -> ConsumerRuntime:
    """The consumer over Cosmos; with emulator keys the containers are created too."""
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        shared = _clients(stack, settings, clients, **cosmos_client_options)
        client = await shared.cosmos(create_local_resources)
        make_store = store_factory or CosmosOrderStore
        consumer = OrderConsumer(
            make_store(orders_container(client, settings)),
            DOCUMENT_LAYOUT,
            telemetry or ConsumerTelemetry(destination=settings.orders_queue),
        )
        return ConsumerRuntime(consumer, stack.pop_all())


@dataclass
class HttpRuntime:
    """What the HTTP API needs; tests build one over fakes."""

    intake: IdempotentOrderIntake
    lookup: OrderLookup
    default_scope: str
    # Trust X-MS-CLIENT-PRINCIPAL-ID only where the platform sets it (App Service auth on).
    trust_principal_header: bool = False
    resources: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def close(self) -> None:
        await self.resources.aclose()


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
class ConsoleRuntime:
    """What the operations console works with; tests build one over fakes."""

    console: OperationsConsole
    # As in HttpRuntime: the principal header names who acted only where the platform sets it.
    trust_principal_header: bool = False
    resources: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def close(self) -> None:
        await self.resources.aclose()


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
        # The orders queue, every registered consumer's entity (its queue first), then any
        # other subscription ORDERS_CONSOLE_SUBSCRIPTIONS names.
        sources = [Source(queue=settings.orders_queue)]
        for spec in sorted(CONSUMERS, key=lambda spec: spec.on_topic):
            sources.append(spec.source(settings))
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
        return ConsoleRuntime(console, settings.platform_auth_enabled, stack.pop_all())


async def console_runtime_from_env() -> ConsoleRuntime:
    clients = shared_process_clients()
    return await build_console_runtime(clients.settings, clients=clients)


# --- Lazily built runtimes (the two the Functions host runs) ----------------------------------


class Runtime(Protocol):
    async def close(self) -> None: ...


R = TypeVar("R", bound=Runtime)


class Lazy(Generic[R]):
    """A runtime built on first use, never at import: the Functions host imports
    function_app.py before any setting or network is needed. A failed build raises
    `ServiceNotReadyError` and is tried again on the next use."""

    def __init__(self, build: Callable[[], Awaitable[R]], what: str) -> None:
        self._build = build
        self._what = what
        self._value: R | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> R:
        if self._value is None:
            async with self._lock:
                if self._value is None:
                    try:
                        self._value = await self._build()
                    except Exception as exc:
                        logger.error("cannot build the %s", self._what, exc_info=exc)
                        raise ServiceNotReadyError(f"{self._what} unavailable: {exc!r}") from exc
        return self._value

    def use(self, value: R | None) -> None:
        """Put a runtime in place (tests); None makes the next use build again."""
        self._value = value

    async def close(self) -> None:
        value, self._value = self._value, None
        if value is not None:
            await value.close()


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


_shared_clients: ProcessClients | None = None


def shared_process_clients() -> ProcessClients:
    """The clients every runtime built from app settings shares: the Functions host builds up to
    seven in one process (the order consumer, three subscribers, the dispatcher, the HTTP API
    and the console), on one credential, one Cosmos client and one Service Bus client. They
    live as long as the process (the host gives no shutdown hook); settings that changed since
    (tests) get clients of their own."""
    global _shared_clients
    settings = Settings.from_env()
    if _shared_clients is None or _shared_clients.settings != settings:
        _shared_clients = ProcessClients(settings)
    return _shared_clients


def from_functions_host(
    received_message: ServiceBusReceivedMessage | Any, message_actions: FunctionsMessageActions
) -> tuple[ReceivedOrderMessage, MessageSettler]:
    """The Functions host's message and message actions as the core's message and settler."""
    return (
        to_received_order_message(received_message),
        FunctionsSettler(message_actions, received_message),
    )


# --- Processes that run to an end -------------------------------------------------------------


async def run_worker(
    settings: Settings,
    options: WorkerOptions,
    stop: asyncio.Event,
    *,
    after_decision: Callable[[Decision], None] | None = None,
    store_factory: StoreFactory | None = None,
    on_retry: Callable[[Retry], None] | None = None,
) -> WorkerStats:
    """The consumer (Cosmos) and one Service Bus client on one credential; compete until `stop`."""
    settings.require_servicebus()
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        clients = _clients(stack, settings, None)
        cosmos = await clients.cosmos()
        make_store = store_factory or CosmosOrderStore
        consumer = OrderConsumer(
            make_store(orders_container(cosmos, settings)),
            DOCUMENT_LAYOUT,
            ConsumerTelemetry(destination=settings.orders_queue),
        )
        servicebus = clients.servicebus()
        return await run_worker_on(
            servicebus,
            Source(queue=settings.orders_queue),
            consumer,
            options,
            stop,
            after_decision,
            on_retry,
        )


@dataclass
class SubscriberRuntime:
    """One fan-out consumer of the events topic and where it competes."""

    source: Source
    handler: MessageHandler
    resources: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def close(self) -> None:
        await self.resources.aclose()


class _Wiring:
    """What a registered consumer's factory builds on (`ConsumerWiring`): ports over the shared
    clients, each made on first use, its cleanup registered on the runtime's stack."""

    def __init__(
        self,
        stack: AsyncExitStack,
        clients: ProcessClients,
        cosmos: CosmosClient,
        after_charge: AfterCharge | None,
        after_refund: AfterRefund | None,
    ) -> None:
        self._stack = stack
        self._clients = clients
        self._cosmos = cosmos
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
) -> tuple[Source, MessageHandler]:
    """The consumer's source and core (its registry entry's factory), under its spans and
    `orders.<consumer>.*` counters."""
    cosmos = await clients.cosmos(create_local_resources)
    core = spec.factory(_Wiring(stack, clients, cosmos, after_charge, after_refund))
    source = spec.source(clients.settings)
    telemetry = SubscriberTelemetry(spec.name, destination=str(source))
    return source, InstrumentedHandler(core, telemetry)


async def build_subscriber_runtime(
    settings: Settings,
    spec: ConsumerSpec,
    *,
    create_local_resources: bool | None = None,
    clients: ProcessClients | None = None,
) -> SubscriberRuntime:
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        shared = _clients(stack, settings, clients)
        source, handler = await _subscriber(stack, shared, spec, create_local_resources)
        return SubscriberRuntime(source, handler, stack.pop_all())


async def run_subscriber(
    settings: Settings,
    spec: ConsumerSpec,
    options: WorkerOptions,
    stop: asyncio.Event,
    *,
    after_decision: Callable[[Decision], None] | None = None,
    after_charge: AfterCharge | None = None,
    after_refund: AfterRefund | None = None,
    on_retry: Callable[[Retry], None] | None = None,
) -> WorkerStats:
    """One registered consumer (a subscription of the events topic, or the status queue),
    competing until `stop`; the queue's sessions where its spec runs them and `STATUS_SESSIONS`
    is on."""
    settings.require_servicebus()
    configure_monitoring(settings)
    async with AsyncExitStack() as stack:
        clients = _clients(stack, settings, None)
        servicebus = clients.servicebus()
        source, handler = await _subscriber(
            stack, clients, spec, after_charge=after_charge, after_refund=after_refund
        )
        if spec.runs_sessions(settings):
            return await run_session_worker_on(
                servicebus, source, handler, options, stop, after_decision, on_retry
            )
        return await run_worker_on(
            servicebus, source, handler, options, stop, after_decision, on_retry
        )


@dataclass
class DispatcherRuntime:
    dispatcher: OutboxDispatcher
    resources: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def close(self) -> None:
        await self.resources.aclose()


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
        return DispatcherRuntime(dispatcher, stack.pop_all())


async def run_dispatcher(
    settings: Settings,
    stop: asyncio.Event,
    *,
    after_publish: AfterPublish | None = None,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> DispatcherStats:
    """The dispatcher as a process (pull model, checkpoints in the leases container)."""
    runtime = await build_dispatcher_runtime(
        settings,
        after_publish=after_publish,
        poll_seconds=poll_seconds,
        lease_seconds=lease_seconds,
    )
    try:
        return await runtime.dispatcher.run(stop)
    finally:
        await runtime.close()


async def prepare_local_cosmos(
    settings: Settings, extra_containers: Sequence[LocalContainer] = ()
) -> None:
    """Create the database and containers on an emulator (Azure gets them from Bicep), and a
    user's own containers (`orders up --entities`)."""
    async with create_cosmos_client(settings) as client:  # emulator keys only
        await ensure_local_resources(client, settings)
        await ensure_local_containers(client, extra_containers)


async def send_load(
    settings: Settings,
    plan: LoadPlan,
    *,
    duplicate_window_seconds: float,
    on_sent: Callable[[int], None] = lambda count: None,
) -> LoadResult:
    async with AsyncExitStack() as stack:
        client = _clients(stack, settings, None).servicebus()
        sender = await stack.enter_async_context(
            ServiceBusLoadSender(
                client,
                settings.orders_queue,
                settings.status_queue if plan.status_updates else None,
                status_sessions=settings.status_sessions,
                # The load's orders are the load's cancels' to cancel (`send_cancels`).
                owner_scope=app_scope(settings.idempotency_scope),
            )
        )
        return await run_load(
            plan, sender, duplicate_window_seconds=duplicate_window_seconds, on_sent=on_sent
        )


async def send_cancels(
    settings: Settings, cancels: tuple[PlannedCancel, ...] | list[PlannedCancel]
) -> CancelResults:
    """These planned cancels, each at its point, through the core of the API's cancel route
    (the stack's shared caller scope, as an API caller without a principal has)."""
    async with AsyncExitStack() as stack:
        clients = _clients(stack, settings, None)
        runtime = await build_http_runtime(settings, clients=clients)
        stack.push_async_callback(runtime.close)
        cosmos = await clients.cosmos()
        probe = StoreProbe(
            CosmosFencedDocuments(orders_container(cosmos, settings)),
            CosmosFencedDocuments(inbox_container(cosmos, settings)),
            DOCUMENT_LAYOUT,
        )
        scope = app_scope(settings.idempotency_scope)
        cancel = intake_canceller(runtime.intake, scope)
        return await run_cancels(tuple(cancels), cancel, probe)


async def verify_run(
    settings: Settings,
    plan: LoadPlan,
    *,
    fanout: frozenset[str] = frozenset(),
    cancel_results: CancelResults | None = None,
) -> VerifyReport:
    """Read what the stores hold for the run (Cosmos, the dead-letter queues and, with billing
    in `fanout`, the payment service) and audit it (`verify_run.audit_run`)."""
    async with AsyncExitStack() as stack:
        clients = _clients(stack, settings, None)
        cosmos = await clients.cosmos(create_local_resources=False)
        bus = clients.servicebus()
        documents = await documents_of_run(orders_container(cosmos, settings), plan.run_id)
        records = RunRecords(documents, await peek_dead_letters(bus, settings.orders_queue))
        if fanout:
            inbox = await documents_of_run(inbox_container(cosmos, settings), plan.run_id)
            records = replace(records, inbox=inbox)
        if BILLING in fanout:
            async with HttpPaymentGateway(
                settings.require_payments(), settings.payments_timeout_seconds
            ) as payments:
                records = replace(
                    records,
                    charges=await payments.list_all_charges(),
                    refunds=await payments.list_all_refunds(),
                )
        if plan.status_updates:
            status_dead_letters = await peek_dead_letters(bus, settings.status_queue)
            records = replace(records, status_dead_letters=status_dead_letters)
    return audit_run(plan, records, DOCUMENT_LAYOUT, fanout=fanout, cancel_results=cancel_results)
