"""What `orders dlq` and `orders keys` print, as an operator reads it, against the local stack:
JSON as JSON (no double escaping, no quotes around ids, no Python reprs), times as ISO-8601,
the delivery count explained, and the duplicate window taken from the settings.

One stack for the module (on one xdist worker): each test uses its own MessageIds and keys.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from e2e_support import FAST_QUEUE

from orders.adapters.cosmos_client import (
    create_cosmos_client,
    idempotency_container,
    prepare_local_cosmos,
)
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.domain.idempotency import key_claim
from orders.entrypoints.http_contract import StoredResponse
from orders.entrypoints.localstack import LocalStack, local_stack

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cli_output"), pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with local_stack(FAST_QUEUE, tmp_path_factory.mktemp("cli-output")) as running:
        asyncio.run(prepare_local_cosmos(running.settings()))
        yield running
    assert not [p.name for p in running.processes if p.running], "processes left running"


def cli(stack: LocalStack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`orders ...` as a user runs it (wide terminal, so rich does not fold the table)."""
    return subprocess.run(
        [sys.executable, "-m", "orders", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **stack.environment(), "COLUMNS": "400", **env},
    )


def dead_letter(stack: LocalStack, message_id: str, body: bytes) -> int:
    """One message dead-lettered on its first delivery, as a consumer refusing it would."""
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client:
        with client.get_queue_sender(stack.queue.name) as sender:
            sender.send_messages(
                ServiceBusMessage(
                    body, message_id=message_id, application_properties={"source": "shop"}
                )
            )
        with client.get_queue_receiver(stack.queue.name) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.dead_letter_message(message, reason="SchemaViolation", error_description="x")
            return int(message.sequence_number or 0)


def listed(stack: LocalStack) -> dict[str, dict[str, Any]]:
    result = cli(stack, "dlq", "list", "--json")
    assert result.returncode == 0, result.stderr
    return {entry["messageId"]: entry for entry in json.loads(result.stdout)}


def test_dead_letters_print_bodies_ids_and_properties_as_they_are(stack: LocalStack) -> None:
    message_id = f"o-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"orderId": message_id, "lines": []}).encode()
    sequence = dead_letter(stack, message_id, body)

    entry = listed(stack)[message_id]
    table = cli(stack, "dlq", "list")
    shown = cli(stack, "dlq", "show", str(sequence))

    # The preview is the body's text, not the body JSON-encoded a second time.
    assert entry["bodyPreview"] == body.decode() and entry["deliveryCount"] == 0
    assert body.decode()[:60] in table.stdout
    assert re.search(rf"│ {message_id} +│", table.stdout), "the MessageId as it is, unquoted"
    lines = dict(line.split(": ", 1) for line in shown.stdout.splitlines() if ": " in line)
    assert lines["messageId"] == message_id
    assert json.loads(lines["applicationProperties"])["source"] == "shop"
    assert "first delivery" in lines["deliveryCount"]
    assert datetime.fromisoformat(lines["enqueuedAt"]).tzinfo is not None


def test_resubmit_takes_the_duplicate_window_from_the_settings(stack: LocalStack) -> None:
    message_id = f"o-{uuid.uuid4().hex[:8]}"
    sequence = str(dead_letter(stack, message_id, b'{"orderId": "x"}'))

    # An hour-long window (as `orders env` would export it) keeps the just-sent dead letter.
    # --yes: the earlier tests' dead letters lie before it and are passed over (told, then done).
    kept = cli(stack, "dlq", "resubmit", sequence, "--yes", ORDERS_DUPLICATE_WINDOW_SECONDS="3600")
    # A window that has passed lets it go, with no --duplicate-window on the command line.
    sent = cli(stack, "dlq", "resubmit", sequence, "--yes", ORDERS_DUPLICATE_WINDOW_SECONDS="0")

    assert kept.returncode == 1 and "duplicate-detection window" in kept.stdout
    assert sent.returncode == 0 and f"resubmitted 1: [{sequence}]" in sent.stdout
    assert message_id not in listed(stack)
    with (
        ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client,
        client.get_queue_receiver(stack.queue.name) as receiver,
    ):
        [copy] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        receiver.complete_message(copy)
    assert copy.message_id == message_id


