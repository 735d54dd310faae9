"""The operations console's use cases: counts per entity, dead letters (the same rules as
`orders dlq`), every document of an order, and the workers' live counters.

Everything the console may touch is named here, from settings: a source outside that list is
refused, so a URL cannot point the console at some other entity of the namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from orders.domain.dead_letters import (
    DeadLetter,
    DeadLetterOutcome,
    Selection,
    names_order,
    resubmit_refusal,
)
from orders.domain.decision_counters import DecisionCounters
from orders.domain.payments import Charge, Refund
from orders.exceptions import PaymentError
from orders.service.order_lookup import order_history, order_view
from orders.service.payment_port import PaymentGateway
from orders.service.ports import (
    DeadLetterQueue,
    DecisionFeed,
    EntityCounter,
    EntityCounts,
    OrderPartition,
    OrderReader,
    OrderViewLayout,
)
from orders.service.subscribers import Source

# The stored documents' types, as the Cosmos layout writes them (`adapters/cosmos_layout.py`).
# The console shows documents raw, as they are stored, on purpose: it reads them as any tool
# reading the database would, and cannot import the adapter. tests/unit/test_console_timeline.py
# holds them equal to the layout's.
ORDER_DOCUMENT_TYPE = "order"
LINE_DOCUMENT_TYPE = "orderLine"
OUTBOX_DOCUMENT_TYPE = "outbox"
STATUS_DOCUMENT_TYPE = "orderStatus"
REJECTION_DOCUMENT_TYPE = "orderRejection"
INBOX_DOCUMENT_TYPE = "inbox"
SHIPMENT_DOCUMENT_TYPE = "shipment"
BILLING_DOCUMENT_TYPE = "billing"
REFUND_DOCUMENT_TYPE = "refund"
# The payment service's records shown beside the order's documents.
PAYMENT_DOCUMENT_TYPE = "payment"
# A refund as the payment service holds it (billing's own record is `refund`, in the inbox).
PAYMENT_REFUND_DOCUMENT_TYPE = "paymentRefund"
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
        layout: OrderViewLayout,
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
        self._layout = layout
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
        return await self._dead_letter_queue(source).purge(_selection(sequence))

    async def passed_over(self, source: Source, sequence: int | None) -> tuple[int, ...]:
        """The dead letters a resubmit or purge of `sequence` would lock and give back (those
        before it), for the confirmation page to say so."""
        plan = await self._dead_letter_queue(source).plan(_selection(sequence), lambda dead: None)
        return plan.passed_over

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
                documents.append({"type": PAYMENT_DOCUMENT_TYPE, "unavailable": str(exc)})
            else:
                documents += [payment_document(charge) for charge in charges]
            try:
                refunds = await self._payments.refunds_for(order_id)
            except PaymentError as exc:
                documents.append({"type": PAYMENT_REFUND_DOCUMENT_TYPE, "unavailable": str(exc)})
            else:
                documents += [refund_document(refund) for refund in refunds]
        return documents

    def order_history(self, documents: Sequence[dict[str, Any]]) -> list[dict[str, object]]:
        """The order's one history, read off its documents as GET reads them (the same
        function builds both). Raises `UnreadableOrderError` when GET could not read them."""
        return order_history(self._partition(documents))

    def _partition(self, documents: Sequence[dict[str, Any]]) -> OrderPartition:
        stored = [document for document in documents if origin_of(document) == ORDERS_CONTAINER]
        try:
            return self._layout.order_partition(stored)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnreadableOrderError(f"{type(exc).__name__}: {exc}") from exc

    async def show_order(
        self, order_id: str, *, with_documents: bool = True, with_dead_letters: bool = True
    ) -> dict[str, Any]:
        """Everything known about one order, for `orders show`: the stored order as GET shows
        it, its one history, payment and refund, shipment, outbox events, the consumers'
        records, and the dead letters that name it (peeked). Documents as stored.

        A part not asked for (its service is down) is not read: its sections are None, so the
        other part is still shown during an outage of one service."""

        async def read_documents() -> list[dict[str, Any]]:
            return await self.order_documents(order_id) if with_documents else []

        async def read_dead_letters() -> list[tuple[Source, DeadLetter]]:
            return await self.order_dead_letters(order_id) if with_dead_letters else []

        documents, dead_letters = await asyncio.gather(read_documents(), read_dead_letters())
        view: dict[str, Any] = {"order": None, "statusHistory": None}
        if with_documents:
            try:
                partition = self._partition(documents)
                view = {"order": order_view(partition), "statusHistory": order_history(partition)}
            except UnreadableOrderError as exc:
                view |= {"unreadable": str(exc)}

        def of_type(*kinds: str) -> list[dict[str, Any]] | None:
            if not with_documents:
                return None
            return [document for document in documents if document.get("type") in kinds]

        return {
            "orderId": order_id,
            **view,
            "payment": of_type(PAYMENT_DOCUMENT_TYPE, BILLING_DOCUMENT_TYPE),
            "refund": of_type(PAYMENT_REFUND_DOCUMENT_TYPE, REFUND_DOCUMENT_TYPE),
            "shipment": of_type(SHIPMENT_DOCUMENT_TYPE),
            "outbox": of_type(OUTBOX_DOCUMENT_TYPE),
            "inboxRecords": of_type(INBOX_DOCUMENT_TYPE),
            "rejections": of_type(REJECTION_DOCUMENT_TYPE),
            "deadLetters": [
                {"source": str(source), **dead.to_json()} for source, dead in dead_letters
            ]
            if with_dead_letters
            else None,
        }

    async def order_dead_letters(
        self, order_id: str, limit: int = COUNT_LIMIT
    ) -> list[tuple[Source, DeadLetter]]:
        """The dead letters that name the order, in every source's dead-letter queue (peeked:
        nothing is locked or changed), the first `limit` of each queue searched."""
        found = await asyncio.gather(*(self.dead_letters(source, limit) for source in self.sources))
        return [
            (source, dead)
            for source, dead_letters in zip(self.sources, found, strict=True)
            for dead in dead_letters
            if names_order(dead, order_id)
        ]

    async def counters(self) -> DecisionCounters | None:
        """None where no journal is configured (in Azure: the workbook has them)."""
        return await self._decisions.counters() if self._decisions is not None else None


class UnreadableOrderError(Exception):
    """The order's stored documents cannot be read as GET reads them (a field missing or of
    the wrong kind): the console still shows them raw."""


def payment_document(charge: Charge) -> dict[str, Any]:
    """A charge shown beside the order's documents (it lives at the payment service)."""
    return {
        "type": PAYMENT_DOCUMENT_TYPE,
        "id": charge.payment_id,
        "orderId": charge.order_id,
        "amount": str(charge.amount),
        "currency": charge.currency,
        "idempotencyKey": charge.idempotency_key,
        "createdAt": charge.created_at,
    }


