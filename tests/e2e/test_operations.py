"""`orders dlq` and `orders keys` as an operator runs them, against the local stack."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from e2e_support import orders_cli

from orders.adapters.cosmos_client import create_cosmos_client, idempotency_container
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.domain.idempotency import key_claim
from orders.entrypoints.localstack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def dead_letter(stack: LocalStack, message_id: str, body: bytes, reason: str) -> None:
    """Put one message in the dead-letter queue as the consumer would have."""
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client:
        with client.get_queue_sender(stack.queue.name) as sender:
            sender.send_messages(
                ServiceBusMessage(body, message_id=message_id, application_properties={"k": "v"})
            )
        with client.get_queue_receiver(stack.queue.name) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.dead_letter_message(message, reason=reason, error_description="why")


def listed(stack: LocalStack) -> list[dict[str, Any]]:
    result = orders_cli(stack, "dlq", "list", "--json")
    assert result.returncode == 0, result.stderr
    entries: list[dict[str, Any]] = json.loads(result.stdout)
    return entries


def test_dead_letters_are_listed_shown_resubmitted_with_safety_and_purged(
    stack: LocalStack,
) -> None:
    dead_letter(stack, "o-bad-json", b"{oops\n", "InvalidJson")
    dead_letter(stack, "o-reused", b'{"orderId": "o-reused"}', "RequestHashMismatch")
    entries = {entry["messageId"]: entry for entry in listed(stack)}
    bad, reused = entries["o-bad-json"], entries["o-reused"]

    shown = orders_cli(stack, "dlq", "show", str(bad["sequenceNumber"]), "--json")
    assert json.loads(shown.stdout)["body"] == "{oops\n"
    assert bad["reason"] == "InvalidJson" and bad["bodyPreview"] == "{oops\\n"

    # Just sent: inside the broker's window a copy would vanish, so it is kept, and says why.
    # (The stack's own window is 5 s, which a loaded machine can outlast: name a long one.)
    too_soon = orders_cli(
        stack, "dlq", "resubmit", str(bad["sequenceNumber"]), "--duplicate-window", "600"
    )
    # A reused orderId is refused without --force, whatever the window.
    refused = orders_cli(stack, "dlq", "resubmit", "--all", "--duplicate-window", "0")
    assert too_soon.returncode == 1 and "duplicate-detection window" in too_soon.stdout
    assert refused.returncode == 1 and "RequestHashMismatch" in refused.stdout
    assert f"resubmitted 1: [{bad['sequenceNumber']}]" in refused.stdout
    assert [entry["messageId"] for entry in listed(stack)] == ["o-reused"]

    # The copy is on the queue with its original MessageId, properties, and who and when.
    with (
        ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client,
        client.get_queue_receiver(stack.queue.name) as receiver,
    ):
        [copy] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        receiver.complete_message(copy)
    properties: dict[str, Any] = {
        key.decode() if isinstance(key, bytes) else key: value
        for key, value in (copy.application_properties or {}).items()
    }
    assert copy.message_id == "o-bad-json" and b"".join(copy.body) == b"{oops\n"
    assert properties["k"] == b"v" and properties["ResubmitCount"] == 1
    assert b"@" in properties["ResubmittedBy"] and "DeadLetterReason" not in properties

    unconfirmed = orders_cli(stack, "dlq", "purge", "--reason", "RequestHashMismatch")
    assert unconfirmed.returncode == 2 and listed(stack) != []
    purged = orders_cli(stack, "dlq", "purge", "--reason", "RequestHashMismatch", "--yes")
    assert purged.returncode == 0 and f"[{reused['sequenceNumber']}]" in purged.stdout
    assert listed(stack) == []
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client:
        dlq = client.get_queue_receiver(stack.queue.name, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        with dlq:
            assert dlq.peek_messages(max_message_count=5, sequence_number=1) == []


def test_keys_are_shown_and_a_live_claim_is_evicted_only_with_force(stack: LocalStack) -> None:
    settings = stack.settings()
    scope = f"app:{settings.idempotency_scope}"

    async def claim() -> None:
        async with create_cosmos_client(settings) as client:
            store = CosmosIdempotencyStore(idempotency_container(client, settings))
            await store.claim(
                key_claim(
                    scope, "key-1", "o-1", "h", owner="http-1", lease_seconds=600, ttl_seconds=3600
                )
            )

    asyncio.run(claim())

    shown = orders_cli(stack, "keys", "show", "key-1", "--json")
    live = orders_cli(stack, "keys", "evict", "key-1", "--yes")
    forced = orders_cli(stack, "keys", "evict", "key-1", "--yes", "--force")
    gone = orders_cli(stack, "keys", "show", "key-1")

    assert json.loads(shown.stdout)["status"] == "inProgress"
    assert live.returncode == 1 and "in progress" in live.stderr
    assert forced.returncode == 0
    assert gone.returncode == 1
