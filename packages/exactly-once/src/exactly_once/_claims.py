"""The claim state machine, once for every claimed record: claim -> judge -> wait, take over,
or stop -> complete.

Every two-phase effect (the orchestrator's `two_phase`, which the orders app's charge and
refund run on) goes through `Claims.own` and `Claims.finish`; only the records differ. The
HTTP keys and `@idempotent` complete through `Claims.finish_or_keep`: their work has run when
they complete, so a completion that fails keeps the claim rather than giving it up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from exactly_once._attempts import current_delivery
from exactly_once._logs import log_value
from exactly_once._ports import RecordStore
from exactly_once._records import (
    DEFAULT_LEASE_SECONDS,
    JsonInput,
    Record,
    RecordStatus,
    lease_is_live,
    lease_seconds_left,
)
from exactly_once.decisions import naming
from exactly_once.exceptions import (
    CompletionFailedError,
    InProgressElsewhereError,
    PayloadMismatchError,
    PreviouslyFailedError,
    RecordChangedError,
    RecordExistsError,
    TransientStoreError,
)
from exactly_once.telemetry import took_over

logger = logging.getLogger("exactly_once")

# How long a delivery waits for another owner's live lease before handing the message back.
DEFAULT_MAX_WAIT_SECONDS = 30.0
POLL_SECONDS = 0.5
# A record or document that keeps moving under us (every write fenced by the ETag it read
# loses a race) is given back to the caller's retry after this many races.
MAX_RACES = 5


@dataclass(frozen=True)
class CompletionRetries:
    """How `finish_or_keep` records the outcome of work that has run when the store fails
    transiently: `attempts` writes in place, `first_pause` seconds before the second, doubling
    up to `max_pause`; then, with the caller told (`CompletionFailedError`), a write every
    `max_pause` seconds in the background for at most `background_seconds` (0: none), so that
    the retry the caller sends once the store is back finds the replay. Every write is fenced
    by the claim's ETag: one that a takeover overtook changes nothing."""

    attempts: int = 3
    first_pause: float = 0.1
    max_pause: float = 2.0
    background_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.first_pause < 0 or self.max_pause < self.first_pause:
            raise ValueError(
                "CompletionRetries needs attempts >= 1 and 0 <= first_pause <= max_pause"
            )
        if self.background_seconds < 0 or (self.background_seconds > 0 and self.max_pause <= 0):
            raise ValueError(
                "background_seconds must not be negative, and background writes need a "
                "max_pause above 0 (they would hammer a store that is down)"
            )


# The background completions still running, each kept referenced until it ends (the event
# loop holds only weak references to tasks).
_finishing: set[asyncio.Task[bool]] = set()


def pending_completions() -> frozenset[asyncio.Task[bool]]:
    """The background completions of `finish_or_keep` still running on this event loop: a
    host may await them when it shuts down; each ends True once its outcome is recorded."""
    loop = asyncio.get_running_loop()
    return frozenset(task for task in _finishing if task.get_loop() is loop and not task.done())


def _claimed_for() -> str:
    """The consumer and the key of the delivery claiming (`decisions.naming`), when a `Retrier`
    opened one and the consumer said so; else only what the record id tells."""
    delivery = current_delivery()
    if delivery is None or delivery.consumer is None:
        return "consumer=unknown"
    return naming(delivery.consumer, delivery.message_id, delivery.key)