def refund_document(refund: Refund) -> dict[str, Any]:
    """A refund shown beside the order's documents (it lives at the payment service)."""
    return {
        "type": PAYMENT_REFUND_DOCUMENT_TYPE,
        "id": refund.refund_id,
        "orderId": refund.order_id,
        "paymentId": refund.payment_id,
        "amount": str(refund.amount),
        "currency": refund.currency,
        "idempotencyKey": refund.idempotency_key,
        "createdAt": refund.created_at,
    }


# --- the order page: a timeline from the documents -------------------------------------------

# Where each document type lives; anything else is shown under "other".
ORDERS_CONTAINER = "orders container"
INBOX_CONTAINER = "inbox container"
PAYMENT_SERVICE = "payment service"
_ORIGINS = {
    ORDER_DOCUMENT_TYPE: ORDERS_CONTAINER,
    LINE_DOCUMENT_TYPE: ORDERS_CONTAINER,
    OUTBOX_DOCUMENT_TYPE: ORDERS_CONTAINER,
    STATUS_DOCUMENT_TYPE: ORDERS_CONTAINER,
    REJECTION_DOCUMENT_TYPE: ORDERS_CONTAINER,
    INBOX_DOCUMENT_TYPE: INBOX_CONTAINER,
    SHIPMENT_DOCUMENT_TYPE: INBOX_CONTAINER,
    BILLING_DOCUMENT_TYPE: INBOX_CONTAINER,
    REFUND_DOCUMENT_TYPE: INBOX_CONTAINER,
    PAYMENT_DOCUMENT_TYPE: PAYMENT_SERVICE,
    PAYMENT_REFUND_DOCUMENT_TYPE: PAYMENT_SERVICE,
}
# The steps of an order's life in the order they happen; cancelled and refunded end it early.
# The timeline follows the order's history; this order places only the steps a service has
# recorded whose status update is not applied yet (a status not named here sorts after them).
# `payment_failed` comes from the order document (billing's refusal), never a status update.
TIMELINE_STEPS = (
    "placed",
    "payment_failed",
    "paid",
    "shipped",
    "delivered",
    "cancelled",
    "refunded",
)


def origin_of(document: dict[str, Any]) -> str:
    return _ORIGINS.get(str(document.get("type")), "other")


@dataclass(frozen=True)
class Evidence:
    """One document's word that a step happened, and when it says it did."""

    origin: str
    document: str  # its type and id, as an operator searches for it
    said: str
    at: str | None


