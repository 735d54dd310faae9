"""How the app's records are laid out as Cosmos DB documents: ids, field names, types.

The domain holds plain data (`BillingRecord`, `OrderRejection`, `OrderAccepted`, ...); this
module is the one place that turns it into the documents the containers hold and back. The
shapes are the ones the app has always written: the console, `orders verify`, the dead-letter
tools and data already stored read them, so a field renamed here is a migration.

Every document carries its partition key `orderId`, so an order's documents (and a consumer's
inbox record with its effect) can go in one transactional batch. Record ids in the inbox
container are scoped by consumer (`shipping:<eventId>`, `billing:<eventId>`): one
consumer's record never blocks another's. Amounts are decimal strings: JSON numbers are doubles
and money must stay exact.

`CosmosLayout` is this module as the service layer's `DocumentLayout` port: pure mapping, no
I/O, so unit tests over fakes use it as it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from orders.domain.documents import decimal_text
from orders.domain.events import (
    ORDER_CANCELLED,
    OrderAccepted,
    OrderEvent,
    message_id_names_event,
    new_event_message_id,
    stored_event,
)
from orders.domain.inbox import (
    BILLING,
    REFUND,
    SHIPPING,
    BillingRecord,
    BillingStatus,
    RefundRecord,
)
from orders.domain.model import OrderPlaced
from orders.domain.ownership import RecordedOwner, StoredOwner, UnrecordedOwner
from orders.domain.rejections import FiledRejection, OrderRejection
from orders.domain.saga import Fulfilment, SagaOrder
from orders.domain.status import (
    LATE,
    HistoryEntry,
    OrderStatus,
    OrderStatusChanged,
    StoredStatus,
    history_entry,
)
from orders.service.ports import (
    AuditedLine,
    AuditedOrder,
    AuditedRejection,
    InboxPartition,
    InboxRecord,
    OrderPartition,
    PendingEvent,
    StoredLine,
    StoredOrderView,
    StoredRun,
    StoredShipment,
)

# --- Types: each document's `type`, what readers (the console too) tell documents apart by --

ORDER_DOCUMENT_TYPE = "order"
LINE_DOCUMENT_TYPE = "orderLine"
OUTBOX_DOCUMENT_TYPE = "outbox"
STATUS_DOCUMENT_TYPE = "orderStatus"
REJECTION_DOCUMENT_TYPE = "orderRejection"
INBOX_DOCUMENT_TYPE = "inbox"
SHIPMENT_DOCUMENT_TYPE = "shipment"
BILLING_DOCUMENT_TYPE = "billing"
REFUND_DOCUMENT_TYPE = "refund"
# The order document's own `status`: what it was stored with (the status document moves on).
ORDER_STATUS_PLACED = "placed"
# `payment.state` on an order document once billing recorded its charge there.
CHARGED = "charged"

# --- Ids: the documents' storage keys ----------------------------------------------------------


def inbox_record_id(consumer: str, message_id: str) -> str:
    return f"{consumer}:{message_id}"


def charge_record_id(event_id: str) -> str:
    """Billing's record of the charge an `OrderAccepted` asks for: `billing:<eventId>`."""
    return inbox_record_id(BILLING, event_id)


def refund_record_id(order_id: str) -> str:
    """One refund record per order (not per message: two paths may ask for the refund)."""
    return f"{REFUND}:{order_id}"


def shipment_document_id(order_id: str) -> str:
    return f"{order_id}:shipment"


def line_document_id(order_id: str, line_number: int) -> str:
    return f"{order_id}:line:{line_number:03d}"


def status_document_id(order_id: str) -> str:
    return f"{order_id}:status"


def rejection_document_id(rejection: OrderRejection) -> str:
    """One rejection document per distinct payload: its request hash, else its body's digest."""
    return f"{rejection.order_id}:rejection:{rejection.request_hash or rejection.body_digest}"


# --- The orders container: an order, its outbox events, its status, its rejections ----------


