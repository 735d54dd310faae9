"""The status consumer: natural idempotency, no dedup store.

Each update is applied by the `exactly_once` core's `apply_version` on the order's status
document: a version at or below the stored one completes as stale with no write (a missing
document stands at `placed`'s version); a newer, legal one replaces the document If-Match its
ETag (a lost race reads again and decides again); an update the state machine cannot reach from
the stored status is dead-lettered.

A stale update still happened: an update that arrives after a newer one (shipped at version 3
before paid at 2) is recorded in the history in its place, If-Match, without changing the
status, so the history keeps every change whatever the delivery order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.store import DocumentStore, StoredDocument, apply_version, update_fenced
from orders.domain.ids import is_entity_id
from orders.domain.messages import DeadLetterReason, MessageRejected
from orders.domain.order_outcomes import OrderOutcome
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import (
    PRODUCER_VERSIONS,
    OrderStatus,
    OrderStatusChanged,
    StoredStatus,
    Verdict,
    history_after,
    history_with_late,
    judge_update,
    parse_status_changed,
)
from orders.service.ports import StatusLayout
from orders.service.subscriber import decided

# Concurrent updates of one order each cost a re-read; past this many the broker retries later.
MAX_ATTEMPTS = 8


class IllegalTransitionError(Exception):
    """The update cannot follow the stored status: nothing is written, the message is
    dead-lettered."""

    def __init__(self, stored: StoredStatus) -> None:
        super().__init__(f"not reachable from {stored.status.value} (version {stored.version})")
        self.stored = stored


class StatusConsumer:
    def __init__(self, documents: DocumentStore, layout: StatusLayout) -> None:
        self._documents = documents
        self._layout = layout

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        try:
            update = parse_status_changed(message)
        except MessageRejected as rejection:
            order_id = rejection.order_id
            return Decision(
                Outcome.REJECTED,
                Settlement.DEAD_LETTER,
                key=order_id if is_entity_id(order_id) else None,
                dead_letter_reason=rejection.reason.value,
                dead_letter_description=rejection.description,
            )
        return await decided(
            lambda: self._apply(update), consumer="status", order_id=update.order_id
        )

    async def _apply(self, update: OrderStatusChanged) -> Decision:
        def change(document: Mapping[str, Any] | None) -> dict[str, Any]:
            stored = self._layout.stored_status(document)
            if judge_update(stored, update) is Verdict.ILLEGAL:
                raise IllegalTransitionError(stored)
            return self._layout.status_document(update, history_after(stored, update))

        try:
            done = await apply_version(
                self._documents,
                update.order_id,
                self._layout.status_document_id(update.order_id),
                update.version,
                change,
                absent_version=PRODUCER_VERSIONS[OrderStatus.PLACED],
                max_races=MAX_ATTEMPTS,
            )
        except IllegalTransitionError as illegal:
            return _illegal(illegal.stored, update)
        if done is Outcome.STALE:
            await self._record_late(update)
        return Decision(done, Settlement.COMPLETE, key=update.order_id)

    async def _record_late(self, update: OrderStatusChanged) -> None:
        """Put a stale update's change into the history in its place, through the core's
        `update_fenced` (a lost race reads again); past `MAX_ATTEMPTS` lost writes the broker
        delivers it again (it is still stale then)."""
        document_id = self._layout.status_document_id(update.order_id)

        async def read() -> StoredDocument | None:
            return await self._documents.get(document_id, update.order_id)

        async def write(found: StoredDocument | None) -> None:
            if found is None:
                return  # stale against `placed`, which no document records
            history = history_with_late(self._layout.stored_status(found.body), update)
            if history is None:
                return
            await self._documents.replace(
                self._layout.with_history(found.body, history), update.order_id, etag=found.etag
            )

        await update_fenced(read, write, name=document_id, max_races=MAX_ATTEMPTS)


def _illegal(stored: StoredStatus, update: OrderStatusChanged) -> Decision:
    return Decision(
        OrderOutcome.ILLEGAL_TRANSITION,
        Settlement.DEAD_LETTER,
        key=update.order_id,
        dead_letter_reason=DeadLetterReason.ILLEGAL_STATUS_TRANSITION.value,
        dead_letter_description=(
            f"order {update.order_id!r} is {stored.status.value} (version {stored.version}); "
            f"{update.status.value} (version {update.version}) cannot follow it"
        ),
    )
