"""The saga's races on the real Cosmos adapter and our emulator: cancel against ship decided
by the order document's ETag, whoever commits first wins and the loser sees it.

Many orders, each raced by a cancel and a shipping delivery started together: for every order
exactly one side wins, the other reads the winner, and no order is both cancelled and shipped.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from enum import StrEnum

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from fakes import LAYOUT, new_write
from servers import CosmosServer

from exactly_once.decisions import Outcome
from exactly_once.exceptions import RecordChangedError
from orders.adapters.cosmos_client import order_partitioned_store
from orders.domain.events import OrderAccepted
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.received import ReceivedOrderMessage
from orders.domain.saga import Fulfilment
from orders.service.saga import CancelResult, OrderSaga
from orders.service.shipping import ShippingConsumer

ORDERS = 40


@pytest.fixture
async def containers(python_cosmos: CosmosServer) -> AsyncIterator[dict[str, ContainerProxy]]:
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        database = await client.create_database_if_not_exists("saga-races")
        suffix = uuid.uuid4().hex[:8]
        yield {
            name: await database.create_container_if_not_exists(
                id=f"{name}-{suffix}", partition_key=PartitionKey(path="/orderId"), default_ttl=-1
            )
            for name in ("orders", "inbox")
        }


def accepted_message(order_id: str) -> ReceivedOrderMessage:
    """The event the dispatcher publishes for the order `new_write(order_id)` stores."""
    write = new_write(order_id)
    event = OrderAccepted.model_validate(write[1]["event"])
    return ReceivedOrderMessage(body=event.body(), message_id=event.event_id)


async def test_cancel_racing_ship_has_one_winner_per_order_and_the_loser_sees_it(
    containers: dict[str, ContainerProxy],
) -> None:
    orders = order_partitioned_store(containers["orders"])
    inbox = order_partitioned_store(containers["inbox"])
    order_ids = [f"race-{uuid.uuid4().hex[:10]}" for _ in range(ORDERS)]
    for order_id in order_ids:
        await orders.create_all(order_id, new_write(order_id))
        # Charged, as billing records it: shipping reserves only a charged order.
        await OrderSaga(orders, LAYOUT).record_charge(order_id, f"pay-{order_id}")
    shipping = ShippingConsumer(inbox, OrderSaga(orders, LAYOUT), LAYOUT)

    async def race(order_id: str) -> tuple[CancelResult, StrEnum]:
        start = asyncio.Event()

        async def cancel() -> CancelResult:
            await start.wait()
            return await OrderSaga(orders, LAYOUT).cancel(order_id, None)

        async def ship() -> StrEnum:
            await start.wait()
            return (await shipping.handle(accepted_message(order_id))).outcome

        tasks = (asyncio.create_task(cancel()), asyncio.create_task(ship()))
        start.set()
        return await tasks[0], await tasks[1]

    results = dict(zip(order_ids, await asyncio.gather(*map(race, order_ids)), strict=True))

    for order_id, (cancelled, shipped) in results.items():
        found = await orders.get(order_id, order_id)
        assert found is not None
        read = LAYOUT.saga_order(found.body)
        assert read is not None
        state = read.fulfilment
        shipment = await inbox.get(f"{order_id}:shipment", order_id)
        if cancelled is CancelResult.CANCELLED:
            assert shipped is OrderOutcome.SKIPPED_CANCELLED, order_id
            assert state is Fulfilment.CANCELLED and shipment is None
            assert await orders.get(f"{order_id}:outbox:OrderCancelled", order_id) is not None
        else:
            assert (cancelled, shipped) == (CancelResult.ALREADY_SHIPPED, Outcome.PROCESSED)
            assert state is Fulfilment.SHIPPING and shipment is not None
            assert await orders.get(f"{order_id}:outbox:OrderCancelled", order_id) is None


async def test_a_refused_charge_racing_shipping_ends_the_order_unshipped(
    containers: dict[str, ContainerProxy],
) -> None:
    """Billing's refusal and a shipping delivery started together, per order: shipping waits
    for a charge that never comes and skips the order once it is `payment_failed`; nothing
    ships (the hole: a refused charge, and the order shipped anyway)."""
    orders = order_partitioned_store(containers["orders"])
    inbox = order_partitioned_store(containers["inbox"])
    order_ids = [f"refused-{uuid.uuid4().hex[:10]}" for _ in range(ORDERS // 4)]
    for order_id in order_ids:
        await orders.create_all(order_id, new_write(order_id))
    # Waits far longer than the refusal takes: a deadline, not the synchronisation.
    shipping = ShippingConsumer(inbox, OrderSaga(orders, LAYOUT), LAYOUT, charge_wait_seconds=30)

    async def race(order_id: str) -> StrEnum:
        shipped = asyncio.create_task(shipping.handle(accepted_message(order_id)))
        await OrderSaga(orders, LAYOUT).record_payment_failed(order_id, "card_declined")
        return (await shipped).outcome

    outcomes = await asyncio.gather(*map(race, order_ids))

    assert set(outcomes) == {OrderOutcome.SKIPPED_PAYMENT_FAILED}
    for order_id in order_ids:
        found = await orders.get(order_id, order_id)
        assert found is not None
        read = LAYOUT.saga_order(found.body)
        assert read is not None and read.fulfilment is Fulfilment.PAYMENT_FAILED
        assert await inbox.get(f"{order_id}:shipment", order_id) is None


async def test_a_charge_recorded_after_a_refusal_reopens_the_order_for_shipping(
    containers: dict[str, ContainerProxy],
) -> None:
    """An operator fixed the cause and had the event published again: the charge it makes
    reopens the order, and shipping ships it on that delivery."""
    orders = order_partitioned_store(containers["orders"])
    inbox = order_partitioned_store(containers["inbox"])
    order_id = f"reopened-{uuid.uuid4().hex[:10]}"
    await orders.create_all(order_id, new_write(order_id))
    saga = OrderSaga(orders, LAYOUT)
    await saga.record_payment_failed(order_id, "card_declined")

    reopened = await saga.record_charge(order_id, "pay-1")
    shipped = await ShippingConsumer(inbox, saga, LAYOUT).handle(accepted_message(order_id))

    assert reopened.order.fulfilment is Fulfilment.OPEN and reopened.order.charged
    assert shipped.outcome is Outcome.PROCESSED
    assert await inbox.get(f"{order_id}:shipment", order_id) is not None


async def test_a_cancel_with_a_stale_etag_writes_neither_the_order_nor_its_event(
    containers: dict[str, ContainerProxy],
) -> None:
    """The batch is all or nothing: the If-Match replace failing takes the event with it."""
    orders = order_partitioned_store(containers["orders"])
    order_id = f"stale-{uuid.uuid4().hex[:10]}"
    await orders.create_all(order_id, new_write(order_id))
    found = await orders.get(order_id, order_id)
    assert found is not None
    await orders.replace(
        LAYOUT.shipment_reserved(found.body, "e", datetime.now(UTC)), order_id, etag=found.etag
    )

    with pytest.raises(RecordChangedError):
        await orders.replace_and_create(
            order_id,
            LAYOUT.order_cancelled(found.body, datetime.now(UTC), None),
            etag=found.etag,
            created=[{"id": f"{order_id}:outbox:OrderCancelled", "orderId": order_id}],
        )

    assert await orders.get(f"{order_id}:outbox:OrderCancelled", order_id) is None
    stored = await orders.get(order_id, order_id)
    after = LAYOUT.saga_order(stored.body) if stored is not None else None
    assert after is not None and after.fulfilment is Fulfilment.SHIPPING
