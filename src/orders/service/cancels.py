"""The load's cancels: each planned cancel waits for its point in the order's life, then goes
through the same core as `POST /api/orders/{orderId}/cancel`.

What each cancel was answered is collected, so a run can show that the answers agree with what
happened (a `cancelled` answer for an order that shipped would break the promise as surely as a
cancelled order that shipped).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from exactly_once import TransientStoreError
from exactly_once.store import DocumentCreator
from orders.domain.events import order_event_id
from orders.domain.inbox import BillingStatus
from orders.domain.load_plan import CancelPoint, PlannedCancel
from orders.exceptions import (
    OrderAlreadyShippedError,
    OrderNotStoredYetError,
    TransientPublishError,
    UnknownOrderError,
)
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.ports import BillingLayout, ShippingLayout

DEFAULT_DEADLINE_SECONDS = 60.0
POLL_SECONDS = 0.2
MAX_CONCURRENT_CANCELS = 16


class CancelAnswer(StrEnum):
    CANCELLED = "cancelled"  # 200: the cancel took effect (now or under another key)
    ALREADY_SHIPPED = "already_shipped"  # 409 order-already-shipped
    GAVE_UP = "gave_up"  # still not stored, or failing, when the deadline came


class CancelProbe(Protocol):
    """Where an order is in its life, as the stores tell it."""

    async def stored(self, order_id: str) -> bool: ...

    async def charged(self, order_id: str) -> bool: ...

    async def shipped(self, order_id: str) -> bool: ...


class CancelNotYet(Exception):
    """The cancel could not be decided yet (order not stored, key in progress, a transient
    failure): ask again shortly."""


# (order id, Idempotency-Key) -> the answer; raises `CancelNotYet` to be asked again.
Canceller = Callable[[str, str], Awaitable[CancelAnswer]]


def intake_canceller(intake: IdempotentOrderIntake, scope: str) -> Canceller:
    """The API cancel route's core as a `Canceller` for the load, in caller scope `scope`:
    what the route answers 409 or retries becomes `ALREADY_SHIPPED` or `CancelNotYet`.

    The load claims no `Idempotency-Key` (its key names the planned cancel only): a key is the
    HTTP route's, claimed by the core's dependency, and a cancel is idempotent on the order
    document without one (a second cancel answers as the first)."""

    async def cancel(order_id: str, _key: str) -> CancelAnswer:
        try:
            await intake.cancel(scope, order_id, "load")
        except OrderAlreadyShippedError:
            return CancelAnswer.ALREADY_SHIPPED
        except (
            UnknownOrderError,  # sent straight to the queue: no claim, not stored yet
            OrderNotStoredYetError,
            TransientStoreError,
            TransientPublishError,
        ) as not_yet:
            raise CancelNotYet(str(not_yet)) from not_yet
        return CancelAnswer.CANCELLED

    return cancel


@dataclass
class CancelResults:
    answers: dict[str, list[CancelAnswer]] = field(default_factory=dict)  # by order id
    by_point: dict[str, Counter[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, dict[str, int]]:
        return {point: dict(counts) for point, counts in self.by_point.items()}

    def merged(self, other: CancelResults) -> CancelResults:
        by_point = {point: Counter(counts) for point, counts in self.by_point.items()}
        for point, counts in other.by_point.items():
            by_point.setdefault(point, Counter()).update(counts)
        return CancelResults({**self.answers, **other.answers}, by_point)


async def run_cancels(
    cancels: tuple[PlannedCancel, ...],
    cancel: Canceller,
    probe: CancelProbe,
    *,
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> CancelResults:
    results = CancelResults()
    gate = asyncio.Semaphore(MAX_CONCURRENT_CANCELS)

    async def reached(planned: PlannedCancel) -> bool:
        match planned.point:
            case CancelPoint.AFTER_CHARGE:
                return await probe.charged(planned.order_id)
            case CancelPoint.AFTER_SHIP:
                return await probe.shipped(planned.order_id)
            case _:
                return await probe.stored(planned.order_id)

    async def ask(order_id: str, key: str, deadline: float) -> CancelAnswer:
        while True:
            try:
                return await cancel(order_id, key)
            except CancelNotYet:
                if clock() >= deadline:
                    return CancelAnswer.GAVE_UP
                await sleep(POLL_SECONDS)

    async def one(planned: PlannedCancel) -> None:
        deadline = clock() + deadline_seconds
        # Waiting for the point is polling the stores: there is no event to wait on.
        while not await reached(planned) and clock() < deadline:
            await sleep(POLL_SECONDS)
        async with gate:
            answers = list(
                await asyncio.gather(*(ask(planned.order_id, k, deadline) for k in planned.keys))
            )
        results.answers[planned.order_id] = answers
        counts = results.by_point.setdefault(planned.point.value, Counter())
        counts.update(answer.value for answer in answers)

    await asyncio.gather(*(one(planned) for planned in cancels))
    return results


def answer_mismatches(
    results: CancelResults, cancelled: frozenset[str], shipped: frozenset[str]
) -> int:
    """Answers that disagree with what happened: `cancelled` for an order that is not (or that
    shipped), `already_shipped` for one that did not ship."""
    wrong = 0
    for order_id, answers in results.answers.items():
        for answer in answers:
            if answer is CancelAnswer.CANCELLED:
                wrong += order_id not in cancelled or order_id in shipped
            elif answer is CancelAnswer.ALREADY_SHIPPED:
                wrong += order_id not in shipped
    return wrong


class ProbedLayout(BillingLayout, ShippingLayout, Protocol):
    """The ids (and billing's record) the probe reads."""


class StoreProbe:
    """`CancelProbe` by point reads: the order document, billing's record, the shipment."""

    def __init__(
        self, orders: DocumentCreator, inbox: DocumentCreator, layout: ProbedLayout
    ) -> None:
        self._orders = orders
        self._inbox = inbox
        self._layout = layout

    async def stored(self, order_id: str) -> bool:
        return await self._orders.get(order_id, order_id) is not None

    async def charged(self, order_id: str) -> bool:
        record_id = self._layout.charge_record_id(order_event_id(order_id))
        record = await self._inbox.get(record_id, order_id)
        return (
            record is not None
            and self._layout.charge_of(record.body).status is BillingStatus.COMPLETED
        )

    async def shipped(self, order_id: str) -> bool:
        shipment_id = self._layout.shipment_id(order_id)
        return await self._inbox.get(shipment_id, order_id) is not None
