"""Every outcome of the consumer core, against the fake store."""

from __future__ import annotations

import json
import uuid

import pytest
from fakes import LAYOUT, FakeOrderStore, RecordingSettler, order_payload

from exactly_once.decisions import Outcome, Settlement
from exactly_once.exceptions import StoreError, TransientStoreError
from orders.domain.messages import MAX_BODY_BYTES, MAX_LINES_PER_ORDER
from orders.domain.received import ReceivedOrderMessage
from orders.service.consumer import OrderConsumer


def new_id() -> str:
    return f"order-{uuid.uuid4().hex[:12]}"


def message_for(payload: dict[str, object], message_id: str | None = None) -> ReceivedOrderMessage:
    return ReceivedOrderMessage(
        body=json.dumps(payload).encode(),
        message_id=message_id if message_id is not None else str(payload["orderId"]),
        correlation_id="corr-1",
    )


@pytest.fixture
def store() -> FakeOrderStore:
    return FakeOrderStore()


@pytest.fixture
def consumer(store: FakeOrderStore) -> OrderConsumer:
    return OrderConsumer(store, LAYOUT)


async def test_new_order_writes_order_its_outbox_event_and_lines_and_completes(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    settler = RecordingSettler()

    decision = await consumer.handle_and_settle(message_for(order_payload(order_id)), settler)

    assert decision.outcome is Outcome.PROCESSED
    assert settler.calls == [("complete", {})]
    documents = store.documents(order_id)
    assert [d["id"] for d in documents] == [
        order_id,
        f"{order_id}:outbox:OrderAccepted",
        f"{order_id}:line:001",
        f"{order_id}:line:002",
    ]
    order, outbox = documents[0], documents[1]
    assert order["orderId"] == order_id and order["status"] == "placed"
    assert order["requestHash"] == decision.request_hash
    assert order["messageId"] == order_id
    assert order["totalAmount"] == "5.5" and order["lineCount"] == 2
    assert all(d["orderId"] == order_id for d in documents)
    assert outbox["type"] == "outbox" and outbox["dispatched"] is False
    assert outbox["event"] == {
        "eventType": "OrderAccepted",
        "eventId": outbox["id"],
        "orderId": order_id,
        "customerId": order["customerId"],
        "currency": order["currency"],
        "totalAmount": "5.5",
        "lineCount": 2,
        "acceptedAt": order["processedAt"],
    }


async def test_redelivery_with_same_payload_is_completed_as_duplicate_without_write(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    await consumer.handle(message_for(order_payload(order_id)))
    before = store.documents(order_id)
    settler = RecordingSettler()

    # Same order, different key order and price spelling: still the same request (quantities
    # are JSON integers by contract, so only prices have several spellings).
    respelled = json.dumps(
        {
            "lines": [
                {"unitPrice": 1.250, "quantity": 2, "sku": "sku-apple"},
                {"unitPrice": 3.0, "sku": "sku-pear", "quantity": 1},
            ],
            "currency": "EUR",
            "customerId": "customer-1",
            "orderId": order_id,
        }
    ).encode()
    decision = await consumer.handle_and_settle(
        ReceivedOrderMessage(body=respelled, message_id=order_id, delivery_count=2), settler
    )

    assert decision.outcome is Outcome.DUPLICATE
    assert settler.calls == [("complete", {})]
    assert store.documents(order_id) == before


async def test_same_order_id_with_different_payload_is_dead_lettered_as_mismatch(
    store: FakeOrderStore, consumer: OrderConsumer, caplog: pytest.LogCaptureFixture
) -> None:
    order_id = new_id()
    first = await consumer.handle(message_for(order_payload(order_id)))
    settler = RecordingSettler()

    decision = await consumer.handle_and_settle(
        message_for(order_payload(order_id, customerId="someone-else")), settler
    )

    assert decision.outcome is Outcome.MISMATCH
    [(action, details)] = settler.calls
    assert action == "dead_letter"
    assert details["reason"] == "RequestHashMismatch"
    assert first.request_hash is not None and first.request_hash in details["description"]
    assert decision.request_hash is not None and decision.request_hash in details["description"]
    assert store.documents(order_id)[0]["customerId"] == "customer-1"
    assert any("ALERT" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("body", "message_id", "reason"),
    [
        (b"{not json", "o-1", "InvalidJson"),
        (b"\xff\xfe", "o-1", "InvalidJson"),
        (json.dumps(order_payload("o-1")).encode("utf-16"), "o-1", "InvalidJson"),
        (json.dumps({"orderId": "o-1"}).encode(), "o-1", "SchemaViolation"),
        (json.dumps(order_payload("o-1", currency="EURO")).encode(), "o-1", "SchemaViolation"),
        (json.dumps(order_payload("o/1")).encode(), "o/1", "InvalidId"),
        (json.dumps(order_payload("o-1", extra=True)).encode(), "o-1", "SchemaViolation"),
        (
            json.dumps(
                order_payload("o-1", lines=[{"sku": "a", "quantity": 0, "unitPrice": 1}])
            ).encode(),
            "o-1",
            "SchemaViolation",
        ),
        (
            json.dumps(
                order_payload("o-1", lines=[{"sku": "a", "quantity": 1, "unitPrice": -1}])
            ).encode(),
            "o-1",
            "SchemaViolation",
        ),
        (json.dumps(order_payload("o-1")).encode(), "o-2", "MessageIdMismatch"),
        (json.dumps(order_payload("o-1")).encode(), None, "MessageIdMismatch"),
        (
            json.dumps(
                order_payload(
                    "o-1",
                    lines=[
                        {"sku": f"s{i}", "quantity": 1, "unitPrice": 1}
                        for i in range(MAX_LINES_PER_ORDER + 1)
                    ],
                )
            ).encode(),
            "o-1",
            "OrderTooLarge",
        ),
        (b" " * (MAX_BODY_BYTES + 1), "o-1", "OrderTooLarge"),
    ],
)
async def test_bad_messages_are_dead_lettered_with_a_specific_reason_and_never_written(
    store: FakeOrderStore,
    consumer: OrderConsumer,
    body: bytes,
    message_id: str | None,
    reason: str,
) -> None:
    settler = RecordingSettler()

    decision = await consumer.handle_and_settle(
        ReceivedOrderMessage(body=body, message_id=message_id), settler
    )

    assert decision.outcome is Outcome.REJECTED
    [(action, details)] = settler.calls
    assert action == "dead_letter"
    assert details["reason"] == reason
    assert details["description"]
    # Nothing of an order is written: at most the rejection note filed under its id.
    assert store.order_ids() == []
    stored = [d for pk in store.partitions for d in store.documents(pk)]
    assert all(d["type"] == "orderRejection" for d in stored)


async def test_largest_allowed_order_fits_one_batch(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    lines = [{"sku": f"s{i}", "quantity": 1, "unitPrice": 1} for i in range(MAX_LINES_PER_ORDER)]

    decision = await consumer.handle(message_for(order_payload(order_id, lines=lines)))

    assert decision.outcome is Outcome.PROCESSED
    assert len(store.documents(order_id)) == MAX_LINES_PER_ORDER + 2


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (TransientStoreError("429 throttled"), Outcome.TRANSIENT_FAILURE),
        (StoreError("400 bad request"), Outcome.UNEXPECTED_FAILURE),
        (RuntimeError("bug"), Outcome.UNEXPECTED_FAILURE),
    ],
)
async def test_store_failures_abandon_and_write_nothing(
    store: FakeOrderStore, consumer: OrderConsumer, error: Exception, outcome: Outcome
) -> None:
    order_id = new_id()
    store.fail_next(error)
    settler = RecordingSettler()

    decision = await consumer.handle_and_settle(message_for(order_payload(order_id)), settler)

    assert decision.outcome is outcome
    assert decision.settlement is Settlement.ABANDON
    assert settler.calls == [("abandon", {})]
    assert store.documents(order_id) == []


async def test_redelivery_after_transient_failure_is_processed_once(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    store.fail_next(TransientStoreError("503"), times=2)
    outcomes = [
        (await consumer.handle(message_for(order_payload(order_id)))).outcome for _ in range(4)
    ]

    assert outcomes == [
        Outcome.TRANSIENT_FAILURE,
        Outcome.TRANSIENT_FAILURE,
        Outcome.PROCESSED,
        Outcome.DUPLICATE,
    ]
    assert store.order_ids() == [order_id]


async def test_line_conflict_without_order_is_dead_lettered_as_an_effect_conflict(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    # The core's conflict, in one form from the store to the decision: a line stored without
    # its order conflicts on every delivery alike, so no redelivery can complete it.
    order_id = new_id()
    store.seed_document(order_id, {"id": f"{order_id}:line:002", "orderId": order_id})
    settler = RecordingSettler()

    decision = await consumer.handle_and_settle(message_for(order_payload(order_id)), settler)

    assert (decision.outcome, decision.settlement) == (
        Outcome.EFFECT_CONFLICT,
        Settlement.DEAD_LETTER,
    )
    [(action, details)] = settler.calls
    assert action == "dead_letter" and details["reason"] == "EffectDocumentExists"
    assert f"{order_id}:line:002" in details["description"]
    assert order_id not in {d["id"] for d in store.documents(order_id)}


async def test_amounts_are_stored_alike_whatever_the_number_spelling(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    lines = (
        '[{"sku": "a", "quantity": 3, "unitPrice": 1e2}, '
        '{"sku": "b", "quantity": 1, "unitPrice": 1.250}]'
    )
    body = (
        f'{{"orderId": "{order_id}", "customerId": "c", "currency": "EUR", "lines": {lines}}}'
    ).encode()

    await consumer.handle(ReceivedOrderMessage(body=body, message_id=order_id))

    order, outbox, first, second = store.documents(order_id)
    assert (first["unitPrice"], first["lineTotal"]) == ("100", "300")
    assert (second["unitPrice"], second["lineTotal"]) == ("1.25", "1.25")
    assert order["totalAmount"] == outbox["event"]["totalAmount"] == "301.25"


# --- rejections filed for GET, amounts stored alike --------------------------------------------


async def test_a_mismatch_files_its_rejection_in_the_order_partition(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    await consumer.handle(message_for(order_payload(order_id)))

    decision = await consumer.handle(message_for(order_payload(order_id, currency="USD")))
    again = await consumer.handle(message_for(order_payload(order_id, currency="USD")))

    rejections = [d for d in store.documents(order_id) if d["type"] == "orderRejection"]
    assert decision.outcome is again.outcome is Outcome.MISMATCH
    # A redelivery of the same rejected payload finds its note filed: one document.
    [rejection] = rejections
    assert rejection["reason"] == "RequestHashMismatch"
    assert rejection["requestHash"] == decision.request_hash
    assert rejection["messageId"] == order_id


async def test_a_store_that_cannot_file_the_rejection_does_not_delay_the_dead_letter(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    store.fail_next(TransientStoreError("503"))
    settler = RecordingSettler()

    decision = await consumer.handle_and_settle(
        ReceivedOrderMessage(b"{oops", message_id=order_id), settler
    )

    assert decision.outcome is Outcome.REJECTED
    assert settler.calls[0][0] == "dead_letter"
    assert store.create_calls == 1 and store.documents(order_id) == []


async def test_a_rejection_without_a_usable_id_is_not_filed(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    decision = await consumer.handle(ReceivedOrderMessage(b"{oops", message_id="bad/id"))

    assert decision.outcome is Outcome.REJECTED and decision.key is None
    assert store.create_calls == 0


async def test_negative_zero_is_stored_as_zero(
    store: FakeOrderStore, consumer: OrderConsumer
) -> None:
    order_id = new_id()
    payload = order_payload(order_id)
    body = json.dumps(payload).replace('"unitPrice": 1.25', '"unitPrice": -0.0').encode()
    assert b"-0.0" in body

    decision = await consumer.handle(ReceivedOrderMessage(body, message_id=order_id))

    line = next(d for d in store.documents(order_id) if d.get("lineNumber") == 1)
    assert decision.outcome is Outcome.PROCESSED
    assert line["unitPrice"] == "0" and line["lineTotal"] == "0"
