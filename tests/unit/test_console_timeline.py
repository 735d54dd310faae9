"""The console's order timeline: which documents prove which step, in the order of an order's
life, whichever container or service holds them."""

from __future__ import annotations

from typing import Any

from orders.adapters import cosmos_layout
from orders.service import console
from orders.service.console import current_status, order_timeline

ORDER = {"id": "o-1", "orderId": "o-1", "type": "order", "status": "placed",
         "processedAt": "2026-12-01T10:00:00+00:00"}  # fmt: skip


def status_document(*history: tuple[str, int, str]) -> dict[str, Any]:
    status, version, _ = history[-1]
    return {
        "id": "o-1:status",
        "orderId": "o-1",
        "type": "orderStatus",
        "status": status,
        "version": version,
        "history": [{"status": s, "version": v, "at": at} for s, v, at in history],
    }


def test_each_step_names_every_document_that_proves_it() -> None:
    documents = [
        ORDER,
        status_document(("paid", 2, "2026-12-01T10:00:05+00:00")),
        {"type": "payment", "id": "pay-1", "orderId": "o-1", "amount": "2.5",
         "currency": "EUR", "createdAt": "2026-12-01T10:00:04Z"},
        {"type": "billing", "id": "billing:m-1", "orderId": "o-1", "status": "completed"},
        {"type": "shipment", "id": "o-1:shipment", "orderId": "o-1", "status": "requested",
         "requestedAt": "2026-12-01T10:00:06+00:00"},
    ]  # fmt: skip

    steps = order_timeline(documents)

    assert [step.status for step in steps] == ["placed", "paid", "shipped"]
    paid = steps[1]
    assert {evidence.origin for evidence in paid.evidence} == {
        "orders container",
        "payment service",
        "inbox container",
    }
    assert paid.at == "2026-12-01T10:00:04Z"  # the earliest, across time formats
    assert current_status(documents) == ("paid", 2)


def test_a_cancelled_order_shows_its_refund_when_the_saga_writes_one() -> None:
    cancelled = {
        **ORDER,
        "fulfilment": {"state": "cancelled", "cancelledAt": "2026-12-01T10:00:59+00:00"},
    }
    documents = [
        cancelled,
        status_document(
            ("paid", 2, "2026-12-01T10:00:05+00:00"),
            ("cancelled", 5, "2026-12-01T10:01:00+00:00"),
            ("refunded", 6, "2026-12-01T10:01:02+00:00"),
        ),
        {"type": "refund", "id": "refund:o-1", "orderId": "o-1", "status": "completed"},
        {"type": "paymentRefund", "id": "ref-1", "orderId": "o-1", "amount": "2.5",
         "currency": "EUR", "createdAt": "2026-12-01T10:01:01+00:00"},
    ]  # fmt: skip

    steps = order_timeline(documents)

    assert [step.status for step in steps] == ["placed", "paid", "cancelled", "refunded"]
    assert steps[2].at == "2026-12-01T10:00:59+00:00"  # the order document decided it first
    assert [e.origin for e in steps[-1].evidence] == [
        "orders container",
        "inbox container",
        "payment service",
    ]
    assert current_status(documents) == ("refunded", 6)


def test_an_order_whose_charge_was_refused_shows_payment_failed_and_no_shipment() -> None:
    failed = {
        **ORDER,
        "fulfilment": {"state": "payment_failed", "at": "2026-12-01T10:00:03+00:00"},
    }
    documents: list[dict[str, Any]] = [
        failed,
        {"type": "billing", "id": "billing:m-1", "orderId": "o-1", "status": "refused"},
    ]

    steps = order_timeline(documents)

    assert [step.status for step in steps] == ["placed", "payment_failed"]
    assert steps[1].at == "2026-12-01T10:00:03+00:00"
    assert "refused" in steps[1].evidence[0].said


def test_a_fresh_order_is_placed_and_untrusted_fields_are_ignored() -> None:
    documents: list[dict[str, Any]] = [
        ORDER,
        {"type": "orderStatus", "history": "not a list", "status": 3, "version": "x"},
        {"type": "payment", "unavailable": "the payment service did not answer"},
    ]
    assert [step.status for step in order_timeline(documents)] == ["placed"]
    assert current_status(documents) is None


def test_the_console_tells_documents_apart_by_the_types_the_layout_writes() -> None:
    """The console reads documents raw and cannot import the adapter: its copy of the type
    names must be the layout's, or a renamed type would vanish from the order page."""
    # Every type an order's partitions hold; the dispatcher's leases (the leases container,
    # partitioned by lease) are never on an order's page.
    names = [
        name
        for name in vars(cosmos_layout)
        if name.endswith("_DOCUMENT_TYPE") and name != "LEASE_DOCUMENT_TYPE"
    ]

    assert len(names) == 9
    assert {name: getattr(console, name) for name in names} == {
        name: getattr(cosmos_layout, name) for name in names
    }
