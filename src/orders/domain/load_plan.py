"""What a load run sends, decided up front from a seed: pure data, no broker.

Kinds of send (the manifest records each with what it must lead to):
- original: the first send of an order -> stored once;
- producer_retry: the same message again at once, inside the broker's duplicate-detection
  window -> dropped by the broker;
- late_duplicate: the same message again after the window -> reaches a consumer -> duplicate;
- concurrent_duplicate: two copies sent a window apart but *scheduled to appear at the same
  instant*, so competing consumers process them at the same time -> one stored, one duplicate;
- conflict: the same orderId with a different payload after the window -> RequestHashMismatch;
- conflict_in_window: the same orderId with a different payload right behind the original,
  inside the window -> dropped by the broker, which compares MessageId only (the silent case the
  outcome table in docs/how-it-works.md warns about); reported on its own by the verifier;
- poison: invalid messages of several kinds -> dead-lettered with their reason.

With status updates on, each order also gets absolute, versioned `OrderStatusChanged` messages
along one legal path (paid, shipped, delivered; or paid, cancelled; or cancelled), some sent
twice after the window, some orders a stray `placed` that can never be applied; with reorder on,
each order's updates are sent newest first and all of them shuffled.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from orders.domain.hashing import request_hash
from orders.domain.ids import ID_RULE, MAX_ID_LENGTH, InvalidIdError, check_id
from orders.domain.messages import MAX_LINES_PER_ORDER, DeadLetterReason, parse_order
from orders.domain.status import OrderStatus, OrderStatusChanged


class SendKind(StrEnum):
    ORIGINAL = "original"
    PRODUCER_RETRY = "producer_retry"
    LATE_DUPLICATE = "late_duplicate"
    CONCURRENT_DUPLICATE = "concurrent_duplicate"
    CONFLICT = "conflict"
    CONFLICT_IN_WINDOW = "conflict_in_window"
    POISON = "poison"


class Phase(StrEnum):
    """When a send goes out relative to the broker's duplicate-detection window."""

    FIRST = "first"  # at once
    AFTER_WINDOW = "after_window"  # once the window of every first-phase send has passed


@dataclass(frozen=True)
class LoadMix:
    """Fractions of the order count; the default is about 30% duplicates of all kinds."""

    producer_retries: float = 0.10
    late_duplicates: float = 0.10
    concurrent_duplicates: float = 0.10
    conflicts: float = 0.03
    poison: float = 0.04
    conflicts_in_window: float = 0.02

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not 0 <= value <= 1:
                raise ValueError(f"{name} must be a fraction between 0 and 1, not {value}")


@dataclass(frozen=True)
class PlannedSend:
    kind: SendKind
    phase: Phase
    message_id: str
    body: str
    order_id: str | None  # the orderId in the body, when it has one
    request_hash: str | None  # of the body, when it is a valid order
    expected_reason: str | None = None  # dead-letter reason, for poison
    scheduled_together: bool = False  # concurrent duplicates appear at one instant

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedSend:
        return cls(**{**data, "kind": SendKind(data["kind"]), "phase": Phase(data["phase"])})


class StatusKind(StrEnum):
    UPDATE = "update"  # a step of the order's legal path
    DUPLICATE = "duplicate"  # the same update again, after the window
    ILLEGAL = "illegal"  # a stray `placed`: never applicable, dead-lettered (or stale)


@dataclass(frozen=True)
class PlannedStatus:
    kind: StatusKind
    phase: Phase
    order_id: str
    status: str
    version: int
    message_id: str
    body: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedStatus:
        return cls(**{**data, "kind": StatusKind(data["kind"]), "phase": Phase(data["phase"])})


# The legal paths an order's updates follow, and how often.
STATUS_PATHS: tuple[tuple[float, tuple[OrderStatus, ...]], ...] = (
    (0.6, (OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.DELIVERED)),
    (0.25, (OrderStatus.PAID, OrderStatus.CANCELLED)),
    (0.15, (OrderStatus.CANCELLED,)),
)
STATUS_DUPLICATES = 0.3
STRAY_PLACED = 0.1
STRAY_PLACED_VERSION = 7
STATUS_CHANGED_AT = "2026-01-01T00:00:00+00:00"


