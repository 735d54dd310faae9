"""Fakes of our own ports, honouring the same contract as the real adapters.

`FakeOrderStore` is atomic per create (all documents or none) and answers "already exists"
with the stored record, exactly like the Cosmos adapter; it is for fast unit tests of decisions.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orders.domain.documents import OrderRecord, OrderWrite, build_order_write
from orders.domain.hashing import request_hash
from orders.domain.messages import parse_order
from orders.exceptions import OrderAlreadyExistsError, StoreError


class FakeOrderStore:
    def __init__(self) -> None:
        self.partitions: dict[str, dict[str, dict[str, Any]]] = {}
        self.create_calls = 0
        self.read_calls = 0
        self._failures: list[BaseException] = []

    def fail_next(self, error: BaseException, times: int = 1) -> None:
        self._failures.extend([error] * times)

    def seed_document(self, partition_key: str, document: dict[str, Any]) -> None:
        self.partitions.setdefault(partition_key, {})[document["id"]] = copy.deepcopy(document)

    def documents(self, partition_key: str) -> list[dict[str, Any]]:
        return list(self.partitions.get(partition_key, {}).values())

    def order_ids(self) -> list[str]:
        return [pk for pk, docs in self.partitions.items() if pk in docs]

    async def create_order(self, write: OrderWrite) -> None:
        self.create_calls += 1
        await asyncio.sleep(0)  # let concurrent deliveries interleave before the atomic step
        if self._failures:
            raise self._failures.pop(0)
        partition = self.partitions.setdefault(write.order_id, {})
        for index, document in enumerate(write.documents):
            if document["id"] in partition:
                if index == 0:
                    existing = await self.read_order(write.order_id)
                    assert existing is not None
                    raise OrderAlreadyExistsError(existing)
                raise StoreError(f"batch operation {index} conflicted: nothing was written")
        for document in write.documents:  # no await in between: the batch is atomic
            partition[document["id"]] = copy.deepcopy(document)

    async def read_order(self, order_id: str) -> OrderRecord | None:
        self.read_calls += 1
        document = self.partitions.get(order_id, {}).get(order_id)
        if document is None:
            return None
        return OrderRecord(
            order_id=document["orderId"],
            request_hash=document["requestHash"],
            message_id=document.get("messageId"),
        )


@dataclass
class RecordingSettler:
    """A `MessageSettler` that remembers the one settlement it was asked for."""

    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    async def complete(self) -> None:
        self.calls.append(("complete", {}))

    async def abandon(self) -> None:
        self.calls.append(("abandon", {}))

    async def dead_letter(self, *, reason: str, description: str) -> None:
        self.calls.append(("dead_letter", {"reason": reason, "description": description}))


@dataclass
class FakeMessageActions:
    """Stands in for the Functions host's `ServiceBusMessageActions` (gRPC, host-only)."""

    calls: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)

    def complete(self, message: Any) -> None:
        self.calls.append(("complete", message, {}))

    def abandon(self, message: Any) -> None:
        self.calls.append(("abandon", message, {}))

    def deadletter(
        self, message: Any, *, deadletter_reason: str, deadletter_error_description: str
    ) -> None:
        self.calls.append(
            (
                "deadletter",
                message,
                {
                    "deadletter_reason": deadletter_reason,
                    "deadletter_error_description": deadletter_error_description,
                },
            )
        )


def order_payload(order_id: str, **overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "orderId": order_id,
        "customerId": "customer-1",
        "currency": "EUR",
        "lines": [
            {"sku": "sku-apple", "quantity": 2, "unitPrice": 1.25},
            {"sku": "sku-pear", "quantity": 1, "unitPrice": 3},
        ],
    }
    payload.update(overrides)
    return payload


def new_write(order_id: str, **overrides: Any) -> OrderWrite:
    """The store write the consumer would make for `order_payload(order_id, **overrides)`."""
    order = parse_order(json.dumps(order_payload(order_id, **overrides)).encode())
    return build_order_write(
        order,
        request_hash=request_hash(order.canonical_payload()),
        message_id=order_id,
        processed_at=datetime.now(UTC),
    )
