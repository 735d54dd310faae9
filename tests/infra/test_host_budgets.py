"""host.json against the core's budgets and the Bicep's lock: how long one call may hold a
message (the in-place backoff's budget plus the longest attempt) must fit under the host's
lock renewal, and a prefetched message, whose lock nobody renews while it waits for a call,
must not wait longer than the entities' lockDuration."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from exactly_once import Backoff, BudgetError
from exactly_once._budgets import DEFAULT_ATTEMPT_SECONDS, timespan_seconds
from exactly_once.retries import LockRenewal
from orders.entrypoints.functions import function_retrier, hold_function_budgets

from .bicep_model import REPO_ROOT, named_resource, resolve

HOST_JSON = REPO_ROOT / "host.json"
MESSAGING = "modules/messaging.bicep"


def service_bus() -> dict[str, object]:
    host = json.loads(HOST_JSON.read_text(encoding="utf-8"))
    found: dict[str, object] = host["extensions"]["serviceBus"]
    return found


def lock_seconds() -> float:
    """The lockDuration every entity of messaging.bicep shares (one variable)."""
    queue = named_resource(MESSAGING, "Microsoft.ServiceBus/namespaces/queues", "orders")
    duration = resolve(MESSAGING, queue.body["properties"]["lockDuration"])
    found = re.fullmatch(r"PT(?:(\d+)M)?(?:(\d+)S)?", str(duration))
    assert found and any(found.groups()), duration
    minutes, seconds = (int(g or 0) for g in found.groups())
    return minutes * 60.0 + seconds


def held_seconds(backoff: Backoff) -> float:
    """The longest one call holds a message: its last attempt starts within the budget."""
    return backoff.budget_seconds + DEFAULT_ATTEMPT_SECONDS


def prefetch_fits(prefetch: int, calls: int, held: float, lock: float) -> bool:
    """Whether a prefetched message gets a call before its unrenewed lock lapses: with every
    call holding its message `held` seconds, the prefetched wait in rounds of `calls`."""
    return prefetch == 0 or math.ceil(prefetch / calls) * held < lock


def test_the_host_renews_locks_for_longer_than_a_call_may_hold_its_message() -> None:
    renewal = timespan_seconds(str(service_bus()["maxAutoLockRenewalDuration"]))
    for backoff in (Backoff(), function_retrier.backoff):
        assert held_seconds(backoff) < renewal
    # The same check function_app.py makes at start-up, on the same file.
    assert hold_function_budgets(HOST_JSON) == LockRenewal(renewal_seconds=renewal)
    host = json.loads(HOST_JSON.read_text(encoding="utf-8"))
    timeout = host.get("functionTimeout")
    assert timeout is None or timespan_seconds(timeout) > renewal


def test_prefetched_messages_do_not_outwait_their_lock() -> None:
    host = service_bus()
    held = held_seconds(function_retrier.backoff)
    lock = lock_seconds()
    prefetch = int(str(host["prefetchCount"]))
    for calls in (host["maxConcurrentCalls"], host["maxConcurrentSessions"]):
        assert prefetch_fits(prefetch, int(str(calls)), held, lock), (prefetch, calls, lock)
    # What host.json had before: 16 prefetched behind 16 calls, each held up to 180 s > PT2M.
    assert not prefetch_fits(16, 16, held, lock)


def test_a_host_json_whose_renewal_cannot_hold_the_backoff_stops_the_app(tmp_path: Path) -> None:
    short = tmp_path / "host.json"
    short.write_text(
        json.dumps({"extensions": {"serviceBus": {"maxAutoLockRenewalDuration": "00:02:00"}}})
    )
    with pytest.raises(BudgetError, match=r"180 s .* horizon of 120 s"):
        hold_function_budgets(short)
