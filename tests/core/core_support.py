"""Helpers of the core's tests (a module of its own: every test folder has a `conftest`)."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

from exactly_once import CosmosStore
from exactly_once._records import lease_is_live
from exactly_once.store import Record
from exactly_once.worker import WorkerStats, run_worker
from servicebus_emulator import RunningEmulator

QUEUE = "greetings"
GUIDE = Path(__file__).resolve().parents[2] / "packages/exactly-once/src/exactly_once/README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def guide_blocks() -> list[str]:
    """The guide's ```python blocks, in order."""
    return BLOCK.findall(GUIDE.read_text())


def run_guide(namespace: dict[str, Any]) -> None:
    """Every block, in order, in `namespace`, compiled as a reader's module would be: without
    this file's `from __future__ import annotations` (which `compile` would otherwise pass on,
    turning the guide's annotations into strings a reader's module never has)."""
    for number, block in enumerate(guide_blocks(), start=1):
        code = compile(block, f"{GUIDE.name} python block {number}", "exec", dont_inherit=True)
        exec(code, namespace)


def queue_config(
    name: str = QUEUE, *, max_delivery_count: int = 10, lock_duration: str = "PT30S"
) -> dict[str, Any]:
    """One queue without duplicate detection: a resend reaches the consumer, as it would after
    the broker's window, so the consumer's own idempotency is what the tests see."""
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [
                        {
                            "Name": name,
                            "Properties": {
                                "DeadLetteringOnMessageExpiration": True,
                                "DefaultMessageTimeToLive": "PT1H",
                                "LockDuration": lock_duration,
                                "MaxDeliveryCount": max_delivery_count,
                                "RequiresDuplicateDetection": False,
                                "RequiresSession": False,
                            },
                        }
                    ],
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "Console"},
        }
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def lease_ended(store: CosmosStore, record: Record, within: float = 10.0) -> Record:
    """Poll (with a deadline) until the database's clock says the record's lease has ended."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await store.read(record.key, record.partition)
        assert found.record is not None
        if not lease_is_live(found.record, found.database_now_ms):
            return found.record
        await asyncio.sleep(0.1)  # polling the database's clock, bounded by the deadline
    raise AssertionError(f"the lease of {record.key} did not end within {within} s")


async def send_bodies(servicebus: RunningEmulator, queue: str, bodies: dict[str, str]) -> None:
    """Send each body under its MessageId (the dict's key)."""
    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_sender(queue) as sender,
    ):
        for message_id, body in bodies.items():
            await sender.send_messages(ServiceBusMessage(body, message_id=message_id))


async def dead_letters(servicebus: RunningEmulator, queue: str) -> list[ServiceBusReceivedMessage]:
    """What `queue`'s dead-letter queue holds (peeked from the start)."""
    async with (
        ServiceBusClient.from_connection_string(servicebus.connection_string) as client,
        client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver,
    ):
        return list(await receiver.peek_messages(max_message_count=100, sequence_number=1))


async def poll(check: Any, *, within: float, what: str) -> None:
    """Poll an async check with a deadline (the worker runs beside this test's loop)."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within} s")
        await asyncio.sleep(0.2)  # a poll with a deadline, not a synchronisation by sleep


class RunningWorker:
    """`run_worker` on its own task, over a client this test opens and closes; `entity` names
    the queue (or topic and subscription) and any other keyword of `run_worker`."""

    def __init__(self, servicebus: RunningEmulator, handle: Any, **entity: Any) -> None:
        self.stop = asyncio.Event()
        self._client = ServiceBusClient.from_connection_string(servicebus.connection_string)
        self._task = asyncio.create_task(
            run_worker(self._client, handle=handle, stop=self.stop, **entity)
        )

    async def stopped(self) -> WorkerStats:
        self.stop.set()
        try:
            return await self._task
        finally:
            await self._client.close()
