"""The documents the app stores, pinned field by field: the console, `orders verify`, the
dead-letter tools and data already stored read them, so the layout (`adapters/cosmos_layout.py`)
may not drift. The expected documents are what the domain wrote before the layout moved into
the adapter."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from fakes import placed_order

from orders.adapters.cosmos_layout import (
    CosmosLayout,
    charge_document,
    charge_of,
    filed_rejection,
    inbox_partitions,
    order_cancelled,
    order_partition,
    order_partitions,
    order_write,
    outbox_document,
    pending_event,
    refund_document,
    refund_of,
    rejection_document,
    saga_order,
    shipment_reserved,
    shipping_documents,
    status_document,
    stored_owner,
    stored_run,
    stored_status,
)
from orders.domain.events import OrderAccepted, OrderCancelled
from orders.domain.inbox import BillingRecord, BillingStatus, RefundRecord
from orders.domain.ownership import NO_OWNER, RecordedOwner, UnrecordedOwner
from orders.domain.rejections import FiledRejection, OrderRejection
from orders.domain.saga import Fulfilment, SagaOrder
from orders.domain.status import (
    OrderStatus,
    OrderStatusChanged,
    StoredStatus,
    history_after,
    history_with_late,
)
from orders.service.order_lookup import order_history
from orders.service.ports import (
    AuditedLine,
    AuditedOrder,
    AuditedRejection,
    DocumentLayout,
    InboxPartition,
    InboxRecord,
    OrderPartition,
    StoredLine,
    StoredOrderView,
    StoredRun,
    StoredShipment,
)

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
STAMP = "2026-01-02T03:04:05+00:00"
ACCEPTED_ID = "o-1:outbox:OrderAccepted"


def accepted() -> OrderAccepted:
    return OrderAccepted.of(placed_order(), total_amount="12.5", accepted_at=AT)


def test_an_order_is_its_document_its_outbox_event_and_its_lines_in_one_write() -> None:
    write = order_write(
        placed_order(),
        request_hash="h",
        message_id="o-1",
        processed_at=AT,
        owner_scope="principal:alice",
        trace_context={"traceparent": "x"},
    )

    assert write[0]["requestHash"] == "h"
    assert list(write) == [
        {
            "id": "o-1",
            "orderId": "o-1",
            "type": "order",
            "customerId": "c-1",
            "currency": "EUR",
            "status": "placed",
            "lineCount": 1,
            "totalQuantity": 1,
            "totalAmount": "12.5",
            "requestHash": "h",
            "messageId": "o-1",
            "processedAt": STAMP,
            "ownerScope": "principal:alice",
        },
        {
            "id": ACCEPTED_ID,
            "orderId": "o-1",
            "type": "outbox",
            "eventType": "OrderAccepted",
            "event": {
                "eventType": "OrderAccepted",
                "eventId": ACCEPTED_ID,
                "orderId": "o-1",
                "customerId": "c-1",
                "currency": "EUR",
                "totalAmount": "12.5",
                "lineCount": 1,
                "acceptedAt": STAMP,
            },
            "messageId": drawn_message_id(write[1], ACCEPTED_ID),
            "traceContext": {"traceparent": "x"},
            "dispatched": False,
        },
        {
            "id": "o-1:line:001",
            "orderId": "o-1",
            "type": "orderLine",
            "lineNumber": 1,
            "sku": "s",
            "quantity": 1,
            "unitPrice": "12.5",
            "lineTotal": "12.5",
        },
    ]


def stored_order() -> dict[str, Any]:
    """The order document as stored (pinned above), with a field the layout does not know."""
    written = order_write(
        placed_order(), request_hash="h", message_id="o-1", processed_at=AT, owner_scope=None
    )
    return {**written[0], "addedLater": "kept"}


def test_the_saga_reads_its_order_off_the_order_document_only() -> None:
    open_order = SagaOrder("o-1", "c-1", "EUR", Decimal("12.5"), 1, Fulfilment.OPEN, None, None)

    assert saga_order(stored_order()) == open_order
    assert saga_order(None) is None
    assert saga_order({**stored_order(), "type": "orderStatus"}) is None
    assert saga_order(shipment_reserved(stored_order(), "e-1", AT)) == SagaOrder(
        "o-1", "c-1", "EUR", Decimal("12.5"), 1, Fulfilment.SHIPPING, "e-1", None
    )
    assert saga_order(order_cancelled(stored_order(), AT, None)) == SagaOrder(
        "o-1", "c-1", "EUR", Decimal("12.5"), 1, Fulfilment.CANCELLED, None, STAMP
    )


def test_the_owner_is_read_off_the_order_document_and_kept_by_every_rewrite() -> None:
    owned = {**stored_order(), "ownerScope": "principal:alice"}
    before_owners = {key: value for key, value in stored_order().items() if key != "ownerScope"}

    assert stored_owner(owned) == RecordedOwner("principal:alice")
    # Written as null when the message named no owner: nobody's, not an order from before.
    assert stored_order()["ownerScope"] is None
    assert stored_owner(stored_order()) == NO_OWNER
    assert stored_owner(before_owners) == UnrecordedOwner("h")  # its request hash
    for rewritten in (shipment_reserved(owned, "e-1", AT), order_cancelled(owned, AT, "r")):
        read = saga_order(rewritten)
        assert read is not None and read.owner == RecordedOwner("principal:alice")


@pytest.mark.parametrize(
    ("rewritten", "fulfilment"),
    [
        (
            shipment_reserved(stored_order(), "e-1", AT),
            {"state": "shipping", "eventId": "e-1", "at": STAMP},
        ),
        (
            order_cancelled(stored_order(), AT, "changed my mind"),
            {"state": "cancelled", "cancelledAt": STAMP, "reason": "changed my mind"},
        ),
        (order_cancelled(stored_order(), AT, None), {"state": "cancelled", "cancelledAt": STAMP}),
    ],
)
def test_a_fulfilment_rewrites_the_order_document_keeping_every_field_it_had(
    rewritten: dict[str, Any], fulfilment: dict[str, Any]
) -> None:
    # json.dumps keeps the keys' order: the stored bytes, not only the same dict.
    assert json.dumps(rewritten) == json.dumps({**stored_order(), "fulfilment": fulfilment})


def test_a_second_fulfilment_replaces_the_first_in_its_place() -> None:
    reserved = shipment_reserved(stored_order(), "e-1", AT)
    again = shipment_reserved(reserved, "e-2", AT)

    assert list(again) == [*stored_order(), "fulfilment"]
    assert again["fulfilment"] == {"state": "shipping", "eventId": "e-2", "at": STAMP}


def drawn_message_id(entry: dict[str, Any], event_id: str) -> str:
    """The MessageId an outbox entry was written with: random, so not pinned, but always its
    event id, ':' and 32 lowercase hex digits (128 bits)."""
    message_id = entry["messageId"]
    assert re.fullmatch(re.escape(event_id) + ":[0-9a-f]{32}", message_id), message_id
    return str(message_id)


def test_a_cancels_outbox_entry_is_stored_under_its_event_id() -> None:
    event = OrderCancelled.of("o-1", cancelled_at=AT, reason="r")
    entry = outbox_document(event)

    assert entry == {
        "id": "o-1:outbox:OrderCancelled",
        "orderId": "o-1",
        "type": "outbox",
        "eventType": "OrderCancelled",
        "event": {
            "eventType": "OrderCancelled",
            "eventId": "o-1:outbox:OrderCancelled",
            "orderId": "o-1",
            "cancelledAt": STAMP,
            "reason": "r",
        },
        "messageId": drawn_message_id(entry, "o-1:outbox:OrderCancelled"),
        "traceContext": {},
        "dispatched": False,
    }


def test_every_outbox_entry_draws_a_message_id_of_its_own_that_no_sender_can_guess() -> None:
    """The MessageId is drawn when the entry is written (issue 37): two entries of one event
    (a cancel written twice, say) never share one, and none is the bare event id."""
    event = OrderCancelled.of("o-1", cancelled_at=AT, reason=None)
    drawn = {outbox_document(event)["messageId"] for _ in range(50)}

    assert len(drawn) == 50
    assert event.event_id not in drawn


def test_the_dispatcher_is_handed_the_event_of_an_undispatched_outbox_entry_only() -> None:
    event = OrderCancelled.of("o-1", cancelled_at=AT, reason="r")
    entry = outbox_document(event, {"traceparent": "00-x"})

    pending = pending_event({**entry, "traceContext": {"traceparent": "00-x", "odd": 7}})

    assert pending is not None
    assert (pending.event, pending.message_id, pending.trace_context) == (
        event,
        entry["messageId"],
        {"traceparent": "00-x"},
    )
    assert pending_event({**entry, "dispatched": True}) is None
    assert pending_event({**entry, "type": "order"}) is None


def test_an_outbox_entry_stored_before_message_ids_were_drawn_is_published_under_its_event_id() -> (
    None
):
    """The shape every outbox entry had before issue 37: no `messageId`. It goes out under its
    event id, the same on every dispatch; so does an entry whose stored `messageId` does not
    name its event (never written by this app, and never worth publishing another event's
    id for)."""
    old_shape = {
        "id": "o-1:outbox:OrderCancelled",
        "orderId": "o-1",
        "type": "outbox",
        "eventType": "OrderCancelled",
        "event": {
            "eventType": "OrderCancelled",
            "eventId": "o-1:outbox:OrderCancelled",
            "orderId": "o-1",
            "cancelledAt": STAMP,
            "reason": None,
        },
        "traceContext": {},
        "dispatched": False,
    }

    pending = pending_event(old_shape)
    odd = pending_event({**old_shape, "messageId": "o-2:outbox:OrderCancelled:" + "0" * 32})

    assert pending is not None and pending.message_id == "o-1:outbox:OrderCancelled"
    assert pending.event == OrderCancelled.of("o-1", cancelled_at=AT, reason=None)
    assert odd is not None and odd.message_id == "o-1:outbox:OrderCancelled"


def test_shipping_writes_its_inbox_record_and_the_orders_one_shipment() -> None:
    assert shipping_documents(accepted(), message_id=ACCEPTED_ID, processed_at=AT) == (
        {
            "id": f"shipping:{ACCEPTED_ID}",
            "orderId": "o-1",
            "type": "inbox",
            "consumer": "shipping",
            "messageId": ACCEPTED_ID,
            "processedAt": STAMP,
        },
        {
            "id": "o-1:shipment",
            "orderId": "o-1",
            "type": "shipment",
            "customerId": "c-1",
            "lineCount": 1,
            "status": "requested",
            "requestedAt": STAMP,
        },
    )
    assert CosmosLayout().shipment_id("o-1") == "o-1:shipment"


def a_charge() -> BillingRecord:
    return BillingRecord(
        record_id=CosmosLayout().charge_record_id(ACCEPTED_ID),
        order_id="o-1",
        message_id=ACCEPTED_ID,
        status=BillingStatus.COMPLETED,
        owner="me",
        lease_seconds=10.0,
        amount="12.5",
        currency="EUR",
        payment_key="billing:o-1",
        payment_id="p-1",
        attempts=2,
    )


def a_refund() -> RefundRecord:
    return RefundRecord(
        record_id=CosmosLayout().refund_record_id("o-1"),
        order_id="o-1",
        status=BillingStatus.IN_PROGRESS,
        owner="me",
        lease_seconds=10.0,
        payment_id="p-1",
        amount="12.5",
        currency="EUR",
        refund_key="refund:o-1",
    )


def test_billings_charge_record_is_flat_and_reads_back_as_written() -> None:
    charge = a_charge()

    assert charge_document(charge) == {
        "id": f"billing:{ACCEPTED_ID}",
        "orderId": "o-1",
        "type": "billing",
        "consumer": "billing",
        "messageId": ACCEPTED_ID,
        "status": "completed",
        "owner": "me",
        "leaseSeconds": 10.0,
        "amount": "12.5",
        "currency": "EUR",
        "paymentKey": "billing:o-1",
        "paymentId": "p-1",
        "attempts": 2,
    }
    assert charge_of(charge_document(charge)) == charge


def test_the_records_carry_the_retentions_ttl_and_the_shipment_none() -> None:
    layout = CosmosLayout(record_ttl_seconds=4321)

    record, shipment = layout.shipping_documents(
        accepted(), message_id=ACCEPTED_ID, processed_at=AT
    )

    # Billing's records carry theirs from the core's `Retention` (tests/unit/test_billing.py).
    assert record["ttl"] == 4321 and "ttl" not in shipment
    # Without a retention the documents are the pinned ones above.
    assert CosmosLayout().shipping_documents(
        accepted(), message_id=ACCEPTED_ID, processed_at=AT
    ) == shipping_documents(accepted(), message_id=ACCEPTED_ID, processed_at=AT)


def test_a_refund_record_is_one_per_order_and_reads_back_as_written() -> None:
    refund = a_refund()

    assert refund_document(refund) == {
        "id": "refund:o-1",
        "orderId": "o-1",
        "type": "refund",
        "consumer": "billing",
        "status": "inProgress",
        "owner": "me",
        "leaseSeconds": 10.0,
        "paymentId": "p-1",
        "amount": "12.5",
        "currency": "EUR",
        "refundKey": "refund:o-1",
        "refundId": None,
        "attempts": 1,
    }
    assert refund_of(refund_document(refund)) == refund


@pytest.mark.parametrize(
    ("request_hash", "document_id"), [("h", "o-1:rejection:h"), (None, "o-1:rejection:dig")]
)
def test_a_rejection_is_named_by_its_request_hash_else_its_bodys_digest(
    request_hash: str | None, document_id: str
) -> None:
    rejection = OrderRejection("o-1", "R", "d", "m", request_hash, "dig", AT)

    assert rejection_document(rejection) == {
        "id": document_id,
        "orderId": "o-1",
        "type": "orderRejection",
        "reason": "R",
        "description": "d",
        "messageId": "m",
        "requestHash": request_hash,
        "bodyDigest": "dig",
        "rejectedAt": STAMP,
    }


@pytest.mark.parametrize("request_hash", ["h", None])
def test_get_reads_back_what_a_rejection_document_tells(request_hash: str | None) -> None:
    rejection = OrderRejection("o-1", "R", "d", "m", request_hash, "dig", AT)

    assert filed_rejection(rejection_document(rejection)) == FiledRejection(
        "o-1", "R", "d", STAMP, request_hash
    )
    assert filed_rejection(stored_order()) is None


def test_a_status_document_reads_back_as_its_status_version_and_history() -> None:
    cancelled = OrderStatusChanged.of("o-1", OrderStatus.CANCELLED, changed_at=AT, reason="why")
    history = ({"status": "paid", "version": 2, "at": "earlier"},)

    assert stored_status(status_document(cancelled, history)) == StoredStatus(
        OrderStatus.CANCELLED, 5, history
    )
    assert stored_status(None) == StoredStatus(OrderStatus.PLACED, 1)


def test_a_status_document_of_the_old_shape_reads_with_its_own_status_as_its_history() -> None:
    shipped = OrderStatusChanged.of("o-1", OrderStatus.SHIPPED, changed_at=AT)
    old_shape = status_document(shipped, ())
    del old_shape["history"]  # written before every change was kept
    odd_entries = {
        **old_shape,
        "history": [{"status": "paid"}, "x", {"status": "paid", "version": 2}],
    }

    assert stored_status(old_shape) == StoredStatus(
        OrderStatus.SHIPPED, 3, ({"status": "shipped", "version": 3, "at": STAMP},)
    )
    # entries without a status and a version are left out, a missing time reads as ""
    assert stored_status(odd_entries).history == ({"status": "paid", "version": 2, "at": ""},)


def test_one_history_per_order_from_placed_to_a_cancel_still_queued() -> None:
    written = order_write(
        placed_order(), request_hash="h", message_id="o-1", processed_at=AT, owner_scope=None
    )
    paid = OrderStatusChanged.of("o-1", OrderStatus.PAID, changed_at=AT)
    shipped = OrderStatusChanged.of("o-1", OrderStatus.SHIPPED, changed_at=AT)
    old_shape = status_document(shipped, ())
    del old_shape["history"]
    cancelled_order = order_cancelled(written[0], AT, None)

    assert order_history(order_partition(written)) == [
        {"status": "placed", "version": 1, "at": STAMP}
    ]
    assert order_history(order_partition([*written, old_shape])) == [
        {"status": "placed", "version": 1, "at": STAMP},
        {"status": "shipped", "version": 3, "at": STAMP},
    ]
    # a change recorded late reads in its place, shown as any other (`late` is the audit's)
    late = StoredStatus(OrderStatus.SHIPPED, 3, history_after(StoredStatus.placed(), shipped))
    with_late = status_document(shipped, history_with_late(late, paid) or ())
    assert with_late["history"][0]["late"] is True  # stored with the mark, shown without
    assert order_history(order_partition([*written, with_late])) == [
        {"status": "placed", "version": 1, "at": STAMP},
        {"status": "paid", "version": 2, "at": STAMP},
        {"status": "shipped", "version": 3, "at": STAMP},
    ]
    # the cancel is decided on the order document; its status update (version 5) is queued
    paid_document = status_document(paid, history_after(StoredStatus.placed(), paid))
    assert order_history(order_partition([cancelled_order, paid_document])) == [
        {"status": "placed", "version": 1, "at": STAMP},
        {"status": "paid", "version": 2, "at": STAMP},
        {"status": "cancelled", "version": 5, "at": STAMP},
    ]


def test_an_order_partition_reads_as_its_order_lines_status_and_rejections() -> None:
    written = order_write(
        placed_order(), request_hash="h", message_id="o-1", processed_at=AT, owner_scope=None
    )
    paid = OrderStatusChanged.of("o-1", OrderStatus.PAID, changed_at=AT)
    refused = OrderRejection("o-1", "R", "d", "m", "other", "dig", AT)
    second_line = {**written[2], "id": "o-1:line:002", "lineNumber": 2, "sku": "t"}
    documents = [
        rejection_document(refused),
        second_line,
        status_document(paid, ()),
        *reversed(written),  # the outbox entry is not shown
    ]

    assert order_partition(documents) == OrderPartition(
        StoredOrderView(
            order=SagaOrder("o-1", "c-1", "EUR", Decimal("12.5"), 1, Fulfilment.OPEN, None, None),
            request_hash="h",
            total_quantity=1,
            total_amount="12.5",
            processed_at=STAMP,
            lines=(
                StoredLine(1, "s", 1, "12.5", "12.5"),
                StoredLine(2, "t", 1, "12.5", "12.5"),
            ),
        ),
        StoredStatus(OrderStatus.PAID, 2, ()),
        (FiledRejection("o-1", "R", "d", STAMP, "other"),),
    )
    assert order_partition([]) == OrderPartition(None, stored_status(None), ())
    other = status_document(OrderStatusChanged.of("o-2", OrderStatus.PAID, changed_at=AT), ())
    assert order_partitions([other, *documents]) == {
        "o-2": OrderPartition(None, StoredStatus(OrderStatus.PAID, 2, ()), ()),
        "o-1": order_partition(documents),
    }


def test_the_inbox_container_reads_as_each_orders_shipments_charges_refunds_and_records() -> None:
    record, shipment = shipping_documents(accepted(), message_id=ACCEPTED_ID, processed_at=AT)
    in_progress = replace(a_charge(), record_id="billing:e-2", status=BillingStatus.IN_PROGRESS)
    elsewhere = replace(a_refund(), record_id="refund:o-2", order_id="o-2")
    documents = [
        charge_document(a_charge()),
        refund_document(elsewhere),
        {"id": "x", "orderId": "o-3", "type": "notOurs"},  # not shown, nor its order
        shipment,
        charge_document(in_progress),
        record,
        refund_document(a_refund()),
    ]

    assert inbox_partitions(documents) == {
        "o-1": InboxPartition(
            shipments=(StoredShipment("o-1", "c-1", 1, "requested", STAMP),),
            charges=(a_charge(), in_progress),
            refunds=(a_refund(),),
            records=(InboxRecord("shipping", ACCEPTED_ID, STAMP),),
        ),
        "o-2": InboxPartition(refunds=(elsewhere,)),
    }
    assert inbox_partitions([]) == {}


def test_the_integrity_audit_reads_a_run_with_nothing_merged_and_missing_fields_as_none() -> None:
    order, accepted_entry, line = order_write(
        placed_order(), request_hash="h", message_id="o-1", processed_at=AT, owner_scope=None
    )
    cancelled = order_cancelled(order, AT, None)
    cancel_entry = outbox_document(OrderCancelled.of("o-1", cancelled_at=AT, reason=None))
    later_line = {**line, "id": "o-1:line:002", "lineNumber": 2, "sku": "t", "quantity": 3}
    refused = OrderRejection("o-1", "R", "d", "m", "h", "dig", AT)
    paid = status_document(OrderStatusChanged.of("o-1", OrderStatus.PAID, changed_at=AT), ())
    documents = [
        later_line,
        {k: v for k, v in order.items() if k != "requestHash"},  # stored twice, once without
        cancelled,
        {"id": "o-2:line:001", "orderId": "o-2", "type": "orderLine"},  # no order, no fields
        accepted_entry,
        {**accepted_entry, "id": "again"},
        cancel_entry,
        line,
        paid,  # the status audit's
        rejection_document(refused),
        {"orderId": "o-1", "type": "rejectionLike"},
        {"id": "what", "orderId": "o-3"},
    ]

    assert stored_run(documents) == StoredRun(
        orders={"o-1": (AuditedOrder(None, False), AuditedOrder("h", True))},
        lines={
            "o-1": (AuditedLine("s", 1), AuditedLine("t", 3)),
            "o-2": (AuditedLine(None, None),),
        },
        outbox_events={"o-1": 2},
        cancel_events={"o-1": 1},
        rejections=(AuditedRejection("o-1:rejection:h", "m", "R"),),
        unexpected=(None, "what"),
    )
    assert CosmosLayout().stored_run([]) == StoredRun({}, {}, {}, {}, (), ())


def test_the_status_document_keeps_a_bounded_history_and_a_reason_only_when_given() -> None:
    placed = stored_status(None)
    paid = OrderStatusChanged.of("o-1", OrderStatus.PAID, changed_at=AT)
    long_ago: tuple[dict[str, Any], ...] = tuple(
        {"status": "paid", "version": 2, "at": str(n)} for n in range(20)
    )
    cancelled = OrderStatusChanged.of("o-1", OrderStatus.CANCELLED, changed_at=AT, reason="why")

    assert status_document(paid, history_after(placed, paid)) == {
        "id": "o-1:status",
        "orderId": "o-1",
        "type": "orderStatus",
        "status": "paid",
        "version": 2,
        "changedAt": STAMP,
        "history": [{"status": "paid", "version": 2, "at": STAMP}],
    }
    after_many = status_document(
        cancelled, history_after(StoredStatus(OrderStatus.PAID, 2, long_ago), cancelled)
    )
    assert after_many["reason"] == "why"
    assert after_many["history"] == [
        *long_ago[1:],
        {"status": "cancelled", "version": 5, "at": STAMP},
    ]
    assert CosmosLayout().status_document_id("o-1") == "o-1:status"


def test_the_cosmos_layout_is_the_services_document_layout() -> None:
    layout: DocumentLayout = CosmosLayout()

    assert layout.charge_record_id("e-1") == "billing:e-1"
    assert layout.saga_order(stored_order()) == saga_order(stored_order())
    assert layout.stored_status(None) == stored_status(None)
    assert layout.order_partition([stored_order()]) == order_partition([stored_order()])
    assert layout.inbox_partitions([refund_document(a_refund())]) == {
        "o-1": InboxPartition(refunds=(a_refund(),))
    }
