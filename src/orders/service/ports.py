"""The ports the core depends on. Adapters implement them; unit tests fake them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from exactly_once.change_feed import ChangeFeed
from exactly_once.decisions import Decision
from exactly_once.store import RecordStore
from orders.domain.dead_letters import DeadLetter, DeadLetterOutcome, DeadLetterPlan, Selection
from orders.domain.decision_counters import DecisionCounters
from orders.domain.events import OrderAccepted, OrderEvent
from orders.domain.idempotency import KeyRecord, OrderIdClaim
from orders.domain.inbox import BillingRecord, RefundRecord
from orders.domain.model import OrderPlaced
from orders.domain.received import ReceivedOrderMessage
from orders.domain.rejections import FiledRejection, OrderRejection
from orders.domain.saga import SagaOrder
from orders.domain.status import HistoryEntry, OrderStatusChanged, StoredStatus
from orders.service.subscribers import Source

if TYPE_CHECKING:
    from exactly_once import ExactlyOnceConsumer

# --- Document layouts: how the store lays out what the consumers write ----------------------
# The consumers hand documents to the `exactly_once` core (`create_or_find`,
# `apply_version`) and read records by id; the shapes and ids are the store adapter's
# (`adapters/cosmos_layout.CosmosLayout` implements them all), pure mapping with no I/O.


@dataclass(frozen=True)
class PendingEvent:
    """An outbox entry not yet published: its event, the MessageId every publish of this entry
    uses (stored on it, so retries are one message to duplicate detection) and the trace the
    publish continues."""

    event: OrderEvent
    message_id: str
    trace_context: dict[str, str]


class EventLayout(Protocol):
    def pending_event(self, document: Mapping[str, Any]) -> PendingEvent | None:
        """The event an undispatched outbox entry holds; None for any other document."""
        ...

    def outbox_document(
        self, event: OrderEvent, trace_context: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """The outbox entry for `event`, to be written in the batch that decides it."""
        ...


class SagaOrderReader(Protocol):
    def saga_order(self, document: Mapping[str, Any] | None) -> SagaOrder | None:
        """What the saga decides on, read off an order document; None for none or another."""
        ...


@dataclass(frozen=True)
class StoredLine:
    """One stored order line; amounts stay the decimal text they were stored as."""

    line_number: int
    sku: str
    quantity: int
    unit_price: str
    line_total: str


@dataclass(frozen=True)
class StoredOrderView:
    """The order document read for GET: the saga's view of it and the fields shown besides
    (amounts as their stored decimal text), with its lines in line-number order."""

    order: SagaOrder
    request_hash: str
    total_quantity: int
    total_amount: str
    processed_at: str
    lines: tuple[StoredLine, ...]


@dataclass(frozen=True)
class OrderPartition:
    """What an order's partition holds, read: the order (None until stored), its status
    (placed while no status document exists) and the rejections filed under its id."""

    order: StoredOrderView | None
    status: StoredStatus
    rejections: tuple[FiledRejection, ...]


@dataclass(frozen=True)
class StoredShipment:
    """Shipping's effect for an order, as stored."""

    order_id: str
    customer_id: str
    line_count: int
    status: str
    requested_at: str


@dataclass(frozen=True)
class InboxRecord:
    """A consumer's record that it handled a message (shipping's, written with the shipment)."""

    consumer: str
    message_id: str
    processed_at: str


@dataclass(frozen=True)
class InboxPartition:
    """What the inbox container holds for one order, read: the fan-out consumers' records and
    effects (a shipment is stored once per order by its id; a tuple, so an audit sees two)."""

    shipments: tuple[StoredShipment, ...] = ()
    charges: tuple[BillingRecord, ...] = ()
    refunds: tuple[RefundRecord, ...] = ()
    records: tuple[InboxRecord, ...] = ()


@dataclass(frozen=True)
class AuditedOrder:
    """One order document as the integrity audit reads it: a field it lacks is None (a finding
    for the audit, not a crash)."""

    request_hash: str | None
    cancelled: bool  # its fulfilment says cancelled


@dataclass(frozen=True)
class AuditedLine:
    sku: str | None
    quantity: int | None


@dataclass(frozen=True)
class AuditedRejection:
    document_id: str | None
    message_id: str | None
    reason: str | None


@dataclass(frozen=True)
class StoredRun:
    """A run's orders container as the integrity audit reads it: everything a typed
    `OrderPartition` cannot hold. Nothing is merged: an order stored twice is two entries, lines
    are kept without their order, events are counted, and a document of no known type is
    named by its id."""

    orders: dict[str, tuple[AuditedOrder, ...]]  # by orderId
    lines: dict[str, tuple[AuditedLine, ...]]  # by orderId, in line-number order
    outbox_events: dict[str, int]  # outbox entries but cancels (`OrderAccepted`), by orderId
    cancel_events: dict[str, int]  # `OrderCancelled` outbox entries, by orderId
    rejections: tuple[AuditedRejection, ...]
    unexpected: tuple[str | None, ...]  # ids, in the order read