def order_write(
    order: OrderPlaced,
    *,
    request_hash: str,
    message_id: str,
    processed_at: datetime,
    owner_scope: str | None,
    trace_context: dict[str, str] | None = None,
) -> tuple[dict[str, Any], ...]:
    """Everything a new order writes in one batch: the order document (id = orderId, first),
    its `OrderAccepted` outbox entry (stored order <=> event to publish) and one per line.

    `ownerScope` is written even when None (no API caller owns the order), so that an order
    stored before owners were recorded (no such field) stays told apart from it."""
    total_amount = decimal_text(order.total_amount)
    order_document: dict[str, Any] = {
        "id": order.order_id,
        "orderId": order.order_id,
        "type": ORDER_DOCUMENT_TYPE,
        "customerId": order.customer_id,
        "currency": str(order.currency),
        "status": ORDER_STATUS_PLACED,
        "lineCount": len(order.lines),
        "totalQuantity": sum(line.quantity for line in order.lines),
        "totalAmount": total_amount,
        "requestHash": request_hash,
        "messageId": message_id,
        "processedAt": processed_at.isoformat(),
        "ownerScope": owner_scope,
    }
    line_documents = [
        {
            "id": line_document_id(order.order_id, number),
            "orderId": order.order_id,
            "type": LINE_DOCUMENT_TYPE,
            "lineNumber": number,
            "sku": line.sku,
            "quantity": line.quantity,
            "unitPrice": decimal_text(line.unit_price),
            "lineTotal": decimal_text(line.line_total),
        }
        for number, line in enumerate(order.lines, start=1)
    ]
    accepted = OrderAccepted.of(order, total_amount=total_amount, accepted_at=processed_at)
    return (order_document, outbox_document(accepted, trace_context), *line_documents)


def saga_order(document: Mapping[str, Any] | None) -> SagaOrder | None:
    """What the saga decides on, read off the order document; None for no document or another
    type (`orderId` is also the id of nothing else, but a read by id is checked all the same)."""
    if document is None or document.get("type") != ORDER_DOCUMENT_TYPE:
        return None
    found = document.get("fulfilment") or {}
    return SagaOrder(
        order_id=document["orderId"],
        customer_id=document["customerId"],
        currency=document["currency"],
        total_amount=Decimal(document["totalAmount"]),
        line_count=int(document["lineCount"]),
        fulfilment=Fulfilment(found.get("state", Fulfilment.OPEN.value)),
        shipment_event_id=found.get("eventId"),
        cancelled_at=found.get("cancelledAt"),
        owner=stored_owner(document),
        charged=(document.get("payment") or {}).get("state") == CHARGED,
        payment_failed_at=(
            found.get("at") if found.get("state") == Fulfilment.PAYMENT_FAILED.value else None
        ),
    )


def stored_owner(document: Mapping[str, Any]) -> StoredOwner:
    """Who owns the stored order, as its document says (`domain/ownership.py`)."""
    if "ownerScope" not in document:
        return UnrecordedOwner(document["requestHash"])
    scope = document["ownerScope"]
    return RecordedOwner(scope if isinstance(scope, str) else None)


def shipment_reserved(document: Mapping[str, Any], event_id: str, at: datetime) -> dict[str, Any]:
    """The order document with the shipment reserved by `event_id`'s delivery: every field it
    had, `fulfilment` replaced."""
    fulfilment = {"state": Fulfilment.SHIPPING.value, "eventId": event_id, "at": at.isoformat()}
    return {**document, "fulfilment": fulfilment}


def order_cancelled(
    document: Mapping[str, Any], at: datetime, reason: str | None
) -> dict[str, Any]:
    """The order document, cancelled: every field it had, `fulfilment` replaced."""
    fulfilment: dict[str, Any] = {
        "state": Fulfilment.CANCELLED.value,
        "cancelledAt": at.isoformat(),
    }
    if reason:
        fulfilment["reason"] = reason
    return {**document, "fulfilment": fulfilment}


def order_charged(document: Mapping[str, Any], payment_id: str, at: datetime) -> dict[str, Any]:
    """The order document with billing's charge recorded: every field it had, `payment` set
    (beside `fulfilment`, which a shipment or a cancel replaces and this must survive). An
    order whose payment had failed is open again (no `fulfilment`): it is charged now."""
    reopened = (document.get("fulfilment") or {}).get("state") == Fulfilment.PAYMENT_FAILED.value
    kept = {name: value for name, value in document.items() if not reopened or name != "fulfilment"}
    return {**kept, "payment": {"state": CHARGED, "paymentId": payment_id, "at": at.isoformat()}}


