"""docs/new-consumer.md's worked example, a consumer written with the core's `@exactly_once` and
`inbox`, decided by its own door (`decide_message`, as the hosts call it) on our Cosmos emulator
through the real SDK: once per message, a redelivery a duplicate, a bad body dead-lettered with
the app's reason, a value body dead-lettered unparsed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from new_consumer_doc import accepted_event, documented_notifications
from sdk_messages import received_message
from servers import CosmosServer

from exactly_once import CosmosStore, ExactlyOnceConsumer
from orders.domain.events import OrderCancelled
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


def notifications(container: ContainerProxy) -> ExactlyOnceConsumer[object]:
    """The worked example of docs/new-consumer.md, over `container`."""
    store = CosmosStore(container, partition_key_field="orderId")
    consumer = documented_notifications(store, DEFAULT_RECORD_RETENTION)
    assert isinstance(consumer, ExactlyOnceConsumer)  # a door of its own, as the hosts take it
    return consumer


async def test_an_event_is_recorded_once_and_its_redelivery_is_a_duplicate(
    inbox: ContainerProxy,
) -> None:
    consumer = notifications(inbox)
    event = accepted_event(f"o-{uuid.uuid4().hex[:8]}")

    first = await consumer.decide_message(received_message(event.event_id, data=event.body()))
    again = await consumer.decide_message(
        received_message(event.event_id, data=event.body(), delivery_count=1)
    )

    assert (first.outcome.value, first.settlement.value) == ("processed", "complete")
    assert (again.outcome.value, again.settlement.value) == ("duplicate", "complete")
    stored = await inbox.read_item(f"notification:{event.order_id}", event.order_id)
    assert (stored["type"], stored["eventId"]) == ("notification", event.event_id)


async def test_a_cancel_is_completed_without_a_notification(inbox: ContainerProxy) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    cancel = OrderCancelled.of(order_id, cancelled_at=datetime.now(UTC), reason=None)

    decision = await notifications(inbox).decide_message(
        received_message(cancel.event_id, data=cancel.body())
    )

    assert decision.settlement.value == "complete"
    found = [item async for item in inbox.query_items("SELECT * FROM c", partition_key=order_id)]
    assert [item for item in found if item.get("type") == "notification"] == []


async def test_a_body_that_is_no_order_event_is_dead_lettered_with_the_apps_reason(
    inbox: ContainerProxy,
) -> None:
    message = received_message("m-bad", data=b'{"eventType": "OrderAccepted"}')

    decision = await notifications(inbox).decide_message(message)

    assert (decision.outcome.value, decision.settlement.value) == ("rejected", "dead_letter")
    assert decision.dead_letter_reason == "SchemaViolation"


async def test_a_value_body_is_dead_lettered_without_parsing(inbox: ContainerProxy) -> None:
    event = accepted_event("o-value")

    decision = await notifications(inbox).decide_message(
        received_message(event.event_id, value=event.body())
    )

    assert decision.settlement.value == "dead_letter"
    assert decision.dead_letter_reason == "UnsupportedBodyType"
