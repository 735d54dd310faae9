"""One delivery of a message across its in-place attempts (`exactly_once._backoff.Retrier`).

A delivery may be decided several times before it is settled: after a transient failure, or
an unexpected one retried at once. What must stay the same across those attempts, and what
must be said once, lives here, in a context variable the `Retrier` opens per delivery:

- the delivery's id, so that its claims have one owner: an attempt that finds the claim an
  earlier attempt of the same delivery left (a create that timed out but landed, a completion
  that failed) takes it back at once instead of waiting out its lease as if another process
  held it (the broker's lock token names a delivery where there is one: `delivery_owner`);
- the answers a two-phase call got whose record was not completed, so the next attempt records
  the answer it already has instead of calling the downstream again;
- the attempt's number, and whether an unexpected failure's traceback was logged already;
- the last attempt's outcome line, logged once, when the delivery's decision is final.

Outside a `Retrier` (a loop of your own, `with_receiver`) there is no open delivery: each call
is a delivery of its own, and everything above happens at once.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from exactly_once._records import JsonInput

# Logs one outcome line, given how many attempts the delivery took and, when the delivery's
# settled decision differs from its last attempt's (a delayed retry instead of an abandon), that.
OutcomeLine = Callable[[int, object], None]


@dataclass
class DeliveryAttempts:
    """What one delivery keeps across its in-place attempts."""

    delivery_id: str
    attempt: int = 1
    """The attempt running now (1 for the first)."""
    answers: dict[tuple[str, str], JsonInput] = field(default_factory=dict)
    """(record key, downstream key) -> the downstream's answer, while its record is not yet
    completed."""
    unexpected_logged: bool = False
    """Whether an unexpected failure of this delivery was logged with its traceback."""
    outcome_line: OutcomeLine | None = None
    """The latest attempt's outcome line, logged when the delivery's decision is final."""
    consumer: str | None = None
    """The consumer deciding it, once one has (for the backoff lines)."""
    message_id: str | None = None
    """The MessageId it is decided under (the original's, for a delayed retry's copy)."""
    key: str | None = None
    """The message's key as its consumer defines it, once the consumer found it (for the
    lines its claims log)."""


_current: ContextVar[DeliveryAttempts | None] = ContextVar("exactly_once_delivery", default=None)


def current_delivery() -> DeliveryAttempts | None:
    """The delivery whose attempt runs now, if a `Retrier` opened one."""
    return _current.get()


@contextlib.contextmanager
def one_delivery() -> Iterator[DeliveryAttempts]:
    """Open a delivery for the attempts made inside. A retrier inside another's attempt opens
    a delivery of its own: it decides some other message (or decides this one anew), and the
    outer delivery is back when it is done."""
    attempts = DeliveryAttempts(uuid.uuid4().hex[:12])
    token = _current.set(attempts)
    try:
        yield attempts
    finally:
        _current.reset(token)


def delivery_owner(prefix: str, delivery_id: str | None = None) -> str:
    """`<prefix>/<delivery>`: the owner of one delivery's claims, the same on each of its
    attempts. The delivery is `delivery_id` when the broker names it (a lock token), else the
    open delivery's id, else a new one (a call outside a `Retrier` is a delivery of its own).

    A claim belongs to one delivery, not to the process: a second copy of the message (here or
    elsewhere) is another delivery, and waits for this one instead of taking its claim."""
    if not delivery_id:
        opened = _current.get()
        delivery_id = opened.delivery_id if opened is not None else uuid.uuid4().hex[:12]
    return f"{prefix}/{delivery_id}"