def order_payment_failed(
    document: Mapping[str, Any], at: datetime, reason: str | None
) -> dict[str, Any]:
    """The order document, ended by a refused charge: every field it had, `fulfilment`
    replaced."""
    fulfilment: dict[str, Any] = {"state": Fulfilment.PAYMENT_FAILED.value, "at": at.isoformat()}
    if reason:
        fulfilment["reason"] = reason
    return {**document, "fulfilment": fulfilment}


def order_partition(
    documents: Iterable[Mapping[str, Any]], *, skip_unreadable_lines: bool = False
) -> OrderPartition:
    """An order's partition read: its order document with its lines, its status document and
    its rejections (every other document, the outbox's, is not shown). A line missing a field
    fails the read, unless `skip_unreadable_lines` (an audit's read, which reports it)."""
    order: Mapping[str, Any] | None = None
    lines: list[StoredLine] = []
    status: Mapping[str, Any] | None = None
    rejections: list[FiledRejection] = []
    for document in documents:
        kind = document.get("type")
        if kind == ORDER_DOCUMENT_TYPE:
            order = document
        elif kind == LINE_DOCUMENT_TYPE:
            try:
                lines.append(_stored_line(document))
            except (KeyError, TypeError, ValueError):
                if not skip_unreadable_lines:
                    raise
        elif kind == STATUS_DOCUMENT_TYPE:
            status = document
        elif (rejection := filed_rejection(document)) is not None:
            rejections.append(rejection)
    in_order = tuple(sorted(lines, key=lambda line: line.line_number))
    return OrderPartition(
        None if order is None else _order_view(order, in_order),
        stored_status(status),
        tuple(rejections),
    )


def order_partitions(documents: Iterable[Mapping[str, Any]]) -> dict[str, OrderPartition]:
    """Many orders' documents (an audit's read of a run) read, partition by partition. Lines
    it cannot read are left out: the integrity audit (`stored_run`, read with `.get`) reports
    them, and the audits that decide on these partitions look at orders, not lines."""
    by_order: dict[str, list[Mapping[str, Any]]] = {}
    for document in documents:
        by_order.setdefault(document["orderId"], []).append(document)
    return {
        order_id: order_partition(found, skip_unreadable_lines=True)
        for order_id, found in by_order.items()
    }


def _order_view(document: Mapping[str, Any], lines: tuple[StoredLine, ...]) -> StoredOrderView:
    read = saga_order(document)
    assert read is not None  # an order document, by its type
    return StoredOrderView(
        order=read,
        request_hash=document["requestHash"],
        total_quantity=document["totalQuantity"],
        total_amount=document["totalAmount"],
        processed_at=document["processedAt"],
        lines=lines,
    )


def _stored_line(document: Mapping[str, Any]) -> StoredLine:
    return StoredLine(
        line_number=int(document["lineNumber"]),
        sku=document["sku"],
        quantity=document["quantity"],
        unit_price=document["unitPrice"],
        line_total=document["lineTotal"],
    )


def stored_run(documents: Iterable[Mapping[str, Any]]) -> StoredRun:
    """A run's orders container as the integrity audit reads it: every order document and line
    kept apart (none merged), the outbox entries counted, fields read with `.get` (a missing
    one is the audit's finding, not a crash), documents of no known type named by their id."""
    orders: dict[str, list[AuditedOrder]] = {}
    lines: dict[str, list[tuple[int, AuditedLine]]] = {}
    outbox_events: Counter[str] = Counter()
    cancel_events: Counter[str] = Counter()
    rejections: list[AuditedRejection] = []
    unexpected: list[str | None] = []
    for document in documents:
        kind = document.get("type")
        if kind == ORDER_DOCUMENT_TYPE:
            fulfilment = document.get("fulfilment") or {}
            cancelled = fulfilment.get("state") == Fulfilment.CANCELLED.value
            orders.setdefault(document["orderId"], []).append(
                AuditedOrder(document.get("requestHash"), cancelled)
            )
        elif kind == LINE_DOCUMENT_TYPE:
            line = AuditedLine(document.get("sku"), document.get("quantity"))
            number = int(document.get("lineNumber", 0))
            lines.setdefault(document["orderId"], []).append((number, line))
        elif kind == REJECTION_DOCUMENT_TYPE:
            rejections.append(
                AuditedRejection(
                    document.get("id"), document.get("messageId"), document.get("reason")
                )
            )
        elif kind == OUTBOX_DOCUMENT_TYPE and document.get("eventType") == ORDER_CANCELLED:
            cancel_events[document["orderId"]] += 1
        elif kind == OUTBOX_DOCUMENT_TYPE:
            outbox_events[document["orderId"]] += 1
        elif kind != STATUS_DOCUMENT_TYPE:  # a status document is the status audit's
            unexpected.append(document.get("id"))
    return StoredRun(
        orders={order_id: tuple(found) for order_id, found in orders.items()},
        lines={
            order_id: tuple(line for _, line in sorted(found, key=lambda numbered: numbered[0]))
            for order_id, found in lines.items()
        },
        outbox_events=dict(outbox_events),
        cancel_events=dict(cancel_events),
        rejections=tuple(rejections),
        unexpected=tuple(unexpected),
    )