class CancelPoint(StrEnum):
    """When, in the order's life, a planned cancel is sent (through the API's core)."""

    BEFORE_BILLING = "before_billing"  # as soon as the order is stored
    AFTER_CHARGE = "after_charge"  # once billing has charged (shipping may or may not be done)
    AFTER_SHIP = "after_ship"  # once the shipment exists: refused, order-already-shipped
    TWICE = "twice"  # as soon as stored, twice at once under two keys


@dataclass(frozen=True)
class PlannedCancel:
    order_id: str
    point: CancelPoint
    keys: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"order_id": self.order_id, "point": self.point.value, "keys": list(self.keys)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedCancel:
        return cls(data["order_id"], CancelPoint(data["point"]), tuple(data["keys"]))


def plan_cancels(order_ids: list[str], count: int, rng: random.Random) -> list[PlannedCancel]:
    """`count` orders cancelled, the points taken in turn so every point is covered."""
    points = list(CancelPoint)
    chosen = rng.sample(order_ids, min(count, len(order_ids)))
    planned = []
    for index, order_id in enumerate(chosen):
        point = points[index % len(points)]
        keys = 2 if point is CancelPoint.TWICE else 1
        planned.append(
            PlannedCancel(order_id, point, tuple(f"cancel-{order_id}-{n}" for n in range(keys)))
        )
    return planned


@dataclass(frozen=True)
class LoadPlan:
    run_id: str
    seed: int
    orders: int
    sends: tuple[PlannedSend, ...] = field(default=())
    status_updates: tuple[PlannedStatus, ...] = field(default=())
    cancels: tuple[PlannedCancel, ...] = field(default=())

    def in_phase(self, phase: Phase) -> list[PlannedSend]:
        return [send for send in self.sends if send.phase is phase]

    def statuses_in_phase(self, phase: Phase) -> list[PlannedStatus]:
        return [update for update in self.status_updates if update.phase is phase]


def order_body(order_id: str, rng: random.Random, *, line_count: int | None = None) -> str:
    count = line_count if line_count is not None else rng.randint(1, 5)
    lines = [
        {
            "sku": f"sku-{rng.randint(1, 500):04d}",
            "quantity": rng.randint(1, 9),
            "unitPrice": float(Decimal(rng.randint(0, 99_999)) / 100),
        }
        for _ in range(count)
    ]
    payload = {
        "orderId": order_id,
        "customerId": f"customer-{rng.randint(1, 200):04d}",
        "currency": rng.choice(["EUR", "USD", "GBP", "JPY", "CHF"]),
        "lines": lines,
    }
    return json.dumps(payload)


def request_hash_of(body: str) -> str:
    return request_hash(parse_order(body.encode()).canonical_payload())


def _count(fraction: float, orders: int) -> int:
    return round(fraction * orders)


def poison_sends(run_id: str, count: int, rng: random.Random) -> list[PlannedSend]:
    kinds = [
        DeadLetterReason.INVALID_JSON,
        DeadLetterReason.SCHEMA_VIOLATION,
        DeadLetterReason.MESSAGE_ID_MISMATCH,
        DeadLetterReason.ORDER_TOO_LARGE,
    ]
    sends = []
    for number in range(count):
        reason = kinds[number % len(kinds)]
        message_id = f"{run_id}-poison-{number:05d}"
        if reason is DeadLetterReason.INVALID_JSON:
            body = '{"orderId": "' + message_id + '", "lines": [ oops'
        elif reason is DeadLetterReason.SCHEMA_VIOLATION:
            bad = json.loads(order_body(message_id, rng))
            bad["lines"][0]["quantity"] = -1
            body = json.dumps(bad)
        elif reason is DeadLetterReason.MESSAGE_ID_MISMATCH:
            body = order_body(f"{run_id}-unsent-{number:05d}", rng)
        else:
            body = order_body(message_id, rng, line_count=MAX_LINES_PER_ORDER + 1)
        sends.append(
            PlannedSend(
                SendKind.POISON,
                Phase.FIRST,
                message_id,
                body,
                order_id=None,
                request_hash=None,
                expected_reason=reason.value,
            )
        )
    return sends


def reused_body(body: str, customer_suffix: str) -> str:
    """The same orderId with a different payload (another customer)."""
    changed = json.loads(body)
    changed["customerId"] = changed["customerId"] + customer_suffix
    return json.dumps(changed)