@dataclass(frozen=True)
class TimelineStep:
    status: str
    # The change's version in the order's history; None for a step the services recorded
    # whose status update is not applied yet (or when the history cannot be read).
    version: int | None
    at: str | None  # the history's time; for a step not in it, the earliest a source gives
    evidence: tuple[Evidence, ...]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _name(document: dict[str, Any]) -> str:
    return f"{document.get('type', '(no type)')} {document.get('id', '')}".strip()


def order_timeline(
    documents: Sequence[dict[str, Any]], history: Sequence[Mapping[str, object]] | None
) -> list[TimelineStep]:
    """The order's history (`order_history`, what GET shows), each change with every document
    that says so; then the steps the services recorded that are not in the history yet, in
    life order. Without a history (unreadable documents) only those evidenced steps."""
    found: dict[str, list[Evidence]] = {}

    def add(step: str, document: dict[str, Any], said: str, at: object) -> None:
        found.setdefault(step, []).append(
            Evidence(origin_of(document), _name(document), said, _text(at))
        )

    for document in documents:
        kind = document.get("type")
        if kind == ORDER_DOCUMENT_TYPE:
            add("placed", document, "stored by the orders consumer", document.get("processedAt"))
            fulfilment = document.get("fulfilment")
            if isinstance(fulfilment, dict) and fulfilment.get("state") == "cancelled":
                said = "cancelled on the order document (the saga's decision)"
                add("cancelled", document, said, fulfilment.get("cancelledAt"))
            if isinstance(fulfilment, dict) and fulfilment.get("state") == "payment_failed":
                said = "the charge was refused for good: it will not ship (the saga's decision)"
                add("payment_failed", document, said, fulfilment.get("at"))
        elif kind == STATUS_DOCUMENT_TYPE:
            written = document.get("history")
            for entry in written if isinstance(written, list) else []:
                if isinstance(entry, dict) and isinstance(entry.get("status"), str):
                    said = f"status history, version {entry.get('version')}"
                    add(str(entry["status"]), document, said, entry.get("at"))
        elif kind == PAYMENT_DOCUMENT_TYPE and "unavailable" not in document:
            said = f"charged {document.get('amount')} {document.get('currency')}"
            add("paid", document, said, document.get("createdAt"))
        elif kind == BILLING_DOCUMENT_TYPE and document.get("status") == "completed":
            add("paid", document, "billing completed its charge", None)
        elif kind == SHIPMENT_DOCUMENT_TYPE:
            said = f"shipment {document.get('status', 'recorded')} by the shipping consumer"
            add("shipped", document, said, document.get("requestedAt"))
        elif kind == REFUND_DOCUMENT_TYPE and document.get("status") == "completed":
            add("refunded", document, "billing completed its refund", None)
        elif kind == PAYMENT_REFUND_DOCUMENT_TYPE and "unavailable" not in document:
            said = f"refunded {document.get('amount')} {document.get('currency')}"
            add("refunded", document, said, document.get("createdAt"))
    changes = [
        TimelineStep(
            str(change.get("status")),
            version if isinstance(version := change.get("version"), int) else None,
            _text(change.get("at")),
            tuple(found.get(str(change.get("status")), ())),
        )
        for change in history or ()
    ]
    shown = {change.status for change in changes}
    pending = [
        TimelineStep(step, None, _earliest(e.at for e in found[step]), tuple(found[step]))
        for step in [*TIMELINE_STEPS, *sorted(set(found) - set(TIMELINE_STEPS))]
        if step in found and step not in shown
    ]
    return changes + pending


def _earliest(times: Iterable[str | None]) -> str | None:
    """The earliest of ISO-8601 times written by different services (naive ones read as UTC);
    anything that is not a time is left out."""
    parsed: list[tuple[datetime, str]] = []
    for text in times:
        try:
            when = datetime.fromisoformat(text) if text else None
        except ValueError:
            continue
        if when is not None:
            parsed.append((when if when.tzinfo else when.replace(tzinfo=UTC), text or ""))
    return min(parsed)[1] if parsed else None


def current_status(documents: Sequence[dict[str, Any]]) -> tuple[str, int] | None:
    """The status and version the status document holds (the order document keeps the status
    it was created with), or None before the first status update."""
    for document in documents:
        if document.get("type") == STATUS_DOCUMENT_TYPE:
            status, version = document.get("status"), document.get("version")
            if isinstance(status, str) and isinstance(version, int):
                return status, version
    return None


def _selection(sequence: int | None) -> Selection:
    return Selection(everything=True) if sequence is None else Selection(frozenset({sequence}))