def outbox_document(
    event: OrderEvent, trace_context: dict[str, str] | None = None
) -> dict[str, Any]:
    """The outbox entry: the event as it will be published, whether it has been, and the trace
    of the consumer that stored it (so the publish continues that trace). Its id is the event
    id; `messageId`, drawn here and so written in the batch that decides the event, is the
    MessageId every dispatch of it publishes with (`domain/events.py` says why it is random)."""
    return {
        "id": event.event_id,
        "orderId": event.order_id,
        "type": OUTBOX_DOCUMENT_TYPE,
        "eventType": event.event_type,
        "event": event.model_dump(mode="json"),
        "messageId": new_event_message_id(event.event_id),
        "traceContext": dict(trace_context or {}),
        "dispatched": False,
    }


def pending_event(document: Mapping[str, Any]) -> PendingEvent | None:
    """The event an outbox entry holds while `dispatched` is false, the MessageId to publish it
    with and the trace stored with it (string values only: the W3C properties); None for every
    other document.

    An entry written before `messageId` was stored is published under its event id, the
    MessageId it had then. Not a fresh nonce: nothing would keep one drawn here the same on the
    next dispatch of that entry (a retry after a crash between publish and mark), and it must
    be the same message to duplicate detection as any publish of it before the upgrade. Only
    the entries still pending at the upgrade are published this way."""
    if document.get("type") != OUTBOX_DOCUMENT_TYPE or document.get("dispatched") is not False:
        return None
    if document.get("parked"):
        return None  # set aside by the dispatcher until an operator re-drives it
    stored = document.get("traceContext")
    trace_context = (
        {str(key): value for key, value in stored.items() if isinstance(value, str)}
        if isinstance(stored, dict)
        else {}
    )
    event = stored_event(document["event"])
    message_id = document.get("messageId")
    if not (isinstance(message_id, str) and message_id_names_event(message_id, event.event_id)):
        message_id = event.event_id
    return PendingEvent(event, message_id, trace_context)


def rejection_document(rejection: OrderRejection) -> dict[str, Any]:
    return {
        "id": rejection_document_id(rejection),
        "orderId": rejection.order_id,
        "type": REJECTION_DOCUMENT_TYPE,
        "reason": rejection.reason,
        "description": rejection.description,
        "messageId": rejection.message_id,
        "requestHash": rejection.request_hash,
        "bodyDigest": rejection.body_digest,
        "rejectedAt": rejection.rejected_at.isoformat(),
    }


def filed_rejection(document: Mapping[str, Any]) -> FiledRejection | None:
    """What GET tells of a rejection document; None for every other document."""
    if document.get("type") != REJECTION_DOCUMENT_TYPE:
        return None
    return FiledRejection(
        order_id=document["orderId"],
        reason=document["reason"],
        description=document["description"],
        rejected_at=document["rejectedAt"],
        request_hash=document.get("requestHash"),
    )


def stored_status(document: Mapping[str, Any] | None) -> StoredStatus:
    """The status a status document holds; no document: the order as placed.

    A document written before every change was kept may have no `history`: its own status is
    then its one known change. Entries that are not a status with a version are left out."""
    if document is None:
        return StoredStatus.placed()
    status, version = OrderStatus(document["status"]), int(document["version"])
    written = document.get("history")
    if not isinstance(written, list):
        written = [{"status": status.value, "version": version, "at": document.get("changedAt")}]
    history = tuple(
        history_entry(
            entry["status"],
            entry["version"],
            str(entry.get("at") or ""),
            late=bool(entry.get(LATE)),
        )
        for entry in written
        if isinstance(entry, Mapping)
        and isinstance(entry.get("status"), str)
        and type(entry.get("version")) is int
    )
    return StoredStatus(status, version, history)


