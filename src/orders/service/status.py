"""The status consumer: natural idempotency, no dedup store.

Each update is applied by a conditional write of the order's status document: a version at or
below the stored one completes as stale with no write; a newer, legal one replaces the document
If-Match its ETag (a 412 means another update got there first: read again and decide again);
an update the state machine cannot reach from the stored status is dead-lettered.
"""

from __future__ import annotations

import logging

from orders.domain.messages import DeadLetterReason, MessageRejected
from orders.domain.model import is_entity_id
from orders.domain.outcomes import Decision, Outcome, Settlement
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import (
    OrderStatusChanged,
    StoredStatus,
    Verdict,
    applied_document,
    judge_update,
    parse_status_changed,
    status_document_id,
)
from orders.exceptions import DocumentExistsError, LeaseLostError, TransientStoreError
from orders.observability import log_value
from orders.service.ports import FencedDocuments

logger = logging.getLogger("orders.status")

# Concurrent updates of one order each cost a re-read; past this many the broker retries later.
MAX_ATTEMPTS = 8


class StatusConsumer:
    def __init__(self, documents: FencedDocuments) -> None:
        self._documents = documents

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        try:
            update = parse_status_changed(message)
        except MessageRejected as rejection:
            order_id = rejection.order_id
            return Decision(
                Outcome.REJECTED,
                Settlement.DEAD_LETTER,
                order_id if is_entity_id(order_id) else None,
                dead_letter_reason=rejection.reason.value,
                dead_letter_description=rejection.description,
            )
        try:
            return await self._apply(update)
        except TransientStoreError as exc:
            return Decision(
                Outcome.TRANSIENT_FAILURE, Settlement.ABANDON, update.order_id, error=str(exc)
            )
        except Exception as exc:
            logger.exception("status update of %s failed", log_value(update.order_id))
            return Decision(
                Outcome.UNEXPECTED_FAILURE,
                Settlement.ABANDON,
                update.order_id,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def _apply(self, update: OrderStatusChanged) -> Decision:
        for _ in range(MAX_ATTEMPTS):
            read = await self._documents.read(status_document_id(update.order_id), update.order_id)
            stored = StoredStatus.of(read.document)
            verdict = judge_update(stored, update)
            if verdict is Verdict.STALE:
                return Decision(Outcome.STALE, Settlement.COMPLETE, update.order_id)
            if verdict is Verdict.ILLEGAL:
                return _illegal(stored, update)
            document = applied_document(stored, update)
            try:
                if stored.etag is None:
                    await self._documents.create(document)
                else:
                    await self._documents.replace(document, etag=stored.etag)
            except (DocumentExistsError, LeaseLostError):
                continue  # another update of this order landed in between: decide again
            return Decision(Outcome.PROCESSED, Settlement.COMPLETE, update.order_id)
        return Decision(
            Outcome.TRANSIENT_FAILURE,
            Settlement.ABANDON,
            update.order_id,
            error=f"{MAX_ATTEMPTS} concurrent updates raced this one; retrying later",
        )


def _illegal(stored: StoredStatus, update: OrderStatusChanged) -> Decision:
    return Decision(
        Outcome.ILLEGAL_TRANSITION,
        Settlement.DEAD_LETTER,
        update.order_id,
        dead_letter_reason=DeadLetterReason.ILLEGAL_STATUS_TRANSITION.value,
        dead_letter_description=(
            f"order {update.order_id!r} is {stored.status.value} (version {stored.version}); "
            f"{update.status.value} (version {update.version}) cannot follow it"
        ),
    )
