"""`exactly_once.keys`: the key's rules, its record's id, Retry-After, and one request's claim
(`KeyedRequests`) over `CosmosStore` on our Cosmos DB emulator."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_support import lease_ended, unique

from exactly_once import CosmosStore
from exactly_once.exceptions import InProgressElsewhereError, PayloadMismatchError
from exactly_once.keys import KeyedRequests, KeyFault, key_fault, key_record_id, retry_after_seconds
from exactly_once.store import Record, RecordStatus


@pytest.mark.parametrize(
    ("key", "fault"),
    [
        ("k", None),
        (" ", None),
        ("~" * 255, None),
        ("Stripe-like_KEY-123:/?#", None),
        (None, KeyFault.MISSING),
        ("", KeyFault.MISSING),
        ("x" * 256, KeyFault.TOO_LONG),
        ("a\nb", KeyFault.NOT_PRINTABLE),
        ("\u00e9", KeyFault.NOT_PRINTABLE),
    ],
)
def test_a_key_is_1_to_255_printable_ascii_characters(
    key: str | None, fault: KeyFault | None
) -> None:
    assert key_fault(key) is fault


def test_record_ids_are_store_safe_and_unambiguous() -> None:
    ids = {key_record_id("ab", "c"), key_record_id("a", "bc"), key_record_id("a", "b/c?#\\")}
    assert len(ids) == 3
    assert all(len(i) == 64 and i.isalnum() for i in ids)


@pytest.mark.parametrize(
    ("seconds_left", "cap", "expected"),
    [(0.2, 1, 1), (25.0, 1, 1), (25.0, 10, 10), (3.2, 10, 4), (0.0, 1, 1), (25.0, 5, 5)],
)
def test_retry_after_is_at_least_one_and_at_most_the_cap(
    seconds_left: float, cap: int, expected: int
) -> None:
    assert retry_after_seconds(seconds_left, cap) == expected


def request(owner: str, lease_seconds: float = 1.0) -> Record:
    key = key_record_id("things", unique("key"))
    return Record(
        key=key,
        partition=key,
        request_hash="hash-1",
        status=RecordStatus.IN_PROGRESS,
        owner=owner,
        lease_seconds=lease_seconds,
    )


async def test_a_live_claim_is_refused_at_once_and_another_payload_is_a_mismatch(
    store: CosmosStore,
) -> None:
    requests = KeyedRequests(store)
    wanted = request("request-a", lease_seconds=30)
    await requests.begin(wanted)

    with pytest.raises(InProgressElsewhereError) as busy:
        await requests.begin(replace(wanted, owner="request-b"))
    with pytest.raises(PayloadMismatchError):
        await requests.begin(replace(wanted, owner="request-c", request_hash="hash-2"))

    assert 0 < busy.value.seconds_left <= 31


async def test_a_request_whose_claim_was_taken_over_still_finishes_without_overwriting(
    store: CosmosStore,
) -> None:
    requests = KeyedRequests(store)
    wanted = request("request-a")
    slow = await requests.begin(wanted)
    await lease_ended(store, slow)
    retry = await requests.begin(replace(wanted, owner="request-b"))

    slow_recorded = await requests.finish(slow, {"by": "a"})
    retry_recorded = await requests.finish(retry, {"by": "b"})
    replayed = await requests.begin(replace(wanted, owner="request-c"))

    assert (retry.owner, retry.attempts) == ("request-b", 2)
    assert slow_recorded is False and retry_recorded is True
    assert replayed.status is RecordStatus.COMPLETED and replayed.result == {"by": "b"}


async def test_a_released_claim_is_claimed_afresh(store: CosmosStore) -> None:
    requests = KeyedRequests(store)
    wanted = request("request-a", lease_seconds=30)
    owned = await requests.begin(wanted)

    await requests.release(owned)
    again = await requests.begin(replace(wanted, owner="request-b"))

    assert (again.owner, again.attempts, again.status) == ("request-b", 1, RecordStatus.IN_PROGRESS)
