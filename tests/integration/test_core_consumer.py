"""A consumer written with the core's `@exactly_once` and `inbox`, run as the app's hosts run
every consumer (`CoreConsumer`, docs/new-consumer.md), on our Cosmos emulator through the real
SDK: once per message, a redelivery a duplicate, a bad body dead-lettered with the app's reason."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from servers import CosmosServer

from exactly_once import ConsumerOptions, CosmosStore, Decision, Effects, Outcome, exactly_once
from exactly_once.store import JsonMapping
from orders.domain.events import OrderAccepted, OrderCancelled, OrderEvent, parse_order_event_body
from orders.domain.model import OrderPlaced
from orders.domain.received import BodyKind, ReceivedOrderMessage
from orders.service.core_consumer import CoreConsumer, core_parser
from orders.settings import DEFAULT_RECORD_RETENTION


@pytest.fixture
async def inbox(python_cosmos: CosmosServer) -> AsyncIterator[ContainerProxy]:
    """An inbox container as the app's: partitioned by /orderId, ttl on."""
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        database = await client.create_database_if_not_exists(f"core-{uuid.uuid4().hex[:8]}")
        yield await database.create_container_if_not_exists(
            id="inbox", partition_key=PartitionKey(path="/orderId"), default_ttl=-1
        )
        await client.delete_database(database.id)


def notifications(container: ContainerProxy) -> CoreConsumer:
    """The worked example of docs/new-consumer.md, over `container`."""

    @exactly_once(
        consumer="notifications",
        parse=core_parser(parse_order_event_body),
        store=CosmosStore(container, partition_key_field="orderId"),
        options=ConsumerOptions(retention=DEFAULT_RECORD_RETENTION),
    )
    async def notify(event: OrderEvent, effects: Effects) -> Outcome | Decision:
        if not isinstance(event, OrderAccepted):
            return Decision.complete()
        notification: JsonMapping = {
            "id": f"notification:{event.order_id}",
            "type": "notification",
            "eventId": event.event_id,
        }
        return await effects.inbox(partition=event.order_id, documents=[notification])

    return CoreConsumer(notify)


def accepted(order_id: str) -> OrderAccepted:
    order = OrderPlaced.model_validate(
        {
            "orderId": order_id,
            "customerId": "c-1",
            "currency": "EUR",
            "lines": [{"sku": "s", "quantity": 1, "unitPrice": Decimal("12.5")}],
        }
    )
    return OrderAccepted.of(order, total_amount="12.5", accepted_at=datetime.now(UTC))


def delivered(
    event: OrderEvent | None, body: bytes = b"", **fields: object
) -> ReceivedOrderMessage:
    if event is not None:
        body = event.body()
    message_id = event.event_id if event is not None else f"m-{uuid.uuid4().hex[:8]}"
    return ReceivedOrderMessage(body=body, message_id=message_id, **fields)  # type: ignore[arg-type]


async def test_an_event_is_recorded_once_and_its_redelivery_is_a_duplicate(
    inbox: ContainerProxy,
) -> None:
    consumer = notifications(inbox)
    event = accepted(f"o-{uuid.uuid4().hex[:8]}")

    first = await consumer.handle(delivered(event))
    again = await consumer.handle(delivered(event, delivery_count=1))

    assert (first.outcome.value, first.settlement.value) == ("processed", "complete")
    assert (again.outcome.value, again.settlement.value) == ("duplicate", "complete")
    stored = await inbox.read_item(f"notification:{event.order_id}", event.order_id)
    assert (stored["type"], stored["eventId"]) == ("notification", event.event_id)


async def test_a_cancel_is_completed_without_a_notification(inbox: ContainerProxy) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    cancel = OrderCancelled.of(order_id, cancelled_at=datetime.now(UTC), reason=None)

    decision = await notifications(inbox).handle(delivered(cancel))

    assert decision.settlement.value == "complete"
    found = [item async for item in inbox.query_items("SELECT * FROM c", partition_key=order_id)]
    assert [item for item in found if item.get("type") == "notification"] == []


async def test_a_body_that_is_no_order_event_is_dead_lettered_with_the_apps_reason(
    inbox: ContainerProxy,
) -> None:
    decision = await notifications(inbox).handle(delivered(None, b'{"eventType": "OrderAccepted"}'))

    assert (decision.outcome.value, decision.settlement.value) == ("rejected", "dead_letter")
    assert decision.dead_letter_reason == "SchemaViolation"


async def test_a_value_body_is_dead_lettered_without_parsing(inbox: ContainerProxy) -> None:
    message = delivered(accepted("o-value"), body_kind=BodyKind.VALUE)

    decision = await notifications(inbox).handle(message)

    assert decision.settlement.value == "dead_letter"
    assert decision.dead_letter_reason == "UnsupportedBodyType"