@dataclass(frozen=True)
class _Picks:
    """Which orders get which extra sends; no order proves two things at once."""

    concurrent: list[str]
    conflicts: list[str]
    late: list[str]
    retries: set[str]
    in_window: set[str]

    @classmethod
    def draw(cls, order_ids: list[str], mix: LoadMix, rng: random.Random) -> _Picks:
        def pick(fraction: float, exclude: frozenset[str] = frozenset()) -> list[str]:
            candidates = [order_id for order_id in order_ids if order_id not in exclude]
            return rng.sample(candidates, min(len(candidates), _count(fraction, len(order_ids))))

        concurrent = pick(mix.concurrent_duplicates)
        conflicts = pick(mix.conflicts, exclude=frozenset(concurrent))
        late = pick(mix.late_duplicates, exclude=frozenset(concurrent + conflicts))
        retries = set(pick(mix.producer_retries, exclude=frozenset(concurrent)))
        in_window = set(
            pick(
                mix.conflicts_in_window, exclude=frozenset(concurrent + conflicts + late) | retries
            )
        )
        return cls(concurrent, conflicts, late, retries, in_window)


@dataclass(frozen=True)
class _Orders:
    bodies: dict[str, str]
    hashes: dict[str, str]

    def send(
        self, kind: SendKind, phase: Phase, order_id: str, *, scheduled_together: bool = False
    ) -> PlannedSend:
        """A send of the order's own payload."""
        body, request_hash = self.bodies[order_id], self.hashes[order_id]
        return PlannedSend(
            kind,
            phase,
            order_id,
            body,
            order_id,
            request_hash,
            scheduled_together=scheduled_together,
        )

    def reuse(self, kind: SendKind, phase: Phase, order_id: str, suffix: str) -> PlannedSend:
        """A send of a different payload under the order's id."""
        body = reused_body(self.bodies[order_id], suffix)
        return PlannedSend(kind, phase, order_id, body, order_id, request_hash_of(body))


def _first_phase(
    orders: _Orders, picks: _Picks, poison: list[PlannedSend], rng: random.Random
) -> list[PlannedSend]:
    # Units keep a producer retry (and an in-window conflict) right behind its original, as
    # they come at once, while the units themselves are shuffled.
    units: list[list[PlannedSend]] = []
    for order_id in orders.bodies:
        if order_id in picks.concurrent:
            continue
        unit = [orders.send(SendKind.ORIGINAL, Phase.FIRST, order_id)]
        if order_id in picks.retries:
            unit.append(orders.send(SendKind.PRODUCER_RETRY, Phase.FIRST, order_id))
        if order_id in picks.in_window:
            unit.append(
                orders.reuse(SendKind.CONFLICT_IN_WINDOW, Phase.FIRST, order_id, "-in-window")
            )
        units.append(unit)
    units.extend([send] for send in poison)
    rng.shuffle(units)
    first = [send for unit in units for send in unit]
    # The first copies of concurrent duplicates go last in the first phase, scheduled for the
    # instant their second copies will also appear.
    first.extend(
        orders.send(SendKind.ORIGINAL, Phase.FIRST, order_id, scheduled_together=True)
        for order_id in picks.concurrent
    )
    return first


def _after_window(orders: _Orders, picks: _Picks) -> list[PlannedSend]:
    after = [
        orders.send(
            SendKind.CONCURRENT_DUPLICATE, Phase.AFTER_WINDOW, order_id, scheduled_together=True
        )
        for order_id in picks.concurrent
    ]
    after += [
        orders.send(SendKind.LATE_DUPLICATE, Phase.AFTER_WINDOW, order_id)
        for order_id in picks.late
    ]
    after += [
        orders.reuse(SendKind.CONFLICT, Phase.AFTER_WINDOW, order_id, "-reused")
        for order_id in picks.conflicts
    ]
    return after


def _status(kind: StatusKind, phase: Phase, change: OrderStatusChanged) -> PlannedStatus:
    return PlannedStatus(
        kind,
        phase,
        change.order_id,
        change.status.value,
        change.version,
        change.message_id,
        change.body().decode("utf-8"),
    )


