"""The app's own exceptions: what is about orders, not about the store.

The store's failures and conflicts are the core's, one family for the core and the app
(`exactly_once.exceptions`: `StoreError`, `TransientStoreError`, `StoreRefusedError`,
`RecordChangedError`, `DocumentExistsError`, ...); the Cosmos adapters raise those through the
core's one translation (`exactly_once.cosmos.store_errors`).

What stays here is what the core cannot know: the HTTP intake's idempotency errors, publishing
and the payment service. They sit under the app's own root, `OrdersError`, not under the core's
`ExactlyOnceError`: that root means "raised by the core" (a store, a claim, a lease), and
`decision_for_error` matches the core's classes by kind, so an app failure under it would read
as the core's. A leaf module: it imports nothing of the package at run time.
"""

from __future__ import annotations


class OrdersError(Exception):
    """Root of every error this package raises on purpose."""


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


class PublishError(OrdersError):
    """Sending the order to the queue failed in a way retrying will not fix."""


class TransientPublishError(PublishError):
    """The broker is throttling, busy or unreachable: retrying later may succeed."""


class PublishRefusedError(PublishError):
    """The broker refuses this very message for good (larger than the entity takes): sending
    it again cannot succeed, whatever the broker's state (the outbox dispatcher parks it)."""


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
