"""The idempotent order intake: claim the key, publish once, store the answer, replay it.

Write first, read only on conflict (as the consumer does): creating the record IS the claim, and
the conflict carries the existing record, so a first request costs two creates (the key's record
and the orderId's claim), one send and one fenced replace, and a replay costs one failed create
plus the read the store does for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from orders.domain.hashing import request_hash
from orders.domain.idempotency import (
    IdempotencyRecord,
    IdempotencyRecordExistsError,
    OrderIdClaim,
    RecordStatus,
    StoredResponse,
    Verdict,
    judge,
    record_id,
    retry_after_seconds,
)
from orders.domain.leases import DEFAULT_LEASE_SECONDS
from orders.domain.model import OrderPlaced
from orders.domain.status import OrderStatus, OrderStatusChanged
from orders.exceptions import (
    IdempotencyKeyReusedError,
    LeaseLostError,
    OrderAlreadyShippedError,
    OrderIdConflictError,
    OrderNotStoredYetError,
    PublishError,
    RequestInProgressError,
    UnknownOrderError,
)
from orders.observability import log_value
from orders.service.ports import IdempotencyStore, OrderPublisher, StatusPublisher
from orders.service.saga import CancelResult, OrderSaga

logger = logging.getLogger("orders.http")

# An in-progress claim normally completes within milliseconds: ask for a quick retry.
DEFAULT_RETRY_AFTER_CAP = 1


@dataclass(frozen=True)
class SubmitResult:
    response: StoredResponse
    replayed: bool
    took_over: bool = False  # a crashed claimant's expired claim was taken over


class IdempotentOrderIntake:
    def __init__(
        self,
        store: IdempotencyStore,
        publisher: OrderPublisher,
        *,
        status: StatusPublisher | None = None,
        saga: OrderSaga | None = None,
        unclaimed_owner: str | None = None,
        ttl_seconds: int,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        retry_after_cap: int = DEFAULT_RETRY_AFTER_CAP,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._status = status
        self._saga = saga
        # Who owns an order the API never accepted (sent straight to the queue): the shared
        # scope of callers when principals are not trusted; no principal ever matches it.
        self._unclaimed_owner = unclaimed_owner
        self._ttl_seconds = ttl_seconds
        self._lease_seconds = lease_seconds
        self._retry_after_cap = retry_after_cap
        self._clock = clock

    async def submit(
        self,
        scope: str,
        key: str,
        order: OrderPlaced,
        first_response: Callable[[OrderPlaced], StoredResponse],
    ) -> SubmitResult:
        """Accept `order` once per (scope, key); raise the error a retry earns.

        `first_response` is the host's answer to a newly accepted order; it is stored and
        replayed verbatim to every retry with the same key.
        """
        incoming_hash = request_hash(order.canonical_payload())

        async def accept(owned: IdempotencyRecord) -> None:
            await self._claim_order_id(order, incoming_hash, scope)
            await self._publisher.publish(order)

        return await self._once(
            scope, key, incoming_hash, order.order_id, accept, lambda: first_response(order)
        )

    async def cancel(
        self,
        scope: str,
        key: str,
        order_id: str,
        reason: str | None,
        first_response: Callable[[str], StoredResponse],
    ) -> SubmitResult:
        """Cancel the order once per (scope, key), deciding now on the order document.

        Only the caller that placed the order may cancel it (`UnknownOrderError`, as for an
        order that does not exist). The cancel and its `OrderCancelled` event commit in one
        batch unless the shipment was reserved first (`OrderAlreadyShippedError`); a cancel of
        an order already cancelled (under any key) answers the same. Billing refunds a charge
        when it handles the event; the `cancelled` status update is sent here for a prompt GET
        and again by billing, durably.
        """
        if self._saga is None or self._status is None:
            raise RuntimeError("the intake was built without the saga or a status publisher")
        saga, status = self._saga, self._status
        claim = await self._store.read_order_id_claim(order_id)
        owner = claim.owner_scope if claim is not None and claim.owner_scope else None
        if (owner or self._unclaimed_owner) != scope:
            raise UnknownOrderError(f"no order {order_id!r} is known")
        # Namespaced, so a cancel can never share a request hash with an order.
        incoming_hash = request_hash({"cancel": {"orderId": order_id, "reason": reason}})

        async def accept(owned: IdempotencyRecord) -> None:
            match await saga.cancel(order_id, reason):
                case CancelResult.ALREADY_SHIPPED:
                    raise OrderAlreadyShippedError(
                        f"order {order_id!r} has shipped (its shipment was reserved before "
                        "this cancel); it can no longer be cancelled"
                    )
                case CancelResult.NOT_STORED if claim is not None:
                    raise OrderNotStoredYetError(order_id)
                case CancelResult.NOT_STORED:
                    raise UnknownOrderError(f"no order {order_id!r} is known")
            change = OrderStatusChanged.of(
                order_id,
                OrderStatus.CANCELLED,
                changed_at=datetime.fromtimestamp(self._clock(), UTC),
                reason=reason,
            )
            try:
                await status.publish_status(change)
            except PublishError:
                # The cancel is committed; billing publishes the same update from its event.
                logger.warning(
                    "cancel of %s: status update not sent now; billing sends it",
                    log_value(order_id),
                    exc_info=True,
                )

        return await self._once(
            scope, key, incoming_hash, order_id, accept, lambda: first_response(order_id)
        )

    async def _once(
        self,
        scope: str,
        key: str,
        incoming_hash: str,
        order_id: str,
        accept: Callable[[IdempotencyRecord], Awaitable[None]],
        first_response: Callable[[], StoredResponse],
    ) -> SubmitResult:
        """Claim the key, run `accept` once, store and return the first response; a retry gets
        the stored response, the error its state earns, or takes an expired claim over."""
        claim = IdempotencyRecord(
            record_id=record_id(scope, key),
            scope=scope,
            key=key,
            request_hash=incoming_hash,
            order_id=order_id,
            status=RecordStatus.IN_PROGRESS,
            lease_expires_at=self._clock() + self._lease_seconds,
            ttl_seconds=self._ttl_seconds,
        )
        took_over = False
        try:
            owned = await self._store.claim(claim)
        except IdempotencyRecordExistsError as conflict:
            existing = conflict.existing
            now = self._clock()
            match judge(existing, incoming_hash, now):
                case Verdict.REPLAY:
                    assert existing.response is not None
                    return SubmitResult(existing.response, replayed=True)
                case Verdict.MISMATCH:
                    raise IdempotencyKeyReusedError(
                        "this Idempotency-Key was first used with a different request body"
                    ) from None
                case Verdict.IN_PROGRESS:
                    raise RequestInProgressError(
                        retry_after_seconds(existing, now, self._retry_after_cap)
                    ) from None
                case Verdict.TAKE_OVER:
                    owned = await self._take_over(claim, existing)
                    took_over = True
        try:
            await accept(owned)
        except Exception:
            # Refused or failed before anything was acknowledged: free the key so the
            # caller's retry is answered at once rather than after the lease.
            await self._release(owned)
            raise
        result = await self._complete(owned, first_response())
        return replace(result, took_over=took_over)

    async def _claim_order_id(self, order: OrderPlaced, incoming_hash: str, scope: str) -> None:
        """Refuse an orderId taken by a different payload, before anything is published.

        The same payload under another key (or from another caller) passes: it is the same
        order, published again and deduplicated downstream (and still owned by the first).
        """
        first = await self._store.claim_order_id(
            OrderIdClaim(order.order_id, incoming_hash, owner_scope=scope)
        )
        if first.request_hash != incoming_hash:
            raise OrderIdConflictError(
                f"orderId {order.order_id!r} was already accepted with a different payload; "
                "choose a new orderId for a different order"
            )

    async def _take_over(
        self, claim: IdempotencyRecord, expired: IdempotencyRecord
    ) -> IdempotencyRecord:
        assert expired.etag is not None
        try:
            owned = await self._store.take_over(claim, etag=expired.etag)
        except LeaseLostError:
            # Another retry took it over first and is now the one in progress.
            raise RequestInProgressError(self._retry_after_cap) from None
        logger.warning(
            "took over the expired claim of order %s (key record %s): publishing again",
            log_value(claim.order_id),
            claim.record_id,
        )
        return owned

    async def _complete(self, owned: IdempotencyRecord, response: StoredResponse) -> SubmitResult:
        assert owned.etag is not None
        try:
            await self._store.complete(owned.completed(response), etag=owned.etag)
        except LeaseLostError:
            # Our lease ran out during the send and a retry owns the key now; it sends the
            # same request again (deduplicated downstream) and records the same response.
            logger.warning(
                "claim of order %s was taken over before completion; answering anyway",
                log_value(owned.order_id),
            )
        return SubmitResult(response, replayed=False)

    async def _release(self, owned: IdempotencyRecord) -> None:
        """Free the key after a failed send so the client's retry need not wait out the lease."""
        assert owned.etag is not None
        try:
            await self._store.release(owned.record_id, etag=owned.etag)
        except Exception:
            logger.warning(
                "could not release the claim of order %s; it frees itself when its lease ends",
                log_value(owned.order_id),
                exc_info=True,
            )