def plan_status_updates(
    order_ids: list[str], rng: random.Random, *, reorder: bool
) -> list[PlannedStatus]:
    at = datetime.fromisoformat(STATUS_CHANGED_AT)
    first: list[list[PlannedStatus]] = []
    after: list[PlannedStatus] = []
    for order_id in order_ids:
        draw, path = rng.random(), STATUS_PATHS[-1][1]
        for weight, candidate in STATUS_PATHS:
            if draw < weight:
                path = candidate
                break
            draw -= weight
        steps = [
            _status(
                StatusKind.UPDATE, Phase.FIRST, OrderStatusChanged.of(order_id, s, changed_at=at)
            )
            for s in path
        ]
        if rng.random() < STRAY_PLACED:
            stray = OrderStatusChanged.of(
                order_id, OrderStatus.PLACED, changed_at=at, version=STRAY_PLACED_VERSION
            )
            steps.append(_status(StatusKind.ILLEGAL, Phase.FIRST, stray))
        after += [
            PlannedStatus(
                **{**step.to_json(), "kind": StatusKind.DUPLICATE, "phase": Phase.AFTER_WINDOW}
            )
            for step in steps
            if step.kind is StatusKind.UPDATE and rng.random() < STATUS_DUPLICATES
        ]
        first.append(list(reversed(steps)) if reorder else steps)
    if not reorder:
        return [update for steps in first for update in steps] + after
    flat = [update for steps in first for update in steps]
    rng.shuffle(flat)
    rng.shuffle(after)
    return flat + after


# The longest id a plan derives from its run id: `<run id>-poison-00000`.
LONGEST_RUN_SUFFIX = len("-poison-00000")
MAX_RUN_ID_LENGTH = MAX_ID_LENGTH - LONGEST_RUN_SUFFIX


def check_run_id(run_id: str) -> str:
    """`run_id` if every id the plan derives from it is in the id grammar, else
    `InvalidIdError` naming the rule: a run never sends an order nobody could charge."""
    check_id(run_id)
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidIdError(
            f"a run id is at most {MAX_RUN_ID_LENGTH} characters, so that the ids derived "
            f"from it stay within the id rule ({ID_RULE})"
        )
    return run_id


def plan_load(
    orders: int,
    mix: LoadMix,
    *,
    seed: int,
    run_id: str,
    status_updates: bool = False,
    reorder: bool = False,
    cancels: int = 0,
) -> LoadPlan:
    """With `cancels`, that many stored orders are cancelled at planned points; the
    synthetic status updates then go to the other orders only, so every cancelled order's
    status comes from the saga alone (and `final_status_mismatch` can judge it)."""
    if orders < 1:
        raise ValueError("orders must be at least 1")
    check_run_id(run_id)
    rng = random.Random(seed)
    order_ids = [f"{run_id}-{number:06d}" for number in range(orders)]
    bodies = {order_id: order_body(order_id, rng) for order_id in order_ids}
    planned = _Orders(
        bodies, {order_id: request_hash_of(body) for order_id, body in bodies.items()}
    )
    picks = _Picks.draw(order_ids, mix, rng)
    poison = poison_sends(run_id, _count(mix.poison, orders), rng)
    sends = _first_phase(planned, picks, poison, rng) + _after_window(planned, picks)
    # Drawn from a generator of their own so a plan without cancels is what it always was.
    planned_cancels = plan_cancels(order_ids, cancels, random.Random(f"{seed}:cancels"))
    cancelled = {cancel.order_id for cancel in planned_cancels}
    others = [order_id for order_id in order_ids if order_id not in cancelled]
    statuses = plan_status_updates(others, rng, reorder=reorder) if status_updates else []
    return LoadPlan(run_id, seed, orders, tuple(sends), tuple(statuses), tuple(planned_cancels))


def plan_to_json(plan: LoadPlan, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": plan.run_id,
        "seed": plan.seed,
        "orders": plan.orders,
        **extra,
        "sends": [send.to_json() for send in plan.sends],
        "status_updates": [update.to_json() for update in plan.status_updates],
        "cancels": [cancel.to_json() for cancel in plan.cancels],
    }


def plan_from_json(data: dict[str, Any]) -> LoadPlan:
    return LoadPlan(
        run_id=data["run_id"],
        seed=data["seed"],
        orders=data["orders"],
        sends=tuple(PlannedSend.from_json(send) for send in data["sends"]),
        status_updates=tuple(
            PlannedStatus.from_json(update) for update in data.get("status_updates", [])
        ),
        cancels=tuple(PlannedCancel.from_json(cancel) for cancel in data.get("cancels", [])),
    )
