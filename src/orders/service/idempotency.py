"""The idempotent order intake: what placing or cancelling an order does once its
`Idempotency-Key` is claimed.

The key's claim is the `exactly_once` core's, made by its FastAPI dependency in the HTTP
entrypoint (`IdempotencyKeys`, over this intake's `records` and with its lease and ttl): the
key's rules, the body limit, the claim state machine with leases judged by the database's
clock, the recorded answer and its replay, and every refusal as a problem. What is left here is
about orders: an orderId is claimed across every key and caller with the core's
create-or-compare (the store's `claim_order_id`), so a different payload under a taken orderId is
refused before anything is published; a cancel is decided on the order document (`OrderSaga`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from exactly_once import PayloadMismatchError
from exactly_once.options import DEFAULT_LEASE_SECONDS
from orders.domain.idempotency import OrderIdClaim, core_store_errors, order_request_hash
from orders.domain.model import OrderPlaced
from orders.domain.ownership import may_act
from orders.domain.saga import SagaOrder
from orders.domain.status import OrderStatus, OrderStatusChanged
from orders.exceptions import (
    OrderAlreadyShippedError,
    OrderIdConflictError,
    OrderNotStoredYetError,
    PublishError,
    UnknownOrderError,
)
from orders.observability import log_value
from orders.service.ports import IdempotencyStore, OrderPublisher, StatusPublisher
from orders.service.saga import CancelResult, OrderSaga

logger = logging.getLogger("orders.http")

# An in-progress claim normally completes within milliseconds: ask for a quick retry.
DEFAULT_RETRY_AFTER_CAP = 1


class IdempotentOrderIntake:
    """Places and cancels orders; `records`, `ttl_seconds`, `lease_seconds` and
    `retry_after_cap` are what the entrypoint's key claims run with."""

    def __init__(
        self,
        store: IdempotencyStore,
        publisher: OrderPublisher,
        *,
        status: StatusPublisher | None = None,
        saga: OrderSaga | None = None,
        ttl_seconds: int,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        retry_after_cap: int = DEFAULT_RETRY_AFTER_CAP,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.records = store
        self._publisher = publisher
        self._status = status
        self._saga = saga
        self.ttl_seconds = ttl_seconds
        self.lease_seconds = lease_seconds
        self.retry_after_cap = retry_after_cap
        # Dates the cancel's status update; leases are judged by the database's clock alone.
        self._clock = clock

    async def place(self, scope: str, order: OrderPlaced) -> None:
        """Publish `order` for `scope`, once its orderId is claimed for this payload.

        The same payload under another key (or from another caller) passes: it is the same
        order, published again and deduplicated downstream, and still owned by the first (a
        claim from before owners were recorded names none: then the caller)."""
        owner = await self._claim_order_id(order, scope)
        await self._publisher.publish(order, owner)

    async def cancel(self, scope: str, order_id: str, reason: str | None) -> None:
        """Cancel the order, deciding now on the order document.

        Only the stored order's owner may cancel it (`domain/ownership.py`); anyone else is told
        `UnknownOrderError`, as for an order that does not exist, and nothing is written. The
        check is made on the document the cancel replaces, never on the orderId claim: a
        caller whose own payload lost the orderId to another order owns nothing under it. Until
        the order is stored, the caller whose claim placed it is told `OrderNotStoredYetError`.
        The cancel and its `OrderCancelled` event commit in one batch unless the shipment was
        reserved first (`OrderAlreadyShippedError`); a cancel of an order already cancelled
        (under any key) answers the same. Billing refunds a charge when it handles the event;
        the `cancelled` status update is sent here for a prompt GET and again by billing,
        durably.
        """
        if self._saga is None or self._status is None:
            raise RuntimeError("the intake was built without the saga or a status publisher")
        with core_store_errors():
            claim = await self.records.read_order_id_claim(order_id)

        def owned(order: SagaOrder) -> bool:
            return may_act(scope, order.owner, claim)

        match await self._saga.cancel(order_id, reason, may_cancel=owned):
            case CancelResult.ALREADY_SHIPPED:
                raise OrderAlreadyShippedError(
                    f"order {order_id!r} has shipped (its shipment was reserved before "
                    "this cancel); it can no longer be cancelled"
                )
            case CancelResult.NOT_STORED if claim is not None and claim.owner_scope == scope:
                raise OrderNotStoredYetError(order_id)
            case CancelResult.NOT_STORED | CancelResult.NOT_OWNED:
                raise UnknownOrderError(f"no order {order_id!r} is known")
        change = OrderStatusChanged.of(
            order_id,
            OrderStatus.CANCELLED,
            changed_at=datetime.fromtimestamp(self._clock(), UTC),
            reason=reason,
        )
        try:
            await self._status.publish_status(change)
        except PublishError:
            # The cancel is committed; billing publishes the same update from its event.
            logger.warning(
                "cancel of %s: status update not sent now; billing sends it",
                log_value(order_id),
                exc_info=True,
            )

    async def _claim_order_id(self, order: OrderPlaced, scope: str) -> str:
        """Refuse an orderId taken by a different payload, before anything is published; return
        the scope the order is published as owned by (the first claimant's)."""
        claim = OrderIdClaim(order.order_id, order_request_hash(order), owner_scope=scope)
        try:
            with core_store_errors():
                first = await self.records.claim_order_id(claim)
        except PayloadMismatchError:
            raise OrderIdConflictError(
                f"orderId {order.order_id!r} was already accepted with a different payload; "
                "choose a new orderId for a different order"
            ) from None
        return scope if first is None or first.owner_scope is None else first.owner_scope
