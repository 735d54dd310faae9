"""The Idempotent Consumer: one received message -> exactly one decision.

Write first, read only on conflict: the atomic create of the order document (id = orderId) IS
the duplicate check, so a new order costs one store request and a duplicate at most two. The
mechanism is the `exactly_once` core's `create_or_find`, over the core's document store (the
orders container), so a conflict keeps one form from the store's 409 to the decision: the core's
`DocumentExistsError`, then `PayloadMismatchError` when the stored hash differs. The error frame
is the one every consumer shares (`subscriber.decided`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from exactly_once import PayloadMismatchError
from exactly_once.decisions import Decision, Outcome, Settlement, Settler, settle
from exactly_once.store import DocumentCreator, DocumentExistsError, create_or_find
from orders.domain.hashing import request_hash
from orders.domain.ids import is_entity_id
from orders.domain.messages import DeadLetterReason, MessageRejected, parse_received_order
from orders.domain.ownership import message_owner
from orders.domain.received import ReceivedOrderMessage
from orders.domain.rejections import OrderRejection, body_digest
from orders.observability import ConsumerTelemetry, log_value
from orders.service.ports import OrderLayout
from orders.service.subscriber import decision_for_failure
from orders.tracing import current_trace_properties

logger = logging.getLogger("orders.consumer")
# The name the order consumer's failures are logged under.
CONSUMER = "orders"


def utc_now() -> datetime:
    return datetime.now(UTC)


def mismatch(order_id: str, stored_hash: str, incoming_hash: str) -> Decision:
    return Decision(
        Outcome.MISMATCH,
        Settlement.DEAD_LETTER,
        key=order_id,
        request_hash=incoming_hash,
        dead_letter_reason=DeadLetterReason.REQUEST_HASH_MISMATCH.value,
        dead_letter_description=(
            f"orderId {order_id!r} was first stored with requestHash "
            f"{stored_hash}; this message has requestHash {incoming_hash}"
        ),
    )


class OrderConsumer:
    def __init__(
        self,
        documents: DocumentCreator,
        layout: OrderLayout,
        telemetry: ConsumerTelemetry | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._documents = documents
        self._layout = layout
        self._telemetry = telemetry or ConsumerTelemetry()
        self._clock = clock

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        """Decide and perform the store effect for one message (settlement is the host's)."""
        with self._telemetry.message_span(message) as span:
            decision = await self._decide(message)
            self._telemetry.record(span, message, decision)
            return decision

    async def handle_and_settle(self, message: ReceivedOrderMessage, settler: Settler) -> Decision:
        decision = await self.handle(message)
        await settle(decision, settler)
        return decision

    async def _decide(self, message: ReceivedOrderMessage) -> Decision:
        try:
            order = parse_received_order(message)
            owner_scope = message_owner(message.owner_property)
        except MessageRejected as rejection:
            # Filed under the order the producer meant: the body's orderId, else the MessageId
            # (the producer's contract makes them equal); neither when neither is a valid id.
            order_id = rejection.order_id
            if order_id is None and is_entity_id(message.message_id):
                order_id = message.message_id
            decision = Decision(
                Outcome.REJECTED,
                Settlement.DEAD_LETTER,
                key=order_id,
                dead_letter_reason=rejection.reason.value,
                dead_letter_description=rejection.description,
            )
            await self._remember_rejection(message, decision)
            return decision

        incoming_hash = request_hash(order.canonical_payload())
        documents = self._layout.order_write(
            order,
            request_hash=incoming_hash,
            message_id=order.order_id,
            processed_at=self._clock(),
            owner_scope=owner_scope,
            trace_context=current_trace_properties(),
        )
        # The shared error frame's meaning, caught here rather than by handing the write to
        # `decided` as a callback: the message's path then goes from this module to the core
        # and never comes back through another (docs/order-path.md).
        try:
            return await self._store_order(message, order.order_id, incoming_hash, documents)
        except Exception as exc:
            return decision_for_failure(
                exc, consumer=CONSUMER, order_id=order.order_id, request_hash=incoming_hash
            )

    async def _store_order(
        self,
        message: ReceivedOrderMessage,
        order_id: str,
        incoming_hash: str,
        documents: tuple[dict[str, Any], ...],
    ) -> Decision:
        """The core's `create_or_find`: the order document (id = orderId) is its own marker, its
        outbox event and lines ride in the same batch; a conflict compares the request hash."""
        order_document, *others = documents
        try:
            done, _ = await create_or_find(
                self._documents, order_id, order_document, *others, request_hash=incoming_hash
            )
        except PayloadMismatchError as conflict:
            decision = mismatch(order_id, conflict.stored_hash, incoming_hash)
            await self._remember_rejection(message, decision)
            return decision
        return Decision(done, Settlement.COMPLETE, key=order_id, request_hash=incoming_hash)

    async def _remember_rejection(self, message: ReceivedOrderMessage, decision: Decision) -> None:
        """File the rejection in the order's partition, for GET to report; best effort.

        One note per distinct payload (its id names the order and the payload), created
        through the same document store as the order: a redelivery of the same rejected
        payload finds its note filed (a conflict, one request, nothing to read). The dead
        letter is the record that counts: a store that cannot take the note must not turn a
        certain rejection into retries, so a failure here is logged and passed over.
        """
        if decision.key is None:
            return
        rejection = OrderRejection(
            order_id=decision.key,
            reason=decision.dead_letter_reason or "Unspecified",
            description=decision.dead_letter_description or "",
            message_id=message.message_id,
            request_hash=decision.request_hash,
            body_digest=body_digest(message.body),
            rejected_at=self._clock(),
        )
        try:
            await self._documents.create_all(
                decision.key, [self._layout.rejection_document(rejection)]
            )
        except DocumentExistsError:
            pass  # filed by an earlier delivery of the same payload
        except Exception:
            logger.warning(
                "could not record the rejection of order %s; dead-lettering it all the same",
                log_value(decision.key),
                exc_info=True,
            )
