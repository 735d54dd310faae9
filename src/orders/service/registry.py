"""The registry of consumers: the one list every host loops over.

Each `ConsumerSpec` names a consumer of the fan-out (a subscription of the events topic) or of
the status queue, the setting that names its entity, how its core is built from the process's
shared clients, whether it runs the queue's sessions, and how `orders verify` audits it. The
Functions app (one trigger per entry), `orders worker --subscription`, `orders up`, the demo,
the local emulators' topology, the console and the Bicep's subscription array are all derived
from `CONSUMERS`: adding a consumer is its module, one entry here and one Bicep array element
(docs/new-consumer.md).

The order consumer of the orders queue is the first entry: the intake's own consumer, the
default of `orders worker`, built and run by the same pipeline as the others. The rest
(`downstream_consumers()`) consume what it writes: the events topic's subscriptions and the
status queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from exactly_once import Store
from exactly_once.store import DocumentCreator, DocumentStore
from orders.domain.events import BareEventIdCutover
from orders.domain.payments import Charge
from orders.observability import ConsumerTelemetry
from orders.service.billing import AfterCharge, AfterRefund, BillingConsumer, BillingStores
from orders.service.consumer import OrderConsumer
from orders.service.payment_port import PaymentGateway
from orders.service.ports import (
    DocumentLayout,
    InboxPartition,
    MessageHandler,
    RegisteredConsumer,
    StatusPublisher,
)
from orders.service.saga import OrderSaga
from orders.service.shipping import ShippingConsumer
from orders.service.status import StatusConsumer
from orders.service.subscribers import Source
from orders.service.verify_fanout import ConsumerAudit, StoredOrder, audit_billing, audit_shipping
from orders.settings import APP_SETTING_NAMES, Settings

# The order consumer, and the consumers the order saga is made of (`orders verify` checks the
# saga's invariants when billing and shipping both ran, and GET's status when status did).
ORDERS, SHIPPING, BILLING, STATUS = "orders", "shipping", "billing", "status"
# The queues a consumer may compete on, by the app setting that names each.
QUEUES: Mapping[str, Callable[[Settings], str]] = {
    "ORDERS_QUEUE": lambda settings: settings.orders_queue,
    "STATUS_QUEUE": lambda settings: settings.status_queue,
}


class ConsumerWiring(Protocol):
    """What a consumer's factory may build on: the ports over the process's shared clients,
    each made on first use and closed with the consumer's runtime (bootstrap implements it)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def layout(self) -> DocumentLayout:
        """How the store lays out the documents and ids the consumers write and read."""
        ...

    def billing_records(self) -> BillingStores:
        """Billing's charge and refund records (in the inbox container), the core's store."""
        ...

    def order_store(self) -> DocumentCreator:
        """The orders container, as the order consumer writes it (order, outbox event, lines:
        one batch through the core's document store)."""
        ...

    def inbox_store(self) -> Store:
        """The inbox container as the core's store (`exactly_once.CosmosStore`): consumers'
        records and effects, scoped by consumer (shipping's `create_or_find`, and a consumer
        written with `@exactly_once`)."""
        ...

    def orders(self) -> DocumentStore:
        """The orders container through the core's document store (the status consumer's
        versioned replace, through the core's `apply_version`)."""
        ...

    def saga(self) -> OrderSaga:
        """The order document's saga fields (reservations, cancels)."""
        ...

    def status_publisher(self) -> StatusPublisher:
        """The status queue's sender: the status a consumer's effect produced."""
        ...

    def payments(self) -> PaymentGateway:
        """The payment service at PAYMENTS_URL (a clear error without it)."""
        ...

    @property
    def after_charge(self) -> AfterCharge | None:
        """Billing's fault-injection hook (the worker's drill), else None."""
        ...

    @property
    def after_refund(self) -> AfterRefund | None: ...


@dataclass(frozen=True)
class AuditInputs:
    """What `orders verify` read for a run: the consumer audits are pure functions of it."""

    orders: list[StoredOrder]
    inbox: Mapping[str, InboxPartition]  # by orderId
    charges: list[Charge]
    cancelled: frozenset[str]


