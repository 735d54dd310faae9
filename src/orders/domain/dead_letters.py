"""Dead letters as operators handle them: what one holds, which ones a command means, and when
resubmitting one would do harm. Nothing here talks to a broker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orders.domain.messages import DeadLetterReason
from orders.domain.untrusted_json import UntrustedJsonError, decode_untrusted_json

RESUBMITTED_AT = "ResubmittedAt"
RESUBMITTED_BY = "ResubmittedBy"
RESUBMIT_COUNT = "ResubmitCount"
# Set by the broker on a dead-lettered copy; a resubmitted message starts without them.
DEAD_LETTER_PROPERTIES = frozenset({"DeadLetterReason", "DeadLetterErrorDescription"})
PREVIEW_CHARS = 120
# Service Bus sequence numbers are positive 64-bit integers; anything else names no message.
MAX_SEQUENCE_NUMBER = 2**63 - 1


def is_sequence_number(value: int) -> bool:
    return 1 <= value <= MAX_SEQUENCE_NUMBER


def parse_sequence_number(text: str) -> int | None:
    """A sequence number from untrusted text (a form field, a path), or None: decimal digits
    only, bounded before conversion so a huge string costs nothing."""
    if not 1 <= len(text) <= len(str(MAX_SEQUENCE_NUMBER)) or not text.isascii():
        return None
    if not text.isdigit():
        return None
    value = int(text)
    return value if is_sequence_number(value) else None


def printable(text: str) -> str:
    """`text` with every unprintable character (controls, line separators) JSON-escaped and
    everything else, quotes included, kept as it is: for untrusted ids and bodies on a screen."""
    return "".join(char if char.isprintable() else json.dumps(char)[1:-1] for char in text)


@dataclass(frozen=True)
class DeadLetteredMessage:
    """A dead-lettered message as the load run's audit reads it: no sequence number, because
    the audit matches by MessageId and reason."""

    message_id: str | None
    reason: str | None
    description: str | None
    body: bytes


@dataclass(frozen=True)
class DeadLetter:
    sequence_number: int
    message_id: str | None
    reason: str | None
    description: str | None
    delivery_count: int
    enqueued_at: datetime | None
    body: bytes
    application_properties: dict[str, Any] = field(default_factory=dict)

    @property
    def preview(self) -> str:
        """The start of the body as a person reads it: quotes as they are, anything
        unprintable escaped (bodies are untrusted; a newline must not forge a table row)."""
        text = self.body[:PREVIEW_CHARS].decode("utf-8", errors="replace")
        return printable(text) + ("..." if len(self.body) > PREVIEW_CHARS else "")

    def to_json(self, *, with_body: bool = False) -> dict[str, Any]:
        view: dict[str, Any] = {
            "sequenceNumber": self.sequence_number,
            "messageId": self.message_id,
            "reason": self.reason,
            "description": self.description,
            "deliveryCount": self.delivery_count,
            "enqueuedAt": self.enqueued_at.isoformat() if self.enqueued_at else None,
            "bodyPreview": self.preview,
        }
        if with_body:
            view["body"] = self.body.decode("utf-8", errors="replace")
            view["applicationProperties"] = {
                key: str(value) for key, value in self.application_properties.items()
            }
        return view


@dataclass
class DeadLetterOutcome:
    """What a resubmit or purge did, by sequence number: `passed_over` were locked on the way
    to a selected one and given back (not selected, or refused), their delivery count +1."""

    done: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)
    passed_over: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Selection:
    """Which dead letters a command acts on: given sequence numbers, one reason, or all."""

    sequence_numbers: frozenset[int] = frozenset()
    reason: str | None = None
    everything: bool = False

    def __post_init__(self) -> None:
        if not (self.sequence_numbers or self.reason or self.everything):
            raise ValueError("say which dead letters: sequence numbers, --reason or --all")

    def all_handled(self, done: Iterable[int], refused: Iterable[int]) -> bool:
        """Whether nothing more can match: every named sequence number was acted on or refused
        (so a command need not wait for an empty receive to know it is finished)."""
        if self.everything or self.reason is not None or not self.sequence_numbers:
            return False
        return self.sequence_numbers <= {*done, *refused}

    def matches(self, dead: DeadLetter) -> bool:
        if self.everything:
            return True
        if self.sequence_numbers and dead.sequence_number not in self.sequence_numbers:
            return False
        return self.reason is None or dead.reason == self.reason


@dataclass(frozen=True)
class DeadLetterPlan:
    """What a resubmit or purge will do, decided on a peek before anything is locked.

    Service Bus hands out a queue's messages in order and cannot receive one by its sequence
    number, so a command reaches a dead letter only by locking every one before it. Those it
    does not act on (`passed_over`: not selected, or refused) are given back, and the broker
    counts that as a delivery: their delivery count goes up by one. Dead letters after the last
    target are never touched: the command receives no more than `reach` messages."""

    targets: frozenset[int]
    refused: dict[int, str]
    passed_over: tuple[int, ...]
    reach: int


def plan_for(
    selection: Selection,
    peeked: Iterable[DeadLetter],
    refusal: Callable[[DeadLetter], str | None] = lambda dead: None,
) -> DeadLetterPlan:
    """The plan for `selection` over the dead letters a peek found (oldest first)."""
    ordered = sorted(peeked, key=lambda dead: dead.sequence_number)
    refused: dict[int, str] = {}
    targets: set[int] = set()
    for dead in ordered:
        if not selection.matches(dead):
            continue
        why = refusal(dead)
        if why is None:
            targets.add(dead.sequence_number)
        else:
            refused[dead.sequence_number] = why
    last = max(targets, default=0)
    before_last = [dead.sequence_number for dead in ordered if dead.sequence_number <= last]
    return DeadLetterPlan(
        targets=frozenset(targets),
        refused=refused,
        passed_over=tuple(number for number in before_last if number not in targets),
        reach=len(before_last),
    )


def delivery_count_meaning(count: int) -> str:
    """What a dead letter's delivery count can be said to mean, and no more: the broker counts
    every delivery that did not remove the message, whoever received it (a consumer that
    abandoned it or lost its lock before it was dead-lettered, or an operator's command that
    passed over it since), and the dead letter does not say which."""
    if count == 0:
        return "0 (dead-lettered on its first delivery, and never passed over since)"
    return (
        f"{count} (deliveries that did not remove it: a consumer's abandons or lost locks "
        "before it was dead-lettered, and operator commands that passed over it since)"
    )


DELIVERY_COUNT_CAPTION = (
    "deliveries: the broker's count of deliveries that did not remove it (a consumer's "
    "abandons before it was dead-lettered, and resubmits or purges that passed over it since); "
    "0: dead-lettered on its first delivery and never passed over"
)


def resubmit_refusal(
    dead: DeadLetter, *, force: bool, now: datetime, duplicate_window: timedelta
) -> str | None:
    """Why resubmitting `dead` would do harm, or None when it is safe.

    Two cases: a reused orderId (the copy is the same different order: it would be refused
    again, and the alert would fire again), and a copy inside the duplicate-detection window
    (the broker compares MessageId only and would drop it silently while reporting success).
    `force` overrides the first, never the second: a silent drop helps nobody.
    """
    if dead.reason == DeadLetterReason.REQUEST_HASH_MISMATCH and not force:
        return (
            "RequestHashMismatch: this is a different order under an orderId that is already "
            "stored; resubmitting it dead-letters it again. Fix the producer (a new orderId) "
            "or, if the stored order was removed on purpose, resubmit with --force"
        )
    if dead.enqueued_at is not None and now - dead.enqueued_at < duplicate_window:
        wait = (dead.enqueued_at + duplicate_window - now).total_seconds()
        return (
            "first sent inside the queue's duplicate-detection window: the broker would drop "
            f"the copy silently; resubmit in {wait:.0f} s"
        )
    return None


def resubmitted_properties(dead: DeadLetter, *, by: str, at: datetime) -> dict[str, Any]:
    """The original application properties, without the broker's dead-letter ones, plus when
    and by whom it was resubmitted (and how often, so a loop shows)."""
    properties = {
        key: value
        for key, value in dead.application_properties.items()
        if key not in DEAD_LETTER_PROPERTIES
    }
    try:
        count = int(str(properties.get(RESUBMIT_COUNT, 0))) + 1
    except ValueError:  # the producer's properties are untrusted: count from here
        count = 1
    properties.update({RESUBMITTED_AT: at.isoformat(), RESUBMITTED_BY: by, RESUBMIT_COUNT: count})
    return properties


def names_order(dead: DeadLetter, order_id: str) -> bool:
    """Whether a dead letter is about `order_id`: its MessageId is the order's (an order) or
    starts with it (`orderId:status:version`), or its body's `orderId` is it (an event, whose
    MessageId is drawn). The body is untrusted: one that is not a JSON object names nothing."""
    if dead.message_id == order_id or (dead.message_id or "").startswith(f"{order_id}:"):
        return True
    try:
        body = decode_untrusted_json(dead.body)
    except UntrustedJsonError:
        return False
    return isinstance(body, dict) and body.get("orderId") == order_id
