"""Who may see and change a stored order: the owner kept on it, never the orderId claim.

The decision (`domain/ownership.py`) as a table; the consumer keeping the message's owner on the
order document (and refusing a malformed one with its rule); and GET's lookup and the cancel
deciding on the stored order's owner, over fakes of the ports.
"""

from __future__ import annotations

import json

import pytest
from fakes import (
    LAYOUT,
    FakeIdempotencyStore,
    FakeOrderReader,
    FakeOrderStore,
    RecordingPublisher,
    new_write,
    order_payload,
)

from exactly_once.decisions import Outcome, Settlement
from orders.domain.idempotency import OrderIdClaim
from orders.domain.messages import DeadLetterReason, MessageRejected, parse_order
from orders.domain.ownership import (
    MAX_OWNER_LENGTH,
    NO_OWNER,
    RecordedOwner,
    StoredOwner,
    UnrecordedOwner,
    may_act,
    message_owner,
    order_owner,
)
from orders.domain.received import ReceivedOrderMessage
from orders.exceptions import OrderNotStoredYetError, UnknownOrderError
from orders.service.consumer import OrderConsumer
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.order_lookup import OrderLookup, OrderState
from orders.service.saga import OrderSaga

ALICE, MALLORY, SHARED = "principal:alice", "principal:mallory", "app:default"
CLAIM_OF_STORED = OrderIdClaim("o-1", "stored-hash", owner_scope=ALICE)
CLAIM_OF_OTHER_PAYLOAD = OrderIdClaim("o-1", "other-hash", owner_scope=MALLORY)


@pytest.mark.parametrize(
    ("stored", "claim", "owner"),
    [
        (RecordedOwner(ALICE), None, ALICE),
        # The recorded owner decides, whatever a claim says (the hole: a claim for a payload
        # that lost the orderId to a queue-sent order).
        (RecordedOwner(ALICE), CLAIM_OF_OTHER_PAYLOAD, ALICE),
        (NO_OWNER, CLAIM_OF_OTHER_PAYLOAD, None),
        (NO_OWNER, OrderIdClaim("o-1", "stored-hash", owner_scope=MALLORY), None),
        # Stored before owners were recorded: the claim stands in only for the stored payload.
        (UnrecordedOwner("stored-hash"), CLAIM_OF_STORED, ALICE),
        (UnrecordedOwner("stored-hash"), CLAIM_OF_OTHER_PAYLOAD, None),
        (UnrecordedOwner("stored-hash"), None, None),
        (UnrecordedOwner("stored-hash"), OrderIdClaim("o-1", "stored-hash"), None),
    ],
)
def test_the_owner_is_the_stored_orders(
    stored: StoredOwner, claim: OrderIdClaim | None, owner: str | None
) -> None:
    assert order_owner(stored, claim) == owner
    for caller in (ALICE, MALLORY, SHARED):
        assert may_act(caller, stored, claim) is (caller == owner)


@pytest.mark.parametrize("value", [None, ALICE, SHARED, "app:x y", "principal:" + "a" * 246])
def test_a_message_owner_is_a_caller_scope_or_absent(value: str | None) -> None:
    assert message_owner(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "alice",  # no scheme: it would never match a caller
        "principal:",
        "app: x",
        "app:x ",
        "app:a\nb",
        "app:\x85",
        "principal:" + "a" * (MAX_OWNER_LENGTH - 9),
        b"principal:alice",  # undecodable bytes reach the domain as bytes
        7,
    ],
)
def test_a_malformed_message_owner_is_refused_with_the_rule(value: object) -> None:
    with pytest.raises(MessageRejected, match="orderOwner: must be a caller scope") as refused:
        message_owner(value)
    assert refused.value.reason is DeadLetterReason.SCHEMA_VIOLATION


def message(order_id: str, owner: object = None, **overrides: object) -> ReceivedOrderMessage:
    body = json.dumps(order_payload(order_id, **overrides)).encode()
    return ReceivedOrderMessage(body, order_id, owner_property=owner)


async def test_the_consumer_keeps_the_messages_owner_on_the_order_document() -> None:
    store = FakeOrderStore()
    consumer = OrderConsumer(store, LAYOUT)

    owned = await consumer.handle(message("o-1", ALICE))
    ownerless = await consumer.handle(message("o-2"))
    # A duplicate naming another owner changes nothing: the first message's owner stays.
    duplicate = await consumer.handle(message("o-1", MALLORY))

    assert owned.outcome is Outcome.PROCESSED and duplicate.outcome is Outcome.DUPLICATE
    assert store.partitions["o-1"]["o-1"]["ownerScope"] == ALICE
    assert ownerless.outcome is Outcome.PROCESSED
    assert store.partitions["o-2"]["o-2"]["ownerScope"] is None


async def test_a_malformed_owner_is_dead_lettered_and_filed_never_stored_ownerless() -> None:
    store = FakeOrderStore()

    decision = await OrderConsumer(store, LAYOUT).handle(message("o-1", "alice"))

    assert (decision.outcome, decision.settlement) == (Outcome.REJECTED, Settlement.DEAD_LETTER)
    assert decision.dead_letter_reason == "SchemaViolation"
    assert "orderOwner" in (decision.dead_letter_description or "")
    assert "o-1" not in store.order_ids()
    [rejection] = store.documents("o-1")  # filed for GET, under the MessageId
    assert rejection["type"] == "orderRejection"


