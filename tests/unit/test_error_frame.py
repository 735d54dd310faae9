"""The one error frame every consumer decides through (`subscriber.decided`): the app's own
signals first, then the core's frame, whose decisions are the app's, naming the order."""

from __future__ import annotations

from exactly_once._records import Record, RecordStatus
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.exceptions import (
    InProgressElsewhereError,
    PayloadMismatchError,
    StoreRefusedError,
)
from orders.exceptions import TransientPublishError
from orders.service.subscriber import decided


async def fails_with(error: Exception) -> Decision:
    async def effect() -> Decision:
        raise error

    return await decided(effect, consumer="test", order_id="o-1", request_hash="h")


async def test_each_failure_is_decided_once_for_every_consumer() -> None:
    busy = Record(
        key="k", partition="o-1", request_hash="h", status=RecordStatus.IN_PROGRESS, owner="other"
    )

    mismatch = await fails_with(PayloadMismatchError("k", "h1", "h2"))
    transient = await fails_with(TransientPublishError("busy broker"))
    elsewhere = await fails_with(InProgressElsewhereError(busy, 10))
    bug = await fails_with(ZeroDivisionError("boom"))

    assert (mismatch.outcome, mismatch.settlement, mismatch.dead_letter_reason) == (
        Outcome.MISMATCH,
        Settlement.DEAD_LETTER,
        "RequestHashMismatch",
    )
    assert (transient.outcome, transient.settlement) == (
        Outcome.TRANSIENT_FAILURE,
        Settlement.ABANDON,
    )
    assert (elsewhere.outcome, elsewhere.settlement) == (
        Outcome.IN_PROGRESS_ELSEWHERE,
        Settlement.ABANDON,
    )
    assert (bug.outcome, bug.settlement, bug.error) == (
        Outcome.UNEXPECTED_FAILURE,
        Settlement.ABANDON,
        "ZeroDivisionError: boom",
    )
    assert {(d.key, d.request_hash) for d in (mismatch, transient, elsewhere, bug)} == {
        ("o-1", "h")
    }


async def test_a_write_the_store_refuses_for_good_is_dead_lettered_with_the_stores_words() -> None:
    refused = await fails_with(StoreRefusedError("Cosmos DB answered 413: too large"))

    assert (refused.outcome, refused.settlement, refused.dead_letter_reason) == (
        Outcome.STORE_REFUSED,
        Settlement.DEAD_LETTER,
        "StoreRefused",
    )
    assert refused.dead_letter_description == "Cosmos DB answered 413: too large"
