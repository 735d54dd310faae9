"""The registry of consumers: the one list every host loops over.

Each `ConsumerSpec` names a consumer of the fan-out (a subscription of the events topic) or of
the status queue, the setting that names its entity, how its core is built from the process's
shared clients, whether it runs the queue's sessions, and how `orders verify` audits it. The
Functions app (one trigger per entry), `orders worker --subscription`, `orders up`, the demo,
the local emulators' topology, the console and the Bicep's subscription array are all derived
from `CONSUMERS`: adding a consumer is its module, one entry here and one Bicep array element
(docs/new-consumer.md).

The order consumer of the orders queue is not in the list: it is the intake's own consumer, the
default of `orders worker`, with a runtime of its own (the benchmarks swap its store), and every
host runs it whatever else it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from exactly_once.ports import DocumentStore
from orders.domain.payments import Charge
from orders.service.billing import AfterCharge, AfterRefund, BillingConsumer, BillingStores
from orders.service.payment_port import PaymentGateway
from orders.service.ports import (
    DocumentLayout,
    InboxPartition,
    MessageHandler,
    StatusPublisher,
)
from orders.service.saga import OrderSaga
from orders.service.shipping import ShippingConsumer
from orders.service.status import StatusConsumer
from orders.service.subscribers import Source
from orders.service.verify_fanout import ConsumerAudit, StoredOrder, audit_billing, audit_shipping
from orders.settings import APP_SETTING_NAMES, Settings

# The consumers the order saga is made of (`orders verify` checks the saga's invariants when
# billing and shipping both ran, and GET's status when the status consumer did).
SHIPPING, BILLING, STATUS = "shipping", "billing", "status"


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

    def inbox_documents(self) -> DocumentStore:
        """The inbox container through the core's document store: consumers' records and
        effects, scoped by consumer (shipping's `inbox_batch`)."""
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
    # Builds the consumer's core; the registry wraps it in spans and `orders.<name>.*` counters.
    factory: Callable[[ConsumerWiring], MessageHandler]
    # The Functions trigger's name (deployed apps keep it, and its `AzureWebJobs.<name>.Disabled`).
    function_name: str
    # What the trigger does, in one line (its docstring in the Functions app).
    description: str
    # A subscription of the events topic (the default); else the status queue.
    on_topic: bool = True
    # Whether the status queue's sessions are used when STATUS_SESSIONS is true.
    sessions: bool = False
    # What `orders verify` checks of its effects; None: its outcomes are reported, not audited.
    audit: Callable[[AuditInputs], ConsumerAudit] | None = None

    @property
    def setting(self) -> str:
        """The app setting that names its entity (a subscription or the status queue)."""
        return f"{self.name.upper()}_SUBSCRIPTION" if self.on_topic else "STATUS_QUEUE"

    @property
    def subscription(self) -> str | None:
        """The subscription's name where no setting overrides it: the consumer's own name."""
        return self.name if self.on_topic else None

    def source(self, settings: Settings) -> Source:
        """Where it competes under these settings."""
        if not self.on_topic:
            return Source(queue=settings.status_queue)
        return Source(
            topic=settings.order_events_topic,
            subscription=settings.subscription(self.setting, self.name),
        )

    def runs_sessions(self, settings: Settings) -> bool:
        return self.sessions and settings.status_sessions


def _shipping(wiring: ConsumerWiring) -> MessageHandler:
    return ShippingConsumer(
        wiring.inbox_documents(), wiring.saga(), wiring.layout, wiring.status_publisher()
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
    )


def _status(wiring: ConsumerWiring) -> MessageHandler:
    return StatusConsumer(wiring.orders(), wiring.layout)


def _audit_shipping(found: AuditInputs) -> ConsumerAudit:
    return audit_shipping(found.orders, found.inbox, cancelled=found.cancelled)


def _audit_billing(found: AuditInputs) -> ConsumerAudit:
    return audit_billing(found.orders, found.inbox, found.charges, cancelled=found.cancelled)


CONSUMERS: tuple[ConsumerSpec, ...] = (
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
        on_topic=False,
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


def subscription_consumers() -> tuple[ConsumerSpec, ...]:
    """The consumers on subscriptions of the events topic (the Bicep's subscription array)."""
    return tuple(spec for spec in CONSUMERS if spec.on_topic)


def app_setting_names() -> frozenset[str]:
    """Every app setting the Azure deployment sets: the fixed ones and each consumer's."""
    return APP_SETTING_NAMES | {spec.setting for spec in CONSUMERS}