class Stack:
    """The intake and the lookup over one set of fakes, as the HTTP runtime wires them."""

    def __init__(self) -> None:
        self.orders = FakeOrderStore()
        self.keys = FakeIdempotencyStore()
        self.publisher = RecordingPublisher()
        self.intake = IdempotentOrderIntake(
            self.keys,
            self.publisher,
            status=self.publisher,
            saga=OrderSaga(self.orders, LAYOUT),
            ttl_seconds=600,
        )
        self.lookup = OrderLookup(FakeOrderReader(self.orders), self.keys, LAYOUT)

    async def place(self, scope: str, order_id: str, **overrides: object) -> None:
        # What the route runs once the core's dependency has claimed the key.
        await self.intake.place(
            scope, parse_order(json.dumps(order_payload(order_id, **overrides)).encode())
        )

    async def cancel(self, scope: str, order_id: str) -> None:
        await self.intake.cancel(scope, order_id, None)

    def cancelled(self, order_id: str) -> bool:
        return "fulfilment" in self.orders.partitions[order_id][order_id]


@pytest.mark.parametrize("caller", [MALLORY, SHARED])
async def test_a_claim_for_a_payload_that_lost_the_order_id_owns_nothing(caller: str) -> None:
    # Given alice's order, sent straight to the queue and stored
    stack = Stack()
    await stack.orders.create_all("o-1", new_write("o-1", owner_scope=ALICE))

    # When another caller places another payload under its orderId (202: the API had no claim)
    await stack.place(caller, "o-1", currency="USD")

    # Then the claim gives that caller neither the order's view nor its cancel
    assert (await stack.lookup.find(caller, "o-1")).state is OrderState.UNKNOWN
    with pytest.raises(UnknownOrderError):
        await stack.cancel(caller, "o-1")
    assert not stack.cancelled("o-1") and stack.publisher.statuses == []
    assert (await stack.lookup.find(ALICE, "o-1")).state is OrderState.STORED
    await stack.cancel(ALICE, "o-1")
    assert stack.cancelled("o-1")


async def test_get_and_cancel_agree_for_every_caller_in_the_shared_scope() -> None:
    """Without principals every caller is `app:<scope>`: an order it owns is shown (never
    `rejected`) and cancelled; one with no owner is neither."""
    stack = Stack()
    await stack.orders.create_all("o-shared", new_write("o-shared", owner_scope=SHARED))
    await stack.orders.create_all("o-nobody", new_write("o-nobody", owner_scope=None))
    for order_id in ("o-shared", "o-nobody"):
        await stack.place(SHARED, order_id, currency="USD")  # a payload that will be rejected

    shown = await stack.lookup.find(SHARED, "o-shared")
    await stack.cancel(SHARED, "o-shared")
    hidden = await stack.lookup.find(SHARED, "o-nobody")
    with pytest.raises(UnknownOrderError):
        await stack.cancel(SHARED, "o-nobody")

    assert shown.state is OrderState.STORED and shown.body is not None
    assert shown.body["currency"] == "EUR"  # the stored order, the one the cancel cancelled
    assert stack.cancelled("o-shared")
    assert hidden.state is OrderState.UNKNOWN and not stack.cancelled("o-nobody")


async def test_an_order_stored_before_owners_were_recorded_is_its_claims_owners() -> None:
    stack = Stack()
    await stack.place(ALICE, "o-1")
    legacy = new_write("o-1", owner_scope=ALICE)
    del legacy[0]["ownerScope"]  # as written before this field existed
    await stack.orders.create_all("o-1", legacy)
    queue_legacy = new_write("o-2", owner_scope=None)
    del queue_legacy[0]["ownerScope"]  # sent straight to the queue, no claim
    await stack.orders.create_all("o-2", queue_legacy)

    assert (await stack.lookup.find(MALLORY, "o-1")).state is OrderState.UNKNOWN
    assert (await stack.lookup.find(ALICE, "o-1")).state is OrderState.STORED
    assert (await stack.lookup.find(ALICE, "o-2")).state is OrderState.UNKNOWN
    with pytest.raises(UnknownOrderError):
        await stack.cancel(ALICE, "o-2")
    await stack.cancel(ALICE, "o-1")
    assert stack.cancelled("o-1") and not stack.cancelled("o-2")


async def test_the_api_publishes_the_first_claimants_scope_as_the_owner() -> None:
    stack = Stack()
    await stack.place(ALICE, "o-1")
    await stack.place(MALLORY, "o-1")  # the same payload: the same order, still alice's

    assert [order.order_id for order in stack.publisher.published] == ["o-1", "o-1"]
    assert stack.publisher.owners["o-1"] == ALICE
    with pytest.raises(OrderNotStoredYetError):  # alice's, not stored yet
        await stack.cancel(ALICE, "o-1")
    with pytest.raises(UnknownOrderError):
        await stack.cancel(MALLORY, "o-1")