def with_history(document: Mapping[str, Any], history: tuple[HistoryEntry, ...]) -> dict[str, Any]:
    """The status document unchanged but for its history (a late change recorded in place)."""
    return {**document, "history": list(history)}


def status_document(
    update: OrderStatusChanged, history: tuple[HistoryEntry, ...]
) -> dict[str, Any]:
    """The order's status document once `update` applied, with the history it keeps."""
    document: dict[str, Any] = {
        "id": status_document_id(update.order_id),
        "orderId": update.order_id,
        "type": STATUS_DOCUMENT_TYPE,
        "status": update.status.value,
        "version": update.version,
        "changedAt": update.changed_at,
        "history": list(history),
    }
    if update.reason:
        document["reason"] = update.reason
    return document


# --- The inbox container: the fan-out consumers' records and effects --------------------------


def shipping_documents(
    event: OrderAccepted, *, message_id: str, processed_at: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inbox record and the shipment: written together or not at all."""
    at = processed_at.isoformat()
    inbox = {
        "id": inbox_record_id(SHIPPING, message_id),
        "orderId": event.order_id,
        "type": INBOX_DOCUMENT_TYPE,
        "consumer": SHIPPING,
        "messageId": message_id,
        "processedAt": at,
    }
    shipment = {
        "id": shipment_document_id(event.order_id),
        "orderId": event.order_id,
        "type": SHIPMENT_DOCUMENT_TYPE,
        "customerId": event.customer_id,
        "lineCount": event.line_count,
        "status": "requested",
        "requestedAt": at,
    }
    return inbox, shipment


def charge_document(charge: BillingRecord) -> dict[str, Any]:
    return {
        "id": charge.record_id,
        "orderId": charge.order_id,
        "type": BILLING_DOCUMENT_TYPE,
        "consumer": BILLING,
        "messageId": charge.message_id,
        "status": charge.status.value,
        "owner": charge.owner,
        "leaseSeconds": charge.lease_seconds,
        "amount": charge.amount,
        "currency": charge.currency,
        "paymentKey": charge.payment_key,
        "paymentId": charge.payment_id,
        "attempts": charge.attempts,
    }


def charge_of(document: Mapping[str, Any]) -> BillingRecord:
    return BillingRecord(
        record_id=document["id"],
        order_id=document["orderId"],
        message_id=document["messageId"],
        status=BillingStatus(document["status"]),
        owner=document["owner"],
        lease_seconds=float(document["leaseSeconds"]),
        amount=document["amount"],
        currency=document["currency"],
        payment_key=document["paymentKey"],
        payment_id=document.get("paymentId"),
        attempts=int(document.get("attempts", 1)),
    )


def refund_document(refund: RefundRecord) -> dict[str, Any]:
    return {
        "id": refund.record_id,
        "orderId": refund.order_id,
        "type": REFUND_DOCUMENT_TYPE,
        "consumer": BILLING,
        "status": refund.status.value,
        "owner": refund.owner,
        "leaseSeconds": refund.lease_seconds,
        "paymentId": refund.payment_id,
        "amount": refund.amount,
        "currency": refund.currency,
        "refundKey": refund.refund_key,
        "refundId": refund.refund_id,
        "attempts": refund.attempts,
    }


def refund_of(document: Mapping[str, Any]) -> RefundRecord:
    return RefundRecord(
        record_id=document["id"],
        order_id=document["orderId"],
        status=BillingStatus(document["status"]),
        owner=document["owner"],
        lease_seconds=float(document["leaseSeconds"]),
        payment_id=document["paymentId"],
        amount=document["amount"],
        currency=document["currency"],
        refund_key=document["refundKey"],
        refund_id=document.get("refundId"),
        attempts=int(document.get("attempts", 1)),
    )


def inbox_partitions(documents: Iterable[Mapping[str, Any]]) -> dict[str, InboxPartition]:
    """The inbox container's documents of many orders (an audit's read of a run), read by
    orderId: shipments, charge and refund records, inbox records; other types are not shown."""
    shipments: dict[str, list[StoredShipment]] = {}
    charges: dict[str, list[BillingRecord]] = {}
    refunds: dict[str, list[RefundRecord]] = {}
    records: dict[str, list[InboxRecord]] = {}
    for document in documents:
        kind, order_id = document.get("type"), document["orderId"]
        if kind == SHIPMENT_DOCUMENT_TYPE:
            shipments.setdefault(order_id, []).append(_stored_shipment(document))
        elif kind == BILLING_DOCUMENT_TYPE:
            charges.setdefault(order_id, []).append(charge_of(document))
        elif kind == REFUND_DOCUMENT_TYPE:
            refunds.setdefault(order_id, []).append(refund_of(document))
        elif kind == INBOX_DOCUMENT_TYPE:
            records.setdefault(order_id, []).append(_inbox_record(document))
    return {
        order_id: InboxPartition(
            shipments=tuple(shipments.get(order_id, ())),
            charges=tuple(charges.get(order_id, ())),
            refunds=tuple(refunds.get(order_id, ())),
            records=tuple(records.get(order_id, ())),
        )
        for order_id in {**shipments, **charges, **refunds, **records}
    }


def _stored_shipment(document: Mapping[str, Any]) -> StoredShipment:
    return StoredShipment(
        order_id=document["orderId"],
        customer_id=document["customerId"],
        line_count=int(document["lineCount"]),
        status=document["status"],
        requested_at=document["requestedAt"],
    )


def _inbox_record(document: Mapping[str, Any]) -> InboxRecord:
    return InboxRecord(
        consumer=document["consumer"],
        message_id=document["messageId"],
        processed_at=document["processedAt"],
    )


# --- The leases container: the outbox dispatcher's feed-range leases ---------------------------

# The names the dispatcher's leases have always been stored under (`exactly_once`'s
# `CosmosLeaseStore` reads and writes them as they are: deployed leases keep their checkpoints).
LEASE_DOCUMENT_TYPE = "dispatcherLease"
LEASE_ID_PREFIX = "dispatcher-"


class CosmosLayout:
    """The service layer's `DocumentLayout` port (`service/ports.py`): this module's mapping,
    handed to the consumers by the composition root.

    `record_ttl_seconds`, when given, is the `ttl` of shipping's inbox records it lays out,
    never of a business document (the shipment): the records expire once no redelivery of
    their message can come. (Billing's records carry theirs from the core's `Retention`.)"""

    def __init__(self, record_ttl_seconds: int | None = None) -> None:
        self.record_ttl_seconds = record_ttl_seconds

    def _expiring(self, record: dict[str, Any]) -> dict[str, Any]:
        if self.record_ttl_seconds is None:
            return record
        return {**record, "ttl": self.record_ttl_seconds}

    def shipping_documents(
        self, event: OrderAccepted, *, message_id: str, processed_at: datetime
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        record, shipment = shipping_documents(
            event, message_id=message_id, processed_at=processed_at
        )
        return self._expiring(record), shipment

    order_write = staticmethod(order_write)
    saga_order = staticmethod(saga_order)
    shipment_reserved = staticmethod(shipment_reserved)
    order_cancelled = staticmethod(order_cancelled)
    order_charged = staticmethod(order_charged)
    order_payment_failed = staticmethod(order_payment_failed)
    pending_event = staticmethod(pending_event)
    outbox_document = staticmethod(outbox_document)
    status_document_id = staticmethod(status_document_id)
    status_document = staticmethod(status_document)
    stored_status = staticmethod(stored_status)
    with_history = staticmethod(with_history)
    filed_rejection = staticmethod(filed_rejection)
    rejection_document = staticmethod(rejection_document)
    order_partition = staticmethod(order_partition)
    order_partitions = staticmethod(order_partitions)
    inbox_partitions = staticmethod(inbox_partitions)
    stored_run = staticmethod(stored_run)
    shipment_id = staticmethod(shipment_document_id)
    charge_record_id = staticmethod(charge_record_id)
    refund_record_id = staticmethod(refund_record_id)
    charge_of = staticmethod(charge_of)
    refund_of = staticmethod(refund_of)