def test_keys_show_prints_json_and_iso_times(stack: LocalStack) -> None:
    settings = stack.settings()
    scope = f"app:{settings.idempotency_scope}"
    key = f"key-{uuid.uuid4().hex[:8]}"
    lease_seconds = 600

    async def claim() -> float:
        async with create_cosmos_client(settings) as client:
            store = CosmosIdempotencyStore(idempotency_container(client, settings))
            claimed = key_claim(
                scope, key, "o-1", "h", owner="http-1", lease_seconds=600, ttl_seconds=3600
            )
            answer = StoredResponse(202, {"orderId": "o-1"}, {"location": "/x"}).to_json()
            stored = await store.claim(replace(claimed, result=answer))
            assert stored.stamp is not None
            # The lease ends by the database's clock: the end of the write's second + 600 s.
            return stored.stamp.written_at_s + 1 + lease_seconds

    lease = asyncio.run(claim())

    text = cli(stack, "keys", "show", key)
    as_json = json.loads(cli(stack, "keys", "show", key, "--json").stdout)

    lines = dict(line.split(": ", 1) for line in text.stdout.splitlines() if ": " in line)
    assert json.loads(lines["response"])["statusCode"] == 202  # JSON, not a Python repr
    assert datetime.fromisoformat(lines["leaseExpiresAt"]).timestamp() == pytest.approx(lease)
    assert datetime.fromisoformat(as_json["leaseExpiresAt"]).timestamp() == pytest.approx(lease)


def test_orders_env_exports_the_window_and_notices_a_stopped_stack(
    stack: LocalStack, tmp_path: Path
) -> None:
    recorded = {**stack.environment(), "ORDERS_DUPLICATE_WINDOW_SECONDS": "5"}
    (tmp_path / "env.json").write_text(json.dumps(recorded))
    running = cli(stack, "env", "--dir", str(tmp_path))
    assert running.returncode == 0, running.stderr
    assert "export ORDERS_DUPLICATE_WINDOW_SECONDS=5" in running.stdout.splitlines()

    # The same file after its stack stopped: a port nobody listens on any more.
    from servers import free_port

    stale = {**recorded, "COSMOS_ENDPOINT": f"http://127.0.0.1:{free_port()}/"}
    (tmp_path / "env.json").write_text(json.dumps(stale))
    stopped = cli(stack, "env", "--dir", str(tmp_path))
    assert stopped.returncode == 2 and stopped.stdout == ""
    assert "stale" in stopped.stderr and "Traceback" not in stopped.stderr
    assert len(stopped.stderr.strip().splitlines()) == 1


def test_orders_show_finds_the_dead_letters_that_name_the_order_and_changes_nothing(
    stack: LocalStack,
) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    dead_letter(stack, order_id, json.dumps({"orderId": order_id, "lines": []}).encode())
    # an event's MessageId is drawn, so its body's orderId names the order
    event_id = f"ev-{uuid.uuid4().hex[:8]}"
    dead_letter(stack, event_id, json.dumps({"orderId": order_id}).encode())
    dead_letter(stack, f"o-{uuid.uuid4().hex[:8]}", b'{"orderId": "someone-else"}')

    as_json = cli(stack, "show", order_id, "--json")
    as_text = cli(stack, "show", order_id)
    malformed = cli(stack, "show", "a/b")

    assert as_json.returncode == 0, as_json.stderr
    shown = json.loads(as_json.stdout)
    assert shown["order"] is None and shown["statusHistory"] == []  # never stored
    assert {d["messageId"] for d in shown["deadLetters"]} == {order_id, event_id}
    assert all(d["source"] == stack.queue.name for d in shown["deadLetters"])
    assert as_text.returncode == 0 and "dead letters naming it (2, peeked)" in as_text.stdout
    assert f"order {order_id}: not stored" in as_text.stdout
    assert malformed.returncode == 2 and "not an order id" in malformed.stderr
    # peeked: nothing was locked, so no delivery count moved
    assert listed(stack)[order_id]["deliveryCount"] == 0
