"""Helpers of the core's tests (a module of its own: every test folder has a `conftest`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from exactly_once import CosmosStore, Record
from exactly_once.records import lease_is_live

QUEUE = "greetings"


def queue_config(name: str = QUEUE, *, max_delivery_count: int = 10) -> dict[str, Any]:
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
                                "LockDuration": "PT30S",
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
