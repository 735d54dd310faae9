"""`ConsumerOptions`: every setting of a consumer besides its name, its parser and its store,
in one object that `exactly_once(...)` and `ExactlyOnceConsumer` both take (0.1 spelt them out
as keyword arguments of each).

    @exactly_once(
        consumer="billing",
        parse=Invoice.model_validate_json,
        store=store,
        options=ConsumerOptions(lease_seconds=60, retention=Retention(...)),
    )

The options are checked when they are built (a `key_prefix` that is empty, a cache that would
outlive the records it stands for), and shared safely: they are frozen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from exactly_once._budgets import FUNCTIONS_LOCK_RENEWAL, LockRenewal
from exactly_once._claims import DEFAULT_MAX_WAIT_SECONDS, CompletionRetries, pending_completions
from exactly_once._message_keys import KeyOf, PayloadOf
from exactly_once._records import DEFAULT_EXPIRES_AFTER_SECONDS, DEFAULT_LEASE_SECONDS
from exactly_once._retention import DEFAULT_RETENTION, Retention
from exactly_once.exceptions import RetentionError

if TYPE_CHECKING:
    from exactly_once._backoff import Backoff
    from exactly_once._cache import LocalCache
    from exactly_once._transient import Transient
    from exactly_once.delayed_retries import DelayedRetries
    from exactly_once.telemetry import Telemetry

# The options of a consumer (and of `@idempotent`, `IdempotencyKeys`: `CompletionRetries`), the
# types of the functions they take, and their defaults.
__all__ = [
    "DEFAULT_EXPIRES_AFTER_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_WAIT_SECONDS",
    "DEFAULT_RETENTION",
    "CompletionRetries",
    "ConsumerOptions",
    "KeyOf",
    "KeyPartition",
    "PayloadOf",
    "pending_completions",
]

Message = TypeVar("Message")

# A message body above this is dead-lettered before your parser sees it: the Standard tier's
# maximum message size (256 KB, headers included), so no body the broker can deliver is larger.
# On Premium (1 MiB by default, up to 100 MB) raise `max_body_bytes` with the entity's limit.
# (An HTTP request body has its own bound: `exactly_once.http.DEFAULT_MAX_REQUEST_BYTES`.)
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
# The key's home of a message, from its key (the MessageId by default; see
# `Effects.key_partition`).
KeyPartition = Callable[[str], str]


@dataclass(frozen=True)
class ConsumerOptions(Generic[Message]):
    """How a consumer claims, names, bounds, retries and records its messages; every field has
    a default, so `ConsumerOptions()` is a consumer as the guide describes it.

    - `owner`: names this process in its claims (the consumer's name and a random suffix).
    - `lease_seconds`: how long a claim outlives its owner's last write.
    - `max_wait_seconds`: how long a delivery waits for another delivery's live claim before
      handing the message back.
    - `telemetry`: the span and metrics of each delivery (`exactly_once.telemetry`).
    - `max_body_bytes`: a larger body is dead-lettered unread (`DEFAULT_MAX_MESSAGE_BYTES`).
    - `retention`: the ttl of every record the consumer writes.
    - `key_partition`: the key's home from the key (one partition per key by default).
    - `backoff`: how a transient failure is retried in place (`Backoff`).
    - `key`: names a message's records (its MessageId by default; `from_message`,
      `cloud_event_key`); `key_prefix` scopes them (the consumer's name by default, so a
      fixed prefix keeps them over a rename).
    - `payload`: the part of the parsed message a resend must match (the whole body by
      default).
    - `cache`: answers an exact repeat of a completed key without the store (its ttl must be
      below the retention's).
    - `lock_renewal`: the host's lock-renewal horizon, which `backoff`'s budget must fit
      (checked when the consumer is built: `BudgetError`).
    - `transient`: exceptions of yours (types, or a predicate) backed off in place as
      `transient_failure` (`exactly_once._transient`; raising `RetryLater` says the same).
    - `delayed_retries`: how often and how much later a failure the backoff did not fix comes
      back, where the host can schedule it (`DelayedRetries()`: 3 times, 1, 2 and 3 minutes
      later).

    Raises `ValueError` for an empty `key_prefix`, `RetentionError` for a cache whose ttl is
    not below the records' (it could call a message a duplicate after the store forgot it)."""

    owner: str | None = None
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS
    telemetry: Telemetry | None = None
    max_body_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    retention: Retention = DEFAULT_RETENTION
    key_partition: KeyPartition | None = None
    backoff: Backoff | None = None
    key: KeyOf[Message] | None = None
    key_prefix: str | None = None
    payload: PayloadOf[Message] | None = None
    cache: LocalCache | None = None
    lock_renewal: LockRenewal = FUNCTIONS_LOCK_RENEWAL
    transient: Transient | None = None
    delayed_retries: DelayedRetries | None = None

    def __post_init__(self) -> None:
        if self.key_prefix is not None and not self.key_prefix:
            raise ValueError("key_prefix must not be empty: leave it None to scope by consumer")
        if self.cache is not None and self.cache.ttl_seconds >= self.retention.ttl_seconds:
            raise RetentionError(
                f"the cache's ttl_seconds={self.cache.ttl_seconds:g} is not below the records' "
                f"ttl of {self.retention.ttl_seconds} s: it could call a message a duplicate "
                "after the store forgot its record"
            )
