"""The idempotent order intake: claim the key, publish once, store the answer, replay it.

The key's record runs through the `exactly_once` core's claim state machine (`Claims`: claim,
judge, take over, complete or release), with its lease judged by the database's clock. Write
first, read only on conflict (as the consumer does): creating the record IS the claim, and the
conflict carries the existing record, so a first request costs two creates (the key's record
and the orderId's claim), one send and one fenced replace, and a replay costs one failed
create plus the read (with the database's time) the store does for it.

The answer a first request got is opaque JSON here (the entrypoint decides what it holds and
maps it to HTTP); it is stored as the record's result and replayed verbatim.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from exactly_once.exceptions import InProgressElsewhereError, PayloadMismatchError, StoreError
from exactly_once.keys import KeyedRequests, retry_after_seconds
from exactly_once.records import DEFAULT_LEASE_SECONDS, JsonObject, Record, RecordStatus
from orders.domain.hashing import request_hash
from orders.domain.idempotency import (
    CANCEL_OPERATION,
    PLACE_OPERATION,
    OrderIdClaim,
    core_store_errors,
    key_claim,
)
from orders.domain.model import OrderPlaced
from orders.domain.ownership import may_act
from orders.domain.saga import SagaOrder
from orders.domain.status import OrderStatus, OrderStatusChanged
from orders.exceptions import (
    IdempotencyKeyReusedError,
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
# Each request's claim is owned by `http-<random>`: one owner per request.
OWNER_PREFIX = "http"


@dataclass(frozen=True)
class SubmitResult:
    answer: JsonObject  # the first request's answer, as the entrypoint made it
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
        ttl_seconds: int,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        retry_after_cap: int = DEFAULT_RETRY_AFTER_CAP,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._requests = KeyedRequests(store)
        self._publisher = publisher
        self._status = status
        self._saga = saga
        self._ttl_seconds = ttl_seconds
        self._lease_seconds = lease_seconds
        self._retry_after_cap = retry_after_cap
        # Dates the cancel's status update; leases are judged by the database's clock alone.
        self._clock = clock

    async def submit(
        self,
        scope: str,
        key: str,
        order: OrderPlaced,
        first_response: Callable[[OrderPlaced], JsonObject],
    ) -> SubmitResult:
        """Accept `order` once per (scope, key); raise the error a retry earns.

        `first_response` is the host's answer to a newly accepted order; it is stored and
        replayed verbatim to every retry with the same key.
        """
        incoming_hash = request_hash(order.canonical_payload())

        async def accept() -> None:
            owner = await self._claim_order_id(order, incoming_hash, scope)
            await self._publisher.publish(order, owner)

        return await self._once(
            scope, key, incoming_hash, order.order_id, accept, lambda: first_response(order)
        )

    async def cancel(
        self,
        scope: str,
        key: str,
        order_id: str,
        reason: str | None,
        first_response: Callable[[str], JsonObject],
    ) -> SubmitResult:
        """Cancel the order once per (scope, key), deciding now on the order document.

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
        saga, status = self._saga, self._status
        with core_store_errors():
            claim = await self._store.read_order_id_claim(order_id)
        # Namespaced, so a cancel can never share a request hash with an order.
        incoming_hash = request_hash({"cancel": {"orderId": order_id, "reason": reason}})

        def owned(order: SagaOrder) -> bool:
            return may_act(scope, order.owner, claim)

        async def accept() -> None:
            match await saga.cancel(order_id, reason, may_cancel=owned):
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
                await status.publish_status(change)
            except PublishError:
                # The cancel is committed; billing publishes the same update from its event.
                logger.warning(
                    "cancel of %s: status update not sent now; billing sends it",
                    log_value(order_id),
                    exc_info=True,
                )

        return await self._once(
            scope,
            key,
            incoming_hash,
            order_id,
            accept,
            lambda: first_response(order_id),
            operation=CANCEL_OPERATION,
        )

    async def _once(
        self,
        scope: str,
        key: str,
        incoming_hash: str,
        order_id: str,
        accept: Callable[[], Awaitable[None]],
        first_response: Callable[[], JsonObject],
        *,
        operation: str = PLACE_OPERATION,
    ) -> SubmitResult:
        """Claim the key, run `accept` once, store and return the first answer; a retry gets
        the stored answer, the error its state earns, or takes an expired claim over."""
        wanted = key_claim(
            scope,
            key,
            order_id,
            incoming_hash,
            owner=f"{OWNER_PREFIX}-{uuid.uuid4().hex[:12]}",
            lease_seconds=self._lease_seconds,
            ttl_seconds=self._ttl_seconds,
            operation=operation,
        )
        # One owner per request: a second request under a live claim is refused at once,
        # never made to wait; the caller retries after Retry-After.
        try:
            with core_store_errors():
                owned = await self._requests.begin(wanted)
        except PayloadMismatchError:
            raise IdempotencyKeyReusedError(
                "this Idempotency-Key was first used with a different request body"
            ) from None
        except InProgressElsewhereError as busy:
            raise RequestInProgressError(
                retry_after_seconds(busy.seconds_left, self._retry_after_cap)
            ) from None
        if owned.status is RecordStatus.COMPLETED:
            if not isinstance(owned.result, dict):
                raise StoreError(f"key record {owned.key!r} is completed without an answer")
            return SubmitResult(owned.result, replayed=True)
        took_over = owned.attempts > 1
        if took_over:
            logger.warning(
                "took over the expired claim of order %s (key record %s): publishing again",
                log_value(order_id),
                owned.key,
            )
        try:
            await accept()
        except Exception:
            # Refused or failed before anything was acknowledged: free the key so the
            # caller's retry is answered at once rather than after the lease (a failure to
            # free it is logged; the lease ends the claim then).
            await self._requests.release(owned)
            raise
        answer = first_response()
        await self._complete(owned, answer, order_id)
        return SubmitResult(answer, replayed=False, took_over=took_over)

    async def _claim_order_id(self, order: OrderPlaced, incoming_hash: str, scope: str) -> str:
        """Refuse an orderId taken by a different payload, before anything is published; return
        the scope the order is published as owned by.

        The same payload under another key (or from another caller) passes: it is the same
        order, published again and deduplicated downstream, and still owned by the first (a
        claim from before owners were recorded names none: then the caller).
        """
        with core_store_errors():
            first = await self._store.claim_order_id(
                OrderIdClaim(order.order_id, incoming_hash, owner_scope=scope)
            )
        if first.request_hash != incoming_hash:
            raise OrderIdConflictError(
                f"orderId {order.order_id!r} was already accepted with a different payload; "
                "choose a new orderId for a different order"
            )
        return first.owner_scope or scope

    async def _complete(self, owned: Record, answer: JsonObject, order_id: str) -> None:
        with core_store_errors():
            recorded = await self._requests.finish(owned, answer)
        if not recorded:
            # Our lease ran out during the send and a retry owns the key now; it sends the
            # same request again (deduplicated downstream) and records the same answer.
            logger.warning(
                "claim of order %s was taken over before completion; answering anyway",
                log_value(order_id),
            )
