"""The poison corpus through a real `orders worker` process on our emulators.

Every poison message must be dead-lettered on its FIRST delivery with its expected reason, and
every valid order sent between them must be stored: one bad message never stalls a worker,
loops, or takes its neighbours down with it.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from azure.cosmos import CosmosClient
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from e2e_support import poll_until, to_sdk_message
from poison_corpus import poison_cases, valid_order_body

from orders.entrypoints.localstack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# Service Bus Standard refuses messages over 256 KB at the sender; those cases are covered at
# the Functions and HTTP entry points instead.
SENDER_LIMIT_BYTES = 250 * 1024


def dead_letters(stack: LocalStack) -> list[Any]:
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client:
        receiver = client.get_queue_receiver(
            stack.queue.name, sub_queue=ServiceBusSubQueue.DEAD_LETTER
        )
        with receiver:
            return list(receiver.peek_messages(max_message_count=500, sequence_number=1))


def stored_order_ids(stack: LocalStack, prefix: str) -> set[str]:
    settings = stack.settings()
    assert settings.cosmos_key is not None  # the local stack runs on emulator keys
    with CosmosClient(stack.cosmos_endpoint, credential=settings.cosmos_key) as client:
        container = client.get_database_client("orders").get_container_client("orders")
        return {
            item["orderId"]
            for item in container.query_items(
                "SELECT c.orderId FROM c WHERE c.type = 'order' AND STARTSWITH(c.orderId, @p)",
                parameters=[{"name": "@p", "value": prefix}],
                enable_cross_partition_query=True,
            )
        }


def test_every_poison_message_is_dead_lettered_on_first_delivery_and_valid_orders_flow(
    stack: LocalStack,
) -> None:
    run = f"poison{uuid.uuid4().hex[:6]}"
    cases = [c for c in poison_cases(run) if len(c.body) < SENDER_LIMIT_BYTES]
    valid_ids = [f"{run}-ok-{number:03d}" for number in range(len(cases))]
    connection = stack.servicebus_connection_string
    with (
        ServiceBusClient.from_connection_string(connection) as client,
        client.get_queue_sender(stack.queue.name) as sender,
    ):
        for case, valid_id in zip(cases, valid_ids, strict=True):
            sender.send_messages(to_sdk_message(case))
            sender.send_messages(ServiceBusMessage(valid_order_body(valid_id), message_id=valid_id))
    worker = stack.start_worker(concurrency=4)

    poll_until(
        lambda: len(dead_letters(stack)) >= len(cases), 120, "every poison message in the DLQ"
    )
    poll_until(lambda: stored_order_ids(stack, f"{run}-ok-") == set(valid_ids), 60, "valid orders")

    by_case = {m.application_properties[b"poisonCase"].decode(): m for m in dead_letters(stack)}
    for case in cases:
        assert by_case[case.name].dead_letter_reason == case.reason, case.name
    assert len(by_case) == len(cases) >= 40
    # One decision per message sent: nothing was abandoned, redelivered or handled twice.
    decided = [(d["outcome"], d["settlement"]) for d in worker.decisions()]
    assert len(decided) == 2 * len(cases)
    assert decided.count(("processed", "complete")) == len(cases)
    assert decided.count(("rejected", "dead_letter")) == len(cases)
    log = worker.log()
    # Untrusted ids are escaped: a MessageId with a newline forges no log line.
    assert not re.search(r"^INFO forged", log, re.MULTILINE)
    assert '"' + f"{run}-m00\\nINFO forged outcome=processed" + '"' in log
    assert worker.running