class Claims:
    """Claims records for `owner` in `records`, with `lease_seconds` leases.

    `failed_is_final` decides what a record marked failed means to a later attempt: by default
    the refusal stands (`PreviouslyFailedError`); when False, the attempt takes the record over
    at once and tries again (for a downstream whose refusal a resubmission may overcome).
    `completion` is how `finish_or_keep` retries a completion the store fails."""

    def __init__(
        self,
        records: RecordStore,
        *,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        failed_is_final: bool = True,
        completion: CompletionRetries | None = None,
    ) -> None:
        self.records = records
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._max_wait_seconds = max_wait_seconds
        self._sleep = sleep
        self._failed_is_final = failed_is_final
        self._completion = completion or CompletionRetries()

    async def own(self, wanted: Record) -> Record:
        """`wanted` claimed by us (new, or taken over from an ended lease or our own), or the
        record completed by anyone.

        Another owner's live lease is waited for (at most `max_wait_seconds`); raises
        `PayloadMismatchError`, `PreviouslyFailedError` or `InProgressElsewhereError`."""
        try:
            return await self.records.claim(wanted)
        except RecordExistsError as exists:
            existing, now_ms = exists.existing, exists.database_now_ms
        waited = 0.0
        races = 0  # writes lost to another owner; waiting for a live lease is bounded apart
        while races < MAX_RACES:
            if existing.request_hash != wanted.request_hash:
                raise PayloadMismatchError(wanted.key, existing.request_hash, wanted.request_hash)
            if existing.status is RecordStatus.COMPLETED:
                return existing
            if existing.status is RecordStatus.FAILED and self._failed_is_final:
                raise PreviouslyFailedError(existing)
            at_work_elsewhere = (
                existing.status is RecordStatus.IN_PROGRESS
                and existing.owner != self.owner
                and lease_is_live(existing, now_ms)
            )
            if at_work_elsewhere:
                left = lease_seconds_left(existing, now_ms)
                if waited + POLL_SECONDS > self._max_wait_seconds:
                    raise InProgressElsewhereError(existing, left)
                # Its owner is at work right now: waiting beats abandoning, which would only
                # burn delivery attempts in a tight loop.
                pause = min(POLL_SECONDS, left + 0.05)
                await self._sleep(pause)
                waited += pause
            else:
                try:
                    taken = await self.records.take_over(existing, self.owner, self.lease_seconds)
                except RecordChangedError:
                    races += 1  # another delivery moved first: read again
                else:
                    if existing.owner != self.owner:
                        took_over()
                        logger.warning(
                            "took over a claim whose owner's lease ended: %s record=%s "
                            "from=%s attempt=%d",
                            _claimed_for(),
                            log_value(existing.key),
                            log_value(existing.owner or ""),
                            taken.attempts,
                        )
                    return taken
            found = await self.records.read(wanted.key, wanted.partition)
            if found.record is None:
                # Gone between our look and this read (released, expired): claim it afresh.
                try:
                    return await self.records.claim(wanted)
                except RecordExistsError as exists:
                    races += 1
                    existing, now_ms = exists.existing, exists.database_now_ms
            else:
                existing, now_ms = found.record, found.database_now_ms
        raise InProgressElsewhereError(existing, lease_seconds_left(existing, now_ms))

    async def finish(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> bool:
        """Record the outcome on our claim; False when another owner took it over meanwhile
        (it repeats the work with the same downstream key and records the same answer)."""
        try:
            await self.records.complete(owned, result, status)
        except RecordChangedError:
            return self._overtaken(owned)
        return True

    async def finish_or_keep(self, owned: Record, result: JsonInput) -> bool:
        """Record the outcome of work that has run (its effect may have happened): completed
        with `result`, a transient store error retried in place (`CompletionRetries`); False
        when another owner took the claim over meanwhile.

        When every attempt fails, the claim is kept, never released: the record stays in
        progress under its lease, a retry meets it as in progress, and a background task keeps
        writing the outcome (a retry then gets the replay). Only if the store stays down past
        the lease may a retry take the claim over and run the work again, as after a crash.
        Raises `CompletionFailedError` (a `TransientStoreError`) to say so."""
        retries = self._completion
        try:
            return await self._finish_retrying(
                owned, result, attempts=retries.attempts, pause=retries.first_pause
            )
        except TransientStoreError as failed:
            logger.warning(
                "the outcome of %s could not be recorded in %d attempts; it stays in progress%s",
                owned.key,
                retries.attempts,
                " (retrying in the background)" if retries.background_seconds > 0 else "",
            )
            if retries.background_seconds > 0:
                task = asyncio.create_task(self._finish_later(owned, result))
                _finishing.add(task)
                task.add_done_callback(_finishing.discard)
            raise CompletionFailedError(owned, retries.attempts) from failed

    async def _finish_later(self, owned: Record, result: JsonInput) -> bool:
        """The background half of `finish_or_keep`: a write every `max_pause` seconds until
        one lands, a takeover fences it out, or `background_seconds` pass."""
        retries = self._completion
        deadline = time.monotonic() + retries.background_seconds
        try:
            await self._sleep(retries.max_pause)
            finished = await self._finish_retrying(
                owned, result, pause=retries.max_pause, deadline=deadline, failed_before=True
            )
        except Exception:
            logger.error(
                "the outcome of %s is still not recorded after %g s; it stays in progress until "
                "its lease ends, then a retry takes it over and runs it again",
                owned.key,
                retries.background_seconds,
                exc_info=True,
            )
            return False
        if finished:
            logger.info("recorded the outcome of %s in the background", owned.key)
        return finished

    async def _finish_retrying(
        self,
        owned: Record,
        result: JsonInput,
        *,
        pause: float,
        attempts: int | None = None,
        deadline: float | None = None,
        failed_before: bool = False,
    ) -> bool:
        """Complete `owned`, a transient error retried after `pause` (doubling up to
        `max_pause`) until `attempts` writes or `deadline` (monotonic) is reached."""
        attempt = 0
        while True:
            attempt += 1
            try:
                await self.records.complete(owned, result)
            except RecordChangedError:
                # After a failed attempt, the ETag may have moved by our own write: the store
                # wrote it, then its answer was lost (a timeout).
                if failed_before and await self._completed_by_us(owned):
                    return True
                return self._overtaken(owned)
            except TransientStoreError:
                out_of_attempts = attempts is not None and attempt >= attempts
                out_of_time = deadline is not None and time.monotonic() + pause > deadline
                if out_of_attempts or out_of_time:
                    raise
                failed_before = True
                await self._sleep(pause)
                pause = min(pause * 2, self._completion.max_pause)
            else:
                return True

    async def _completed_by_us(self, owned: Record) -> bool:
        found = (await self.records.read(owned.key, owned.partition)).record
        return (
            found is not None
            and found.status is RecordStatus.COMPLETED
            and found.owner == owned.owner
        )

    def _overtaken(self, owned: Record) -> bool:
        logger.warning(
            "%s moved on while its owner %s worked; its new owner records the outcome",
            owned.key,
            owned.owner,
        )
        return False

    async def end_lease(self, owned: Record) -> None:
        """Keep our claim, in progress, with its lease ended (0 s from this write): the record
        stays (the work may have been done: its downstream key says where), and the next
        attempt takes it over without waiting. A failure to write is logged (the lease ends
        it), never raised over the error that made us stop."""
        try:
            await self.records.complete(
                replace(owned, lease_seconds=0.0), owned.result, RecordStatus.IN_PROGRESS
            )
        except Exception:
            logger.warning(
                "could not end the lease of %s; it ends by itself", owned.key, exc_info=True
            )

    async def release(self, owned: Record) -> None:
        """Give our claim up so the next attempt claims anew; a failure to do so is logged
        (the lease ends it), never raised over the error that made us release."""
        try:
            await self.records.release(owned)
        except Exception:
            logger.warning("could not release %s; its lease ends it", owned.key, exc_info=True)