class StatusReader(Protocol):
    def stored_status(self, document: Mapping[str, Any] | None) -> StoredStatus:
        """The status a status document holds; None (no document): the order as placed."""
        ...


class OrderViewLayout(SagaOrderReader, StatusReader, Protocol):
    """What GET and `orders verify` read off an order's stored documents."""

    def filed_rejection(self, document: Mapping[str, Any]) -> FiledRejection | None:
        """What a rejection document tells; None for any other document."""
        ...

    def order_partition(self, documents: Iterable[Mapping[str, Any]]) -> OrderPartition:
        """An order's documents (one partition, any order, any other types) read."""
        ...

    def order_partitions(self, documents: Iterable[Mapping[str, Any]]) -> dict[str, OrderPartition]:
        """Many orders' documents read, by orderId, for an audit: a line it cannot read is
        left out (the integrity audit reports it), never a failure of the whole read."""
        ...


class AuditLayout(OrderViewLayout, Protocol):
    """What `orders verify` reads off a run's stored documents."""

    def inbox_partitions(self, documents: Iterable[Mapping[str, Any]]) -> dict[str, InboxPartition]:
        """The inbox container's documents of many orders read, by orderId (documents of
        other types are not shown)."""
        ...

    def stored_run(self, documents: Iterable[Mapping[str, Any]]) -> StoredRun:
        """A run's orders container read for the integrity audit, tolerating what the typed
        read refuses."""
        ...


class SagaLayout(EventLayout, SagaOrderReader, Protocol):
    """The order document as the saga reads and rewrites it (If-Match, through the core's
    `DocumentStore`)."""

    def shipment_reserved(
        self, document: Mapping[str, Any], event_id: str, at: datetime
    ) -> dict[str, Any]:
        """The stored order document, every field kept, with the shipment reserved."""
        ...

    def order_cancelled(
        self, document: Mapping[str, Any], at: datetime, reason: str | None
    ) -> dict[str, Any]:
        """The stored order document, every field kept, cancelled."""
        ...

    def order_charged(
        self, document: Mapping[str, Any], payment_id: str, at: datetime
    ) -> dict[str, Any]:
        """The stored order document, every field kept, with billing's charge recorded."""
        ...

    def order_payment_failed(
        self, document: Mapping[str, Any], at: datetime, reason: str | None
    ) -> dict[str, Any]:
        """The stored order document, every field kept, ended by a refused charge."""
        ...


class OrderLayout(EventLayout, Protocol):
    def order_write(
        self,
        order: OrderPlaced,
        *,
        request_hash: str,
        message_id: str,
        processed_at: datetime,
        owner_scope: str | None,
        trace_context: dict[str, str] | None = None,
    ) -> tuple[dict[str, Any], ...]:
        """Every document a new order writes, one batch, the order document (id = orderId)
        first; it keeps `owner_scope` (None: no API caller owns the order)."""
        ...

    def rejection_document(self, rejection: OrderRejection) -> dict[str, Any]:
        """The rejection note filed in the order's partition (one per distinct payload)."""
        ...


