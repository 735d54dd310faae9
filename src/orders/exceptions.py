"""The project's own exceptions; adapters translate SDK errors into these.

A leaf module: it imports nothing of the package at run time, so every layer may raise these.
Two families sit under the root: failures (`StoreError`, `PublishError`, `PaymentError`, ...),
and conflict signals (`ConflictSignal`), which are normal outcomes a write reports (the order
exists, the key is taken, the lease moved on). They never share a base below the root, so an
`except StoreError` can never swallow an outcome the caller must decide on.
"""

from __future__ import annotations


class OrdersError(Exception):
    """Root of every error this package raises on purpose."""


class StoreError(OrdersError):
    """The store failed: a bug, bad configuration or a 4xx; see `TransientStoreError`."""


class StoreRefusedError(StoreError):
    """The store refused the request itself for good (a 400 for a value it cannot take, a 413
    for a document too large): no retry of the same write can succeed."""


class TransientStoreError(StoreError):
    """The store is throttled, timed out or unreachable: worth retrying (the broker
    redelivers, a client retries with the same key)."""


class ConflictSignal(OrdersError):
    """A conditional write found the state it guards against; carries what it found."""


# --- HTTP API: idempotency keys, claims and publishing ---------------------------------------


class IdempotencyError(OrdersError):
    """Root of the errors of the idempotent HTTP intake."""


class InvalidIdempotencyKeyError(IdempotencyError):
    """The idempotency key is missing, or not 1..255 printable ASCII characters."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


class InvalidCancelRequestError(IdempotencyError):
    """The body of a cancel request is not `{}` or `{"reason": "..."}`."""


class OrderIdConflictError(IdempotencyError):
    """The orderId was first accepted with a different payload (under any key or caller)."""


class OrderAlreadyShippedError(IdempotencyError):
    """The cancel lost the race: the order's shipment was reserved first."""


class OrderNotStoredYetError(IdempotencyError):
    """The order was accepted but its consumer has not stored it yet: retry in a moment."""

    def __init__(self, order_id: str, retry_after: int = 1) -> None:
        super().__init__(
            f"order {order_id!r} is accepted but not stored yet; retry in {retry_after} s"
        )
        self.retry_after = retry_after


class UnknownOrderError(IdempotencyError):
    """No such order for this caller: never stored, or placed by another principal."""


class LeaseLostError(ConflictSignal):
    """A fenced write failed its ETag condition: another attempt owns the record now."""


class DocumentExistsError(ConflictSignal):
    """A create found the document (an inbox record, a lease) already there: seen before.
    `document_id` names it and `index` is its position in the batch (0 for a single create)."""

    def __init__(self, message: str, *, document_id: str = "", index: int = 0) -> None:
        super().__init__(message)
        self.document_id = document_id
        self.index = index


class PublishError(OrdersError):
    """Sending the order to the queue failed in a way retrying will not fix."""


class TransientPublishError(PublishError):
    """The broker is throttling, busy or unreachable: retrying later may succeed."""


# --- Payment service: a side effect outside the store, made once by a downstream key ---------


class PaymentError(OrdersError):
    """Root of the payment service's failures; the two kinds call for opposite handling."""


class PaymentRefusedError(PaymentError):
    """The provider refused the charge for good (a 4xx such as 422: the key was first used for
    a different charge): retrying the same request cannot succeed."""

    def __init__(self, reason: str, description: str, *, status: int | None = None) -> None:
        super().__init__(f"payment refused ({reason}): {description}")
        self.reason = reason
        self.description = description
        self.status = status


class PaymentUnavailableError(PaymentError):
    """The provider failed, throttled, timed out or was unreachable (5xx, 429, a timeout, a
    connection error): whether it charged is unknown, so retry with the same key."""


class ResubmitUnsupportedError(OrdersError):
    """A subscription's dead letters cannot be resubmitted to that subscription alone."""


class ServiceNotReadyError(OrdersError):
    """The HTTP API could not build its clients (settings, network): nothing was done."""
