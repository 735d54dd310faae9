"""The claim state machine, once for every claimed record: claim -> judge -> wait, take over,
or stop -> complete.

Every two-phase effect (the orchestrator's `two_phase`, which the orders app's charge and
refund run on) goes through `Claims.own` and `Claims.finish`; only the records differ.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from exactly_once.exceptions import (
    InProgressElsewhereError,
    PayloadMismatchError,
    PreviouslyFailedError,
    RecordChangedError,
    RecordExistsError,
)
from exactly_once.ports import RecordStore
from exactly_once.records import (
    DEFAULT_LEASE_SECONDS,
    JsonInput,
    Record,
    RecordStatus,
    lease_is_live,
    lease_seconds_left,
)
from exactly_once.telemetry import took_over

logger = logging.getLogger("exactly_once")

# How long a delivery waits for another owner's live lease before handing the message back.
DEFAULT_MAX_WAIT_SECONDS = 30.0
POLL_SECONDS = 0.5
# A record that keeps moving under us is given back to the broker after this many races.
MAX_RACES = 5


class Claims:
    """Claims records for `owner` in `records`, with `lease_seconds` leases.

    `failed_is_final` decides what a record marked failed means to a later attempt: by default
    the refusal stands (`PreviouslyFailedError`); when False, the attempt takes the record over
    at once and tries again (for a downstream whose refusal a resubmission may overcome)."""

    def __init__(
        self,
        records: RecordStore,
        *,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        failed_is_final: bool = True,
    ) -> None:
        self.records = records
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._max_wait_seconds = max_wait_seconds
        self._sleep = sleep
        self._failed_is_final = failed_is_final

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
                            "took over %s from %s (attempt %d)",
                            existing.key,
                            existing.owner,
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
            logger.warning(
                "%s moved on while its owner %s worked; its new owner records the outcome",
                owned.key,
                owned.owner,
            )
            return False
        return True

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
