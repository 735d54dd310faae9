"""Order status updates: absolute state with a version, applied in any order, any number of times.

`OrderStatusChanged` carries the order's resulting status and a version that increases per
order. Applying one is naturally idempotent: a version at or below the stored one is stale and
changes nothing, a newer one replaces the state. No dedup store is needed, and gaps are fine
because the state is absolute.

Which transitions are legal (a newer version must be reachable from the stored status):

| from \\ to | paid | shipped | delivered | cancelled | refunded |
| --- | --- | --- | --- | --- | --- |
| placed | yes | yes (via paid) | yes (via paid, shipped) | yes | yes (via cancelled) |
| paid | - | yes | yes (via shipped) | yes | yes (via cancelled) |
| shipped | no | - | yes | no | no |
| delivered | no | no | - | no | no |
| cancelled | no | no | no | - | yes |
| refunded | no | no | no | no | - |

"Via" rows are what a gap looks like: a later update overtook an earlier one, which then arrives
stale. Nothing follows `refunded` or `delivered`. Whether an order is cancelled or shipped is
not decided here but on the order document (`domain/saga.py`): these updates only report it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field, StrictInt, ValidationError

from orders.domain.ids import nonce_after, with_nonce
from orders.domain.messages import (
    DeadLetterReason,
    MessageRejected,
    describe_validation_error,
    validate_small_message,
)
from orders.domain.model import WIRE_NAMES, EntityId
from orders.domain.received import ReceivedOrderMessage
from orders.domain.untrusted_json import UntrustedJsonError, decode_untrusted_json
from orders.exceptions import InvalidCancelRequestError

MAX_STATUS_BODY_BYTES = 2048
MAX_VERSION = 1_000_000_000
# The status document keeps the newest this many changes. Enough for every order: the state
# machine has no cycle and a status never follows itself, so a legal history holds each status
# at most once (six today); the bound leaves room for new states and caps what a future cycle,
# or a document written by something else, could grow to.
MAX_HISTORY = 20


class OrderStatus(StrEnum):
    PLACED = "placed"
    PAID = "paid"
    SHIPPED = "shipped"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"
    REFUNDED = "refunded"  # cancelled after it was charged, and the charge paid back


NEXT_STATUSES: dict[OrderStatus, frozenset[OrderStatus]] = {
    OrderStatus.PLACED: frozenset({OrderStatus.PAID, OrderStatus.CANCELLED}),
    OrderStatus.PAID: frozenset({OrderStatus.SHIPPED, OrderStatus.CANCELLED}),
    OrderStatus.SHIPPED: frozenset({OrderStatus.DELIVERED}),
    OrderStatus.DELIVERED: frozenset(),
    OrderStatus.CANCELLED: frozenset({OrderStatus.REFUNDED}),
    OrderStatus.REFUNDED: frozenset(),
}

# The versions this application's own producers use: one per status, in the order they can
# happen, so billing, shipping and the HTTP API never need to coordinate a counter.
PRODUCER_VERSIONS: dict[OrderStatus, int] = {
    OrderStatus.PLACED: 1,
    OrderStatus.PAID: 2,
    OrderStatus.SHIPPED: 3,
    OrderStatus.DELIVERED: 4,
    OrderStatus.CANCELLED: 5,
    OrderStatus.REFUNDED: 6,
}


def reachable(source: OrderStatus, target: OrderStatus) -> bool:
    """Whether `target` can follow `source` through one or more legal transitions."""
    seen: set[OrderStatus] = set()
    frontier = set(NEXT_STATUSES[source])
    while frontier:
        status = frontier.pop()
        if status == target:
            return True
        seen.add(status)
        frontier |= NEXT_STATUSES[status] - seen
    return False


class OrderStatusChanged(BaseModel):
    model_config = WIRE_NAMES

    order_id: EntityId
    # Strict elsewhere; here a JSON string is the only way to spell an enum member.
    status: Annotated[OrderStatus, Field(strict=False)]
    version: Annotated[StrictInt, Field(ge=1, le=MAX_VERSION)]
    changed_at: Annotated[str, Field(min_length=1, max_length=40)]
    reason: Annotated[str | None, Field(max_length=200)] = None

    @classmethod
    def of(
        cls,
        order_id: str,
        status: OrderStatus,
        *,
        changed_at: datetime,
        version: int | None = None,
        reason: str | None = None,
    ) -> OrderStatusChanged:
        return cls.model_validate(
            {
                "orderId": order_id,
                "status": status.value,
                "version": PRODUCER_VERSIONS[status] if version is None else version,
                "changedAt": changed_at.isoformat(),
                "reason": reason,
            }
        )

    @property
    def message_id(self) -> str:
        """The update's bare id, `orderId:status:version`: what it is named by. The publisher
        sends it under this id and a nonce (`new_status_message_id`)."""
        return status_message_id(self.order_id, self.version)

    def body(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode("utf-8")


def status_message_id(order_id: str, version: int) -> str:
    """The bare id of an order's update to `version`: `orderId:status:version`."""
    return f"{order_id}:status:{version}"


def new_status_message_id(change: OrderStatusChanged) -> str:
    """The MessageId an update is published under: its bare id and a fresh random 128-bit
    nonce, drawn on every send. The bare id is predictable, and the status queue's duplicate
    detection remembers every MessageId from any sender: an update sent first under it by
    anyone with a send right would have the real one dropped as its duplicate. A re-send of
    the same update is another message to the broker, and a duplicate to the status consumer
    (its version is stale there, `judge_update`): versions, not MessageIds, make updates
    idempotent. At most 64 + 19 + 33 characters, inside Service Bus's 128."""
    return with_nonce(change.message_id)


