"""The project's own exceptions; adapters translate SDK errors into these."""

from __future__ import annotations

from orders.domain.documents import OrderRecord


class OrdersError(Exception):
    """Root of every error this package raises on purpose."""


class StoreError(OrdersError):
    """The store failed in a way retrying will not fix (a bug, bad configuration, 4xx)."""


class TransientStoreError(StoreError):
    """The store is throttled, timed out or unreachable: retrying later may succeed."""


class OrderAlreadyExistsError(StoreError):
    """An order with this id is already stored; carries the existing record."""

    def __init__(self, existing: OrderRecord) -> None:
        super().__init__(f"order {existing.order_id!r} already exists")
        self.existing = existing
