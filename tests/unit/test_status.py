"""Status updates over a fake store: stale, newer, illegal, races, and any delivery order."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fakes import LAYOUT, FakeDocumentStore, FakeFencedDocuments
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly_once._records import JsonMapping, StoredDocument
from exactly_once.decisions import Outcome, Settlement
from orders.domain.messages import MessageRejected
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import (
    MAX_HISTORY,
    OrderStatus,
    OrderStatusChanged,
    parse_status_changed,
    reachable,
)
from orders.service.status import StatusConsumer

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def update(
    status: OrderStatus, version: int | None = None, order_id: str = "o-1"
) -> OrderStatusChanged:
    return OrderStatusChanged.of(order_id, status, changed_at=NOW, version=version)


def message(change: OrderStatusChanged) -> ReceivedOrderMessage:
    return ReceivedOrderMessage(body=change.body(), message_id=change.message_id)


def stored(documents: FakeFencedDocuments, order_id: str = "o-1") -> dict[str, Any]:
    return documents.documents[(order_id, f"{order_id}:status")]


@pytest.mark.parametrize(
    ("source", "target", "legal"),
    [
        (OrderStatus.PLACED, OrderStatus.PAID, True),
        (OrderStatus.PLACED, OrderStatus.SHIPPED, True),  # a gap: paid is late
        (OrderStatus.PAID, OrderStatus.CANCELLED, True),
        (OrderStatus.SHIPPED, OrderStatus.CANCELLED, False),
        (OrderStatus.SHIPPED, OrderStatus.PAID, False),
        (OrderStatus.CANCELLED, OrderStatus.PAID, False),
        (OrderStatus.DELIVERED, OrderStatus.CANCELLED, False),
        (OrderStatus.CANCELLED, OrderStatus.REFUNDED, True),
        (OrderStatus.PAID, OrderStatus.REFUNDED, True),  # a gap: cancelled is late
        (OrderStatus.SHIPPED, OrderStatus.REFUNDED, False),
        (OrderStatus.REFUNDED, OrderStatus.CANCELLED, False),
        (OrderStatus.REFUNDED, OrderStatus.PAID, False),
    ],
)
def test_the_state_machine(source: OrderStatus, target: OrderStatus, legal: bool) -> None:
    assert reachable(source, target) is legal


async def test_newer_applies_older_is_stale_and_a_repeat_changes_nothing() -> None:
    documents = FakeFencedDocuments()
    consumer = StatusConsumer(FakeDocumentStore(documents), LAYOUT)

    shipped = await consumer.handle(message(update(OrderStatus.SHIPPED)))
    paid_late = await consumer.handle(message(update(OrderStatus.PAID)))
    shipped_again = await consumer.handle(message(update(OrderStatus.SHIPPED)))

    assert [d.outcome for d in (shipped, paid_late, shipped_again)] == [
        Outcome.PROCESSED,
        Outcome.STALE,
        Outcome.STALE,
    ]
    assert all(d.settlement is Settlement.COMPLETE for d in (paid_late, shipped_again))
    assert (stored(documents)["status"], stored(documents)["version"]) == ("shipped", 3)


def changes(documents: FakeFencedDocuments) -> list[tuple[object, object]]:
    history = stored(documents)["history"]
    assert isinstance(history, list)
    return [(entry["status"], entry["version"]) for entry in history]


async def test_a_change_that_arrives_after_a_newer_one_is_kept_in_its_place() -> None:
    documents = FakeFencedDocuments()
    consumer = StatusConsumer(FakeDocumentStore(documents), LAYOUT)
    await consumer.handle(message(update(OrderStatus.SHIPPED)))

    paid_late = await consumer.handle(message(update(OrderStatus.PAID)))
    again = await consumer.handle(message(update(OrderStatus.PAID)))

    assert (paid_late.outcome, again.outcome) == (Outcome.STALE, Outcome.STALE)
    assert (stored(documents)["status"], stored(documents)["version"]) == ("shipped", 3)
    assert changes(documents) == [("paid", 2), ("shipped", 3)]


async def test_a_stale_update_that_never_happened_to_the_order_is_not_recorded() -> None:
    documents = FakeFencedDocuments()
    consumer = StatusConsumer(FakeDocumentStore(documents), LAYOUT)
    await consumer.handle(message(update(OrderStatus.CANCELLED)))

    shipped_late = await consumer.handle(message(update(OrderStatus.SHIPPED)))

    assert shipped_late.outcome is Outcome.STALE  # a cancelled order was never shipped
    assert changes(documents) == [("cancelled", 5)]


async def test_an_illegal_transition_is_dead_lettered_with_a_reason() -> None:
    documents = FakeFencedDocuments()
    consumer = StatusConsumer(FakeDocumentStore(documents), LAYOUT)
    await consumer.handle(message(update(OrderStatus.CANCELLED)))

    decision = await consumer.handle(message(update(OrderStatus.DELIVERED, version=9)))

    assert (decision.outcome, decision.settlement) == (
        OrderOutcome.ILLEGAL_TRANSITION,
        Settlement.DEAD_LETTER,
    )
    assert decision.dead_letter_reason == "IllegalStatusTransition"
    assert "cancelled" in (decision.dead_letter_description or "")
    assert stored(documents)["status"] == "cancelled"


async def test_a_lost_race_reads_again_and_decides_again() -> None:
    documents = FakeFencedDocuments()
    store = FakeDocumentStore(documents)
    consumer = StatusConsumer(store, LAYOUT)
    await consumer.handle(message(update(OrderStatus.PAID)))
    real_replace = store.replace
    raced = False

    async def replace_after_a_rival(
        document: JsonMapping, partition: str, *, etag: str
    ) -> StoredDocument:
        nonlocal raced
        if not raced:
            raced = True  # a rival's cancel (version 5) lands between our read and our write
            await real_replace(
                {**stored(documents), "status": "cancelled", "version": 5}, partition, etag=etag
            )
        return await real_replace(document, partition, etag=etag)

    store.replace = replace_after_a_rival  # type: ignore[method-assign]
    decision = await consumer.handle(message(update(OrderStatus.SHIPPED)))

    assert decision.outcome is Outcome.STALE  # version 3 < the rival's 5, seen on the re-read
    assert stored(documents)["status"] == "cancelled"


async def test_history_is_bounded() -> None:
    documents = FakeFencedDocuments()
    consumer = StatusConsumer(FakeDocumentStore(documents), LAYOUT)
    steps = [OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.DELIVERED]
    for version in range(2, MAX_HISTORY + 10):  # version 1 is the order as placed
        await consumer.handle(message(update(steps[min(version - 2, 2)], version=version)))
    history = stored(documents)["history"]
    assert isinstance(history, list) and len(history) == 3  # one entry per applied update

    many = FakeFencedDocuments()
    many.documents[("o-1", "o-1:status")] = {
        "id": "o-1:status",
        "orderId": "o-1",
        "status": "paid",
        "version": 2,
        "history": [{"status": "paid", "version": 2, "at": "x"}] * MAX_HISTORY,
        "_etag": '"0"',
        "_ts": 0,
    }
    await StatusConsumer(FakeDocumentStore(many), LAYOUT).handle(
        message(update(OrderStatus.SHIPPED))
    )
    history = stored(many)["history"]
    assert isinstance(history, list) and len(history) == MAX_HISTORY
    assert history[-1] == {"status": "shipped", "version": 3, "at": NOW.isoformat()}


async def test_a_status_never_follows_itself_so_a_stray_placed_is_always_illegal() -> None:
    documents = FakeFencedDocuments()
    decision = await StatusConsumer(FakeDocumentStore(documents), LAYOUT).handle(
        message(update(OrderStatus.PLACED, 7))
    )
    assert decision.outcome is OrderOutcome.ILLEGAL_TRANSITION and documents.documents == {}


LEGAL_SEQUENCE = [
    update(OrderStatus.PAID),
    update(OrderStatus.SHIPPED),
    update(OrderStatus.DELIVERED),
]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.permutations(LEGAL_SEQUENCE * 2))
async def test_any_order_with_duplicates_ends_at_the_highest_version(
    deliveries: list[OrderStatusChanged],
) -> None:
    documents = FakeFencedDocuments()
    consumer = StatusConsumer(FakeDocumentStore(documents), LAYOUT)
    for delivery in deliveries:
        decision = await consumer.handle(message(delivery))
        assert decision.settlement is Settlement.COMPLETE
    assert (stored(documents)["status"], stored(documents)["version"]) == ("delivered", 4)
    # every change kept once, in version order, whatever arrived first
    assert changes(documents) == [("paid", 2), ("shipped", 3), ("delivered", 4)]


PAID_2 = b'{"orderId": "o-1", "status": "paid", "version": 2, "changedAt": "x"}'


@pytest.mark.parametrize("message_id", ["o-1:status:2", "o-1:status:2:" + "0123456789abcdef" * 2])
def test_an_update_is_named_by_its_bare_id_alone_or_with_a_nonce(message_id: str) -> None:
    update = parse_status_changed(ReceivedOrderMessage(body=PAID_2, message_id=message_id))
    assert (update.order_id, update.version) == ("o-1", 2)


@pytest.mark.parametrize(
    ("body", "message_id"),
    [
        (b"\xff", "o-1:status:2"),
        (b'{"orderId": "o-1", "status": "paid", "version": 2.0, "changedAt": "x"}', "o-1:status:2"),
        (b'{"orderId": "o-1", "status": "lost", "version": 2, "changedAt": "x"}', "o-1:status:2"),
        (b'{"orderId": "o-1", "status": "paid", "version": 0, "changedAt": "x"}', "o-1:status:0"),
        (b'{"orderId": "o-1", "status": "paid", "version": 2, "changedAt": "x"}', "o-1"),
        # a nonce that is not 32 lowercase hex digits, or another update's id with one
        (PAID_2, "o-1:status:2:" + "A" * 32),
        (PAID_2, "o-1:status:2:" + "0" * 31),
        (PAID_2, "o-1:status:2:" + "0" * 32 + ":x"),
        (PAID_2, "o-1:status:20:" + "0" * 32),
        (
            json.dumps(
                {
                    "orderId": "o-1",
                    "status": "paid",
                    "version": 2,
                    "changedAt": "x",
                    "reason": "r" * 201,
                }
            ).encode(),
            "o-1:status:2",
        ),
        (b" " * 4096, "o-1:status:2"),
    ],
)
def test_hostile_updates_are_rejected(body: bytes, message_id: str) -> None:
    with pytest.raises(MessageRejected):
        parse_status_changed(ReceivedOrderMessage(body=body, message_id=message_id))