class ShippingLayout(Protocol):
    def shipment_id(self, order_id: str) -> str:
        """The id of the order's one shipment."""
        ...

    def shipping_documents(
        self, event: OrderAccepted, *, message_id: str, processed_at: datetime
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Shipping's inbox record for the message and the shipment: one batch."""
        ...


class BillingLayout(Protocol):
    def charge_record_id(self, event_id: str) -> str:
        """The id of billing's charge record for an `OrderAccepted`."""
        ...

    def refund_record_id(self, order_id: str) -> str:
        """The id of the order's one refund record."""
        ...

    def charge_of(self, document: Mapping[str, Any]) -> BillingRecord:
        """A stored charge record (the cancel's probe reads it)."""
        ...


class StatusLayout(StatusReader, Protocol):
    def status_document_id(self, order_id: str) -> str:
        """The id of the order's one status document."""
        ...

    def status_document(
        self, update: OrderStatusChanged, history: tuple[HistoryEntry, ...]
    ) -> dict[str, Any]:
        """The status document once `update` applied, keeping `history`."""
        ...

    def with_history(
        self, document: Mapping[str, Any], history: tuple[HistoryEntry, ...]
    ) -> dict[str, Any]:
        """The stored status document with `history` in place of its own, nothing else
        changed (a change that arrived late, recorded where it belongs)."""
        ...


class DocumentLayout(
    OrderLayout,
    SagaLayout,
    AuditLayout,
    ShippingLayout,
    BillingLayout,
    StatusLayout,
    Protocol,
):
    """Every layout at once: what the composition root wires into the consumers."""


class MessageHandler(Protocol):
    """Decides (and performs the store effect) for one message; `OrderConsumer` is the one."""

    async def handle(self, message: ReceivedOrderMessage) -> Decision: ...


# What a registry entry builds: a consumer's core, which the hosts make a door
# (`adapters/servicebus_consumers.door_consumer`), or a consumer that is a door of its own, made
# with the core's `@exactly_once` as docs/new-consumer.md shows, which they drive as it is. A
# name for type checkers only: the command line loads no Azure SDK (tests/unit/test_import_cost).
RegisteredConsumer: TypeAlias = "MessageHandler | ExactlyOnceConsumer[Any]"


class IdempotencyStore(RecordStore, Protocol):
    """The intake's records: its keys' records through the `exactly_once` core's record-store
    port (the create is the lock, every later write If-Match, leases by the database's clock),
    the orderId claims (the core's create-or-compare), and the lookups GET needs.

    The core's `TransientStoreError` / `StoreError` (or the app's) mean a retry may succeed, or
    not.
    """

    async def claim_order_id(self, claim: OrderIdClaim) -> OrderIdClaim | None:
        """Create the claim (None), or return the claim stored first when it holds the same
        request hash; the core's `PayloadMismatchError` when it holds another."""
        ...

    async def read_order_id_claim(self, order_id: str) -> OrderIdClaim | None:
        """The orderId's claim (who placed it, with which payload), if the API accepted it."""
        ...

    async def find_order(self, scope: str, order_id: str) -> KeyRecord | None:
        """A completed record of this scope that accepted `order_id`, if any."""
        ...


class OrderPublisher(Protocol):
    async def publish(self, order: OrderPlaced, owner_scope: str) -> None:
        """Send the order to the queue with MessageId = orderId, its owner's scope in the
        `orderOwner` application property (`domain/ownership.py`).

        Raises `TransientPublishError` when a retry may succeed, `PublishError` otherwise.
        """
        ...


class OrderReader(Protocol):
    async def read_order_documents(self, order_id: str) -> list[dict[str, Any]]:
        """Every document the consumer stored for the order; empty when it is not stored."""
        ...


# --- Fan-out: the outbox dispatcher and the subscribers ---------------------------------------


class OutboxFeed(ChangeFeed, Protocol):
    """The orders container's change feed (latest version, the core's `ChangeFeed`) and the
    outbox's one write."""

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        """Set `dispatched` if the document is unchanged since read (If-Match its ETag);
        a failed condition means another writer got there first and is not an error."""
        ...


class OutboxParking(Protocol):
    """Where the dispatcher sets aside an outbox document that can never be published (the
    Cosmos adapter: on the document itself)."""

    async def park(self, document: dict[str, Any], parked: Mapping[str, Any]) -> None:
        """Store `parked` (reason, description, attempts, parkedAt) on the outbox document,
        If-Match its ETag like the mark; it is no longer pending until re-driven."""
        ...


class EventPublisher(Protocol):
    async def publish_event(
        self, event: OrderEvent, trace_context: dict[str, str], *, message_id: str
    ) -> None:
        """Send the event to the topic with `message_id` (the outbox entry's), CorrelationId =
        orderId, in the trace `trace_context` (W3C properties stored with the outbox entry) names.

        Raises `TransientPublishError` when a retry may succeed, `PublishError` otherwise.
        """
        ...


class StatusPublisher(Protocol):
    async def publish_status(self, change: OrderStatusChanged) -> None:
        """Send the update to the status queue, MessageId = orderId:status:version and a
        fresh nonce (`domain/status.new_status_message_id`; SessionId = orderId on a session
        queue). Raises `TransientPublishError` /
        `PublishError` like the order publisher."""
        ...


class DeadLetterQueue(Protocol):
    """The dead-letter sub-queue of one queue or subscription (what `orders dlq` uses)."""

    async def browse(self, limit: int, from_sequence: int = 1) -> list[DeadLetter]:
        """Peek, oldest first: nothing is locked or removed."""
        ...

    async def resubmit(
        self,
        selection: Selection,
        refusal: Callable[[DeadLetter], str | None],
        *,
        by: str,
        now: datetime,
    ) -> DeadLetterOutcome:
        """Send the selected back with their MessageId, unless `refusal` gives a reason;
        `ResubmitUnsupportedError` for a subscription."""
        ...

    async def purge(self, selection: Selection) -> DeadLetterOutcome: ...

    async def plan(
        self, selection: Selection, refusal: Callable[[DeadLetter], str | None]
    ) -> DeadLetterPlan:
        """What `resubmit` or `purge` with `selection` would do now, above all to the dead
        letters it does not act on (a peek: nothing is locked)."""
        ...


@dataclass(frozen=True)
class EntityCounts:
    """Messages in a queue or subscription, each count at most `limit` (then `capped`)."""

    source: Source
    active: int
    scheduled: int
    dead_lettered: int
    limit: int

    def capped(self, count: int) -> bool:
        return count >= self.limit


class EntityCounter(Protocol):
    async def count(self, source: Source, limit: int) -> EntityCounts:
        """Active, scheduled and dead-lettered messages, counting each up to `limit`."""
        ...


class DecisionFeed(Protocol):
    async def counters(self) -> DecisionCounters:
        """The workers' decisions so far (reads what was added since the last call)."""
        ...
