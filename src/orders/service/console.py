"""The operations console's use cases: counts per entity, dead letters (the same rules as
`orders dlq`), every document of an order, and the workers' live counters.

Everything the console may touch is named here, from settings: a source outside that list is
refused, so a URL cannot point the console at some other entity of the namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from orders.domain.dead_letters import DeadLetter, DeadLetterOutcome, Selection, resubmit_refusal
from orders.domain.decision_counters import DecisionCounters
from orders.domain.payments import Charge
from orders.exceptions import PaymentError
from orders.service.payment_port import PaymentGateway
from orders.service.ports import (
    DeadLetterQueue,
    DecisionFeed,
    EntityCounter,
    EntityCounts,
    OrderReader,
)
from orders.service.worker_options import Source

# Counting peeks every message of an entity: this many per sub-queue at most ("1000+").
COUNT_LIMIT = 1000
LIST_LIMIT = 100
MAX_SOURCE_NAME = 300


class OperationsConsole:
    def __init__(
        self,
        sources: Sequence[Source],
        counter: EntityCounter,
        dead_letter_queue: Callable[[Source], DeadLetterQueue],
        reader: OrderReader,
        decisions: DecisionFeed | None,
        *,
        duplicate_window: timedelta,
        count_limit: int = COUNT_LIMIT,
        inbox: OrderReader | None = None,
        payments: PaymentGateway | None = None,
    ) -> None:
        self.sources = tuple(sources)
        self._counter = counter
        self._dead_letter_queue = dead_letter_queue
        self._reader = reader
        self._inbox = inbox
        self._payments = payments
        self._decisions = decisions
        self._duplicate_window = duplicate_window
        self._count_limit = count_limit

    def find_source(self, name: str) -> Source | None:
        """The configured source with this name (`str(source)`), or None."""
        if len(name) > MAX_SOURCE_NAME:
            return None
        return next((source for source in self.sources if str(source) == name), None)

    async def counts(self) -> list[EntityCounts]:
        return list(
            await asyncio.gather(
                *(self._counter.count(source, self._count_limit) for source in self.sources)
            )
        )

    async def dead_letters(self, source: Source, limit: int = LIST_LIMIT) -> list[DeadLetter]:
        return await self._dead_letter_queue(source).browse(limit)

    async def dead_letter(self, source: Source, sequence: int) -> DeadLetter | None:
        found = await self._dead_letter_queue(source).browse(1, from_sequence=sequence)
        return found[0] if found and found[0].sequence_number == sequence else None

    async def resubmit(
        self, source: Source, sequence: int, *, force: bool, by: str, now: datetime
    ) -> DeadLetterOutcome:
        """One dead letter back to its queue, refused as `orders dlq resubmit` refuses."""
        return await self._dead_letter_queue(source).resubmit(
            Selection(frozenset({sequence})),
            lambda dead: resubmit_refusal(
                dead, force=force, now=now, duplicate_window=self._duplicate_window
            ),
            by=by,
            now=now,
        )

    async def purge(self, source: Source, sequence: int | None) -> DeadLetterOutcome:
        """One dead letter, or (None) every one, gone for good."""
        selection = (
            Selection(everything=True) if sequence is None else Selection(frozenset({sequence}))
        )
        return await self._dead_letter_queue(source).purge(selection)

    async def order_documents(self, order_id: str) -> list[dict[str, Any]]:
        """The order's documents (order, lines, outbox, status), the consumers' inbox records
        and effects (shipment, billing), and the charges the payment service holds for it."""
        documents = await self._reader.read_order_documents(order_id)
        if self._inbox is not None:
            documents += await self._inbox.read_order_documents(order_id)
        if self._payments is not None:
            try:
                charges = await self._payments.charges_for(order_id)
            except PaymentError as exc:
                documents.append({"type": "payment", "unavailable": str(exc)})
            else:
                documents += [payment_document(charge) for charge in charges]
        return documents

    async def counters(self) -> DecisionCounters | None:
        """None where no journal is configured (in Azure: the workbook has them)."""
        return await self._decisions.counters() if self._decisions is not None else None


def payment_document(charge: Charge) -> dict[str, Any]:
    """A charge shown beside the order's documents (it lives at the payment service)."""
    return {
        "type": "payment",
        "id": charge.payment_id,
        "orderId": charge.order_id,
        "amount": str(charge.amount),
        "currency": charge.currency,
        "idempotencyKey": charge.idempotency_key,
        "createdAt": charge.created_at,
    }