# One entry of a status document's history: the status, its version and when it changed
# (`status`, `version`, `at`), and `late` when it arrived after a newer version was applied.
HistoryEntry = Mapping[str, object]
LATE = "late"


def history_entry(status: str, version: int, at: str, *, late: bool = False) -> HistoryEntry:
    entry: dict[str, object] = {"status": status, "version": version, "at": at}
    if late:
        entry[LATE] = True
    return entry


def entry_version(entry: HistoryEntry) -> int:
    version = entry.get("version")
    return version if isinstance(version, int) else 0


@dataclass(frozen=True)
class StoredStatus:
    """An order's status as stored: plain data, whatever store holds it (the store's version
    and fields stay in its adapter, which reads this off the status document)."""

    status: OrderStatus
    version: int
    history: tuple[HistoryEntry, ...] = ()

    @classmethod
    def placed(cls) -> StoredStatus:
        """The status of an order nothing has been stored about yet: placed."""
        return cls(OrderStatus.PLACED, PRODUCER_VERSIONS[OrderStatus.PLACED])


class Verdict(StrEnum):
    APPLY = "apply"
    STALE = "stale"
    ILLEGAL = "illegal"


def judge_update(stored: StoredStatus, update: OrderStatusChanged) -> Verdict:
    if update.version <= stored.version:
        return Verdict.STALE
    # A status never follows itself: a producer that changes nothing sends nothing, and this
    # keeps a misrouted `placed` illegal whatever order the updates arrive in.
    if reachable(stored.status, update.status):
        return Verdict.APPLY
    return Verdict.ILLEGAL


def history_after(stored: StoredStatus, update: OrderStatusChanged) -> tuple[HistoryEntry, ...]:
    """The history the status keeps once `update` applied: bounded, the newest last."""
    entry = history_entry(update.status.value, update.version, update.changed_at)
    return _bounded((*stored.history, entry))


def history_with_late(
    stored: StoredStatus, update: OrderStatusChanged
) -> tuple[HistoryEntry, ...] | None:
    """The history once a stale `update` is recorded in its place among the versions (it
    happened, it only arrived after a newer one), or None when there is nothing to record:
    its version is already there, it is older than everything the bound keeps, or it cannot
    sit between its neighbours (a stray that never happened to this order)."""
    versions = [entry_version(entry) for entry in stored.history]
    if update.version in versions or update.version == stored.version:
        return None
    before = [e for e in stored.history if entry_version(e) < update.version]
    after = [e for e in stored.history if entry_version(e) > update.version]
    previous = _status_of(before[-1]) if before else OrderStatus.PLACED
    following = _status_of(after[0]) if after else stored.status
    if previous is None or following is None:
        return None
    if not (reachable(previous, update.status) and reachable(update.status, following)):
        return None
    entry = history_entry(update.status.value, update.version, update.changed_at, late=True)
    kept = _bounded((*before, entry, *after))
    return kept if entry in kept else None


def _status_of(entry: HistoryEntry) -> OrderStatus | None:
    try:
        return OrderStatus(str(entry.get("status")))
    except ValueError:
        return None


def _bounded(history: tuple[HistoryEntry, ...]) -> tuple[HistoryEntry, ...]:
    return tuple(sorted(history, key=entry_version))[-MAX_HISTORY:]


def parse_status_changed(message: ReceivedOrderMessage) -> OrderStatusChanged:
    """Total and bounded, like every parser of untrusted bodies here."""
    update = validate_small_message(
        message, OrderStatusChanged, max_bytes=MAX_STATUS_BODY_BYTES, what="status updates"
    )
    # The bare id too: updates sent before the nonce, and producers of our own tooling.
    if nonce_after(message.message_id, update.message_id) is None:
        raise MessageRejected(
            DeadLetterReason.MESSAGE_ID_MISMATCH,
            f"MessageId {message.message_id!r} is not {update.message_id!r} "
            "(orderId:status:version), alone or followed by ':' and 32 lowercase hex digits",
            order_id=update.order_id,
        )
    return update


MAX_CANCEL_BODY_BYTES = 1024


class CancelRequest(BaseModel):
    """The body of POST /api/orders/{orderId}/cancel (empty, or a reason)."""

    model_config = WIRE_NAMES

    reason: Annotated[str | None, Field(max_length=200)] = None


def parse_cancel_request(body: bytes) -> CancelRequest:
    """Total and bounded; an empty body is a cancel without a reason."""
    if not body.strip():
        return CancelRequest()
    if len(body) > MAX_CANCEL_BODY_BYTES:
        raise InvalidCancelRequestError(
            f"body is {len(body)} bytes; a cancel request is at most {MAX_CANCEL_BODY_BYTES}"
        )
    try:
        return CancelRequest.model_validate(decode_untrusted_json(body))
    except UntrustedJsonError as exc:
        raise InvalidCancelRequestError(str(exc)) from None
    except ValidationError as exc:
        raise InvalidCancelRequestError(describe_validation_error(exc)) from None
    except Exception as exc:
        raise InvalidCancelRequestError(
            f"body could not be validated: {type(exc).__name__}"
        ) from None