@dataclass(frozen=True)
class ConsumerSpec:
    """One consumer: its name, where it competes, how it is built and how it is audited."""

    name: str
    # Builds the consumer: its core, which the pipeline wraps in spans and `orders.<name>.*`
    # counters and the hosts make a door; or a door of its own (an `ExactlyOnceConsumer` made
    # with `@exactly_once`, docs/new-consumer.md), which the hosts drive as it is.
    factory: Callable[[ConsumerWiring], RegisteredConsumer]
    # The Functions trigger's name (deployed apps keep it, and its `AzureWebJobs.<name>.Disabled`).
    function_name: str
    # What the trigger does, in one line (its docstring in the Functions app).
    description: str
    # None: a subscription of the events topic (the default); else the setting (a key of
    # QUEUES) that names the queue it competes on.
    queue_setting: str | None = None
    # Whether the queue's sessions are used when STATUS_SESSIONS is true.
    sessions: bool = False
    # What `orders verify` checks of its effects; None: its outcomes are reported, not audited.
    audit: Callable[[AuditInputs], ConsumerAudit] | None = None
    # Whether its core opens its own span and counts its own metrics (the order consumer's
    # `orders.*` counters); else the pipeline wraps it in spans and `orders.<name>.*` counters.
    instruments_itself: bool = False

    def __post_init__(self) -> None:
        if self.queue_setting is not None and self.queue_setting not in QUEUES:
            raise ValueError(f"{self.name}: no queue setting {self.queue_setting!r}")

    @property
    def on_topic(self) -> bool:
        return self.queue_setting is None

    @property
    def setting(self) -> str:
        """The app setting that names its entity (a subscription or a queue)."""
        return self.queue_setting or f"{self.name.upper()}_SUBSCRIPTION"

    @property
    def subscription(self) -> str | None:
        """The subscription's name where no setting overrides it: the consumer's own name."""
        return self.name if self.on_topic else None

    def source(self, settings: Settings) -> Source:
        """Where it competes under these settings."""
        if self.queue_setting is not None:
            return Source(queue=QUEUES[self.queue_setting](settings))
        return Source(
            topic=settings.order_events_topic,
            subscription=settings.subscription(self.setting, self.name),
        )

    def runs_sessions(self, settings: Settings) -> bool:
        return self.sessions and settings.status_sessions


def _orders(wiring: ConsumerWiring) -> MessageHandler:
    telemetry = ConsumerTelemetry(destination=wiring.settings.orders_queue)
    return OrderConsumer(wiring.order_store(), wiring.layout, telemetry)


def _shipping(wiring: ConsumerWiring) -> MessageHandler:
    return ShippingConsumer(
        wiring.inbox_store(),
        wiring.saga(),
        wiring.layout,
        wiring.status_publisher(),
        bare_event_ids=BareEventIdCutover(wiring.settings.bare_event_id_cutover),
    )


def _billing(wiring: ConsumerWiring) -> MessageHandler:
    return BillingConsumer(
        wiring.billing_records(),
        wiring.payments(),
        wiring.saga(),
        wiring.layout,
        lease_seconds=wiring.settings.billing_lease_seconds,
        retention=wiring.settings.record_retention,
        after_charge=wiring.after_charge,
        after_refund=wiring.after_refund,
        status=wiring.status_publisher(),
        bare_event_ids=BareEventIdCutover(wiring.settings.bare_event_id_cutover),
    )


def _status(wiring: ConsumerWiring) -> MessageHandler:
    return StatusConsumer(wiring.orders(), wiring.layout)


def _audit_shipping(found: AuditInputs) -> ConsumerAudit:
    return audit_shipping(found.orders, found.inbox, cancelled=found.cancelled)


def _audit_billing(found: AuditInputs) -> ConsumerAudit:
    return audit_billing(found.orders, found.inbox, found.charges, cancelled=found.cancelled)


CONSUMERS: tuple[ConsumerSpec, ...] = (
    ConsumerSpec(
        ORDERS,
        _orders,
        function_name="process_order",
        description="Orders: the order, its outbox event and lines in one transactional batch.",
        queue_setting="ORDERS_QUEUE",
        instruments_itself=True,
    ),
    ConsumerSpec(
        BILLING,
        _billing,
        function_name="bill_order",
        description="Billing: two phases around the payment call, with the order's downstream key.",
        audit=_audit_billing,
    ),
    ConsumerSpec(
        SHIPPING,
        _shipping,
        function_name="ship_order",
        description="Shipping: inbox record and shipment in one transactional batch.",
        audit=_audit_shipping,
    ),
    ConsumerSpec(
        STATUS,
        _status,
        function_name="apply_status",
        description="Status updates: conditional replace by version, no dedup store.",
        queue_setting="STATUS_QUEUE",
        sessions=True,
    ),
)


def consumer_named(name: str) -> ConsumerSpec:
    """The registered consumer of this name; `KeyError` naming the known ones otherwise."""
    for spec in CONSUMERS:
        if spec.name == name:
            return spec
    raise KeyError(f"no consumer {name!r}; registered: {', '.join(consumer_names())}")


def consumer_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in CONSUMERS)


def downstream_consumers() -> tuple[ConsumerSpec, ...]:
    """Every consumer but the order consumer: those of what it writes (the events topic's
    subscriptions, the status queue), which `orders verify` audits as the fan-out."""
    return tuple(spec for spec in CONSUMERS if spec.name != ORDERS)


def console_sources(settings: Settings) -> list[Source]:
    """What the console lists: every registered consumer's entity (the queues first, the orders
    queue first of all), then any other subscription ORDERS_CONSOLE_SUBSCRIPTIONS names."""
    sources = [spec.source(settings) for spec in sorted(CONSUMERS, key=lambda s: s.on_topic)]
    for topic, subscription in settings.console_subscriptions:
        named = Source(topic=topic, subscription=subscription)
        if named not in sources:
            sources.append(named)
    return sources


def subscription_consumers() -> tuple[ConsumerSpec, ...]:
    """The consumers on subscriptions of the events topic (the Bicep's subscription array)."""
    return tuple(spec for spec in CONSUMERS if spec.on_topic)


def app_setting_names() -> frozenset[str]:
    """Every app setting the Azure deployment sets: the fixed ones and each consumer's."""
    return APP_SETTING_NAMES | {spec.setting for spec in CONSUMERS}
