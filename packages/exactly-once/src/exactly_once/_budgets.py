"""Budgets that fit the host: how long one delivery may hold its message, checked against how
long the host renews the message's lock, when the consumer (or the worker) is built.

A delivery holds its message for the in-place backoff's budget (`Backoff.budget_seconds`: no
attempt starts later than that after the first) plus its last attempt. Its lock must stay
renewed all that time: past the renewal horizon the lock lapses after one more lock duration,
the broker delivers the message again and the delivery is counted, which is exactly what
backing off in place is for avoiding. So a budget that cannot fit is refused at start-up, with
both numbers, never found out on a message in an outage.

The horizon is the host's: in Functions, host.json's `maxAutoLockRenewalDuration` (its default
is 5 minutes; `LockRenewal.from_host_json` reads it); in `run_worker`, the worker's
`max_lock_renewal_seconds`. The attempt's bound is yours to declare (`attempt_seconds`): by
default 60 s, two store requests each under the Cosmos DB SDK's own retry horizon for throttling
(`RetryOptions.MaxWaitTimeInSeconds`, 30 s), a claim or a completion around an effect.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from exactly_once._backoff import Backoff
from exactly_once.exceptions import BudgetError

# The Functions host's `maxAutoLockRenewalDuration` when host.json does not set it.
FUNCTIONS_DEFAULT_RENEWAL_SECONDS = 300.0
# One attempt's bound unless you declare yours: two store requests, each retried by the Cosmos
# DB SDK for up to 30 s on throttling (its RetryOptions.MaxWaitTimeInSeconds default).
DEFAULT_ATTEMPT_SECONDS = 60.0

# A .NET TimeSpan as host.json writes it: [d.]hh:mm:ss[.fffffff]
_TIMESPAN = re.compile(r"(?:(\d+)\.)?(\d+):(\d+):(\d+(?:\.\d+)?)")


def timespan_seconds(value: str) -> float:
    """host.json's `[d.]hh:mm:ss[.f]` as seconds (ValueError for anything else)."""
    found = _TIMESPAN.fullmatch(value.strip())
    if found is None:
        raise ValueError(f"{value!r} is not a host.json timespan ([d.]hh:mm:ss)")
    days, hours, minutes, seconds = found.groups()
    return int(days or 0) * 86_400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


@dataclass(frozen=True)
class LockRenewal:
    """How long the host renews a delivered message's lock (`renewal_seconds`), and the longest
    one attempt of the consumer may take (`attempt_seconds`, your bound). The defaults are the
    Functions host's (`maxAutoLockRenewalDuration` 5 minutes) and `DEFAULT_ATTEMPT_SECONDS`."""

    renewal_seconds: float = FUNCTIONS_DEFAULT_RENEWAL_SECONDS
    attempt_seconds: float = DEFAULT_ATTEMPT_SECONDS

    def __post_init__(self) -> None:
        if self.renewal_seconds <= 0 or self.attempt_seconds <= 0:
            raise BudgetError("renewal_seconds and attempt_seconds must be positive")

    @classmethod
    def from_host_json(
        cls, path: str | Path, *, attempt_seconds: float = DEFAULT_ATTEMPT_SECONDS
    ) -> LockRenewal:
        """The Functions host's horizon from its host.json (`extensions.serviceBus.
        maxAutoLockRenewalDuration`, 5 minutes when it is not set)."""
        host = json.loads(Path(path).read_text(encoding="utf-8"))
        service_bus = host.get("extensions", {}).get("serviceBus", {})
        renewal = service_bus.get("maxAutoLockRenewalDuration")
        seconds = (
            FUNCTIONS_DEFAULT_RENEWAL_SECONDS if renewal is None else timespan_seconds(renewal)
        )
        return cls(renewal_seconds=seconds, attempt_seconds=attempt_seconds)

    def check(self, backoff: Backoff, *, what: str, holds: int = 1) -> None:
        """Refuse (`BudgetError`, naming both numbers) a backoff whose budget plus the longest
        attempt, `holds` times over, does not stay under the renewal horizon. `holds` is how
        many such spans one renewal must cover: 2 where a message may wait for a slot that
        another message holds as long (`run_worker`'s received-but-waiting messages)."""
        held = holds * (backoff.budget_seconds + self.attempt_seconds)
        if held >= self.renewal_seconds:
            times = f"{holds} x " if holds > 1 else ""
            raise BudgetError(
                f"{what}: a delivery may hold its message {held:g} s ({times}the backoff "
                f"budget of {backoff.budget_seconds:g} s + the longest attempt of "
                f"{self.attempt_seconds:g} s), not under the lock-renewal horizon of "
                f"{self.renewal_seconds:g} s: its lock would lapse and the broker count another "
                "delivery. Lower the backoff's budget_seconds or raise the renewal "
                "(maxAutoLockRenewalDuration in host.json, max_lock_renewal_seconds for a worker)"
            )


FUNCTIONS_LOCK_RENEWAL = LockRenewal()
"""The Functions host's default horizon with the default attempt bound."""
