"""Helpers of the end-to-end tests (a module of its own: `conftest` names collide)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from azure.cosmos import CosmosClient
from azure.servicebus import ServiceBusMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage
from poison_corpus import PoisonCase

from orders.adapters.cosmos_layout import order_write
from orders.domain.hashing import request_hash
from orders.domain.load_plan import LoadMix, LoadPlan, plan_load
from orders.domain.messages import parse_order
from orders.domain.received import BodyKind
from orders.entrypoints.localstack import LocalStack, ManagedProcess, QueueOptions
from orders.entrypoints.runs import send_load

# Short locks and window so crashes and late duplicates play out in seconds.
FAST_QUEUE = QueueOptions(duplicate_window_seconds=2, lock_seconds=3, max_delivery_count=10)
NO_DUPLICATES = LoadMix(0, 0, 0, 0, 0, 0)


def new_plan(orders: int, mix: LoadMix = NO_DUPLICATES, seed: int = 1) -> LoadPlan:
    return plan_load(orders, mix, seed=seed, run_id=f"e2e{uuid.uuid4().hex[:8]}")


def send(stack: LocalStack, plan: LoadPlan) -> None:
    asyncio.run(
        send_load(
            stack.settings(),
            plan,
            duplicate_window_seconds=stack.queue.duplicate_window_seconds,
        )
    )


def wait_for_decision(
    process: ManagedProcess, within: float = 60.0, **fields: str | None
) -> dict[str, Any]:
    """Poll a worker's decision journal for an entry with these fields, with a deadline."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for decision in process.decisions():
            if all(decision.get(key) == value for key, value in fields.items()):
                return decision
        time.sleep(0.1)
    raise AssertionError(f"{process.name} never decided {fields}: {process.decisions()[-20:]}")


def poll_until(condition: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def orders_cli(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    """The `orders` command as a user runs it, with the stack's settings."""
    return subprocess.run(
        [sys.executable, "-m", "orders", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **stack.environment()},
    )


def to_sdk_message(case: PoisonCase) -> ServiceBusMessage | AmqpAnnotatedMessage:
    # The two message types annotate their application properties differently.
    properties: dict[Any, Any] = {"poisonCase": case.name}
    if case.body_kind is BodyKind.VALUE:
        return AmqpAnnotatedMessage(
            value_body=case.value,
            properties={"message_id": case.message_id},
            application_properties=properties,
        )
    if case.body_kind is BodyKind.SEQUENCE:
        return AmqpAnnotatedMessage(
            sequence_body=case.value,
            properties={"message_id": case.message_id},
            application_properties=properties,
        )
    return ServiceBusMessage(
        case.body, message_id=case.message_id, application_properties=properties
    )


def store_order(
    stack: LocalStack,
    order: dict[str, Any],
    *,
    tamper: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Write what the order consumer writes for `order` (its documents and its outbox event)
    straight into the stack's orders container: an order whose events are genuine (unless
    `tamper` changes each document before it is written). Returns the documents written."""
    placed = parse_order(json.dumps(order).encode())
    write = order_write(
        placed,
        request_hash=request_hash(placed.canonical_payload()),
        message_id=placed.order_id,
        processed_at=datetime.now(UTC),
        owner_scope=None,
    )
    if tamper is not None:
        for document in write:
            tamper(document)
    settings = stack.settings()
    assert settings.cosmos_key is not None  # the local stack's emulator key
    with CosmosClient(settings.cosmos_endpoint, credential=settings.cosmos_key) as client:
        container = client.get_database_client(settings.cosmos_database).get_container_client(
            settings.cosmos_container
        )
        container.execute_item_batch(
            [("create", (document,)) for document in write],
            partition_key=placed.order_id,
        )
    return list(write)


def cosmos_faults_url(stack: LocalStack) -> str:
    """The stack's Cosmos emulator's fault endpoint: the tests post to it here alone."""
    return f"{stack.cosmos_endpoint}_emulator/faults"


def add_cosmos_fault(stack: LocalStack, rule: dict[str, Any]) -> None:
    """Install a fault rule on the stack's Cosmos emulator, with the stack's fault token."""
    httpx.post(
        cosmos_faults_url(stack), json=rule, headers=fault_token_header(stack), timeout=10
    ).raise_for_status()


def fault_token_header(stack: LocalStack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.fault_token}"}


def begin_cosmos_outage(stack: LocalStack) -> None:
    """Every request to the stack's Cosmos account answers 503 until `end_cosmos_outage`."""
    add_cosmos_fault(stack, {"status": 503, "count": 1_000_000})


def end_cosmos_outage(stack: LocalStack) -> None:
    httpx.delete(
        cosmos_faults_url(stack), headers=fault_token_header(stack), timeout=10
    ).raise_for_status()
