"""The console's order timeline: which documents prove which step, in the order of an order's
life, whichever container or service holds them."""

from __future__ import annotations

from typing import Any

from orders.adapters import cosmos_layout
from orders.service import console
from orders.service.console import current_status, order_timeline


def history(*changes: tuple[str, int, str]) -> list[dict[str, object]]:
    """An order's history as `order_history` builds it (what GET shows)."""
    return [{"status": s, "version": v, "at": at} for s, v, at in changes]


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

    steps = order_timeline(
        documents,
        history(("placed", 1, "2026-12-01T10:00:00+00:00"), ("paid", 2, "2026-12-01T10:00:05Z")),
    )

    # the history's changes first; the shipment is recorded, its status update not applied
    assert [(step.status, step.version) for step in steps] == [
        ("placed", 1),
        ("paid", 2),
        ("shipped", None),
    ]
    paid = steps[1]
    assert {evidence.origin for evidence in paid.evidence} == {
        "orders container",
        "payment service",
        "inbox container",
    }
    assert paid.at == "2026-12-01T10:00:05Z"  # the history's time, as GET shows it
    assert steps[2].at == "2026-12-01T10:00:06+00:00"  # not in the history: the earliest source
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

    steps = order_timeline(
        documents,
        history(
            ("placed", 1, "2026-12-01T10:00:00+00:00"),
            ("paid", 2, "2026-12-01T10:00:05+00:00"),
            ("cancelled", 5, "2026-12-01T10:01:00+00:00"),
            ("refunded", 6, "2026-12-01T10:01:02+00:00"),
        ),
    )

    assert [step.status for step in steps] == ["placed", "paid", "cancelled", "refunded"]
    assert [step.version for step in steps] == [1, 2, 5, 6]
    # the order document's decision is evidence of the cancel the history dates
    assert steps[2].at == "2026-12-01T10:01:00+00:00"
    assert "2026-12-01T10:00:59+00:00" in [e.at for e in steps[2].evidence]
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

    steps = order_timeline(documents, history(("placed", 1, "2026-12-01T10:00:00+00:00")))

    assert [step.status for step in steps] == ["placed", "payment_failed"]
    assert steps[1].at == "2026-12-01T10:00:03+00:00"
    assert "refused" in steps[1].evidence[0].said


def test_a_fresh_order_is_placed_and_untrusted_fields_are_ignored() -> None:
    documents: list[dict[str, Any]] = [
        ORDER,
        {"type": "orderStatus", "history": "not a list", "status": 3, "version": "x"},
        {"type": "payment", "unavailable": "the payment service did not answer"},
    ]
    # the history cannot be read (the console says so): only what the documents say
    assert [(s.status, s.version) for s in order_timeline(documents, None)] == [("placed", None)]
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
