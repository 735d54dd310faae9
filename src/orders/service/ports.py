"""The ports the core depends on. Adapters implement them; unit tests fake them."""

from __future__ import annotations

from typing import Protocol

from orders.domain.documents import OrderRecord, OrderWrite
from orders.domain.outcomes import Decision
from orders.domain.received import ReceivedOrderMessage


class OrderStore(Protocol):
    async def create_order(self, write: OrderWrite) -> None:
        """Write all documents of a new order atomically, order document first.

        Raises `OrderAlreadyExistsError` (carrying the stored record) when the order id exists,
        `TransientStoreError` when a retry may succeed, `StoreError` otherwise. Returns only
        once the write is durable.
        """
        ...

    async def read_order(self, order_id: str) -> OrderRecord | None:
        """Point-read an order's record, or None when it does not exist."""
        ...


class MessageSettler(Protocol):
    """Settles the one message being handled (Functions MessageActions or an SDK receiver)."""

    async def complete(self) -> None: ...

    async def abandon(self) -> None: ...

    async def dead_letter(self, *, reason: str, description: str) -> None: ...


class MessageHandler(Protocol):
    """Decides (and performs the store effect) for one message; `OrderConsumer` is the one."""

    async def handle(self, message: ReceivedOrderMessage) -> Decision: ...
