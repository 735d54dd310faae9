"""A poison outbox document through a real `orders dispatcher` process, on both emulators: it is
parked with its reason (an ERROR line, the document marked) while the documents behind it in
its feed range are published, `orders outbox parked` lists it, and once the operator fixed it,
`orders outbox redrive` has it published."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from azure.cosmos import CosmosClient
from azure.servicebus import ServiceBusClient
from e2e_support import orders_cli, poll_until, store_order
from poison_corpus import valid_event_document, valid_order_document

from orders.entrypoints.localstack import LocalStack
from orders.service.dispatcher import ParkReason

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def outbox_documents(stack: LocalStack, order_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each order's outbox document as stored now, by orderId."""
    settings = stack.settings()
    assert settings.cosmos_key is not None
    with CosmosClient(settings.cosmos_endpoint, credential=settings.cosmos_key) as client:
        container = client.get_database_client(settings.cosmos_database).get_container_client(
            settings.cosmos_container
        )
        return {
            order_id: document
            for order_id in order_ids
            for document in container.query_items(
                "SELECT * FROM c WHERE c.type = 'outbox'", partition_key=order_id
            )
        }


def replace(stack: LocalStack, document: dict[str, Any]) -> None:
    settings = stack.settings()
    assert settings.cosmos_key is not None
    with CosmosClient(settings.cosmos_endpoint, credential=settings.cosmos_key) as client:
        client.get_database_client(settings.cosmos_database).get_container_client(
            settings.cosmos_container
        ).replace_item(document["id"], document)


def published_message_ids(stack: LocalStack) -> list[str]:
    """What the shipping subscription of the events topic holds (no consumer runs)."""
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client:
        receiver = client.get_subscription_receiver(stack.queue.events_topic, "shipping")
        with receiver:
            peeked = receiver.peek_messages(max_message_count=50, sequence_number=1)
            return [str(message.message_id) for message in peeked]


def test_a_poison_outbox_document_is_parked_while_the_others_flow(stack: LocalStack) -> None:
    run = f"po{uuid.uuid4().hex[:6]}"
    poison, valid = f"{run}-poison", [f"{run}-ok{n}" for n in range(3)]

    def unreadable(document: dict[str, Any]) -> None:
        # An event this dispatcher cannot read (as one written by a newer release would be).
        if document.get("type") == "outbox":
            document["event"]["eventType"] = "OrderTeleported"

    # The poison first: the documents behind it in its feed range must not wait for it.
    store_order(stack, valid_order_document(poison), tamper=unreadable)
    for order_id in valid:
        store_order(stack, valid_order_document(order_id))
    dispatcher = stack.start_dispatcher()

    poll_until(
        lambda: all(d.get("dispatched") for d in outbox_documents(stack, valid).values()),
        60,
        "the valid outbox documents to be published and marked",
    )
    poll_until(
        lambda: "parked" in outbox_documents(stack, [poison])[poison],
        30,
        "the poison to be parked",
    )
    stored = outbox_documents(stack, [poison, *valid])
    parked = stored[poison]
    assert parked["dispatched"] is False
    assert parked["parked"]["reason"] == ParkReason.UNREADABLE.value
    assert parked["parked"]["attempts"] == 1
    assert "OrderTeleported" in parked["parked"]["description"]
    # Published: each valid event once, under its stored MessageId; the poison never.
    assert sorted(published_message_ids(stack)) == sorted(stored[o]["messageId"] for o in valid)
    alert = [line for line in dispatcher.log().splitlines() if "parked after" in line]
    assert len(alert) == 1 and "ERROR" in alert[0] and poison in alert[0], alert

    listed = orders_cli(stack, "outbox", "parked", "--json")
    assert listed.returncode == 0, listed.stderr
    [shown] = json.loads(listed.stdout)
    assert (shown["orderId"], shown["id"]) == (poison, parked["id"])
    assert shown["parked"]["reason"] == "UnreadableOutboxDocument"

    # The operator fixes the event (still parked: the dispatcher leaves it alone) and re-drives.
    parked["event"] = valid_event_document(poison)
    replace(stack, parked)
    redriven = orders_cli(stack, "outbox", "redrive", poison, parked["id"])
    assert redriven.returncode == 0, redriven.stderr
    poll_until(
        lambda: bool(outbox_documents(stack, [poison])[poison].get("dispatched")),
        30,
        "the re-driven document to be published",
    )
    assert "parked" not in outbox_documents(stack, [poison])[poison]
    assert parked["messageId"] in published_message_ids(stack)
    assert json.loads(orders_cli(stack, "outbox", "parked", "--json").stdout) == []
    assert orders_cli(stack, "outbox", "redrive", poison, parked["id"]).returncode == 1
    everything = orders_cli(stack, "outbox", "redrive", "--all")
    assert everything.returncode == 0 and "re-driven 0" in everything.stdout
    dispatcher.stop()
