"""The orchestrator's state machines against our Cosmos DB emulator: who calls the downstream,
when a claim is waited for, taken over or left alone, and what each mechanism writes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from core_support import lease_ended, unique

from exactly_once import (
    CosmosStore,
    Effects,
    InProgressElsewhereError,
    Outcome,
    PayloadMismatchError,
    PreviouslyFailedError,
    Refused,
    RetryLater,
    TransientStoreError,
)
from exactly_once._attempts import one_delivery
from exactly_once._claims import Claims
from exactly_once._orchestrator import safe_id
from exactly_once.decisions import decision_for_error
from exactly_once.store import (
    DocumentExistsError,
    Record,
    RecordStatus,
    apply_version,
    create_or_find,
)


def effects(
    store: CosmosStore,
    message_id: str,
    *,
    owner: str = "worker-a",
    consumer: str = "billing",
    request_hash: str = "hash-1",
    lease_seconds: float = 30.0,
    max_wait_seconds: float = 0.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    failed_is_final: bool = True,
) -> Effects:
    return Effects(
        consumer=consumer,
        message_id=message_id,
        request_hash=request_hash,
        records=store,
        documents=store,
        owner=owner,
        lease_seconds=lease_seconds,
        max_wait_seconds=max_wait_seconds,
        sleep=sleep,
        failed_is_final=failed_is_final,
    )


class Downstream:
    """A downstream that deduplicates on its key, counting the calls it gets."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.answers: dict[str, str] = {}

    async def __call__(self, key: str) -> str:
        self.calls.append(key)
        return self.answers.setdefault(key, f"answer-{len(self.answers) + 1}")


async def test_two_phases_call_once_and_replay_the_recorded_answer(store: CosmosStore) -> None:
    message, downstream = unique("message"), Downstream()

    first = await effects(store, message).two_phase(downstream)
    again = await effects(store, message, owner="worker-b").two_phase(downstream)

    assert (first.outcome, first.result) == (Outcome.PROCESSED, "answer-1")
    assert (again.outcome, again.result) == (Outcome.DUPLICATE, "answer-1")
    assert downstream.calls == [f"billing:{message}"]


def wanted(bound: Effects, *, lease_seconds: float) -> Record:
    """The record `two_phase` claims for `bound` (in the key's home): claimed directly, it is
    an owner that crashed between its claim and its completion."""
    return Record(
        key=safe_id(f"two-phase:{bound.consumer}:{bound.message_id}"),
        partition=bound.key_partition,
        request_hash=bound.request_hash,
        status=RecordStatus.IN_PROGRESS,
        owner=bound.owner,
        lease_seconds=lease_seconds,
        downstream_key=f"{bound.consumer}:{bound.message_id}",
    )


async def test_a_crashed_owner_is_left_alone_while_its_lease_lives_then_taken_over(
    store: CosmosStore,
) -> None:
    message, downstream = unique("message"), Downstream()
    crashed = effects(store, message, owner="worker-a")
    claim = await crashed.own(wanted(crashed, lease_seconds=1))

    # Live by the database's clock (1 s past the end of its write's second): left alone.
    with pytest.raises(InProgressElsewhereError) as elsewhere:
        await effects(store, message, owner="worker-b").two_phase(downstream)
    assert elsewhere.value.existing.owner == "worker-a" and downstream.calls == []

    await lease_ended(store, claim)
    taken = await effects(store, message, owner="worker-b").two_phase(downstream)

    assert taken.outcome is Outcome.PROCESSED
    assert downstream.calls == [f"billing:{message}"]  # the key the crashed owner had
    record = (await store.read(claim.key, claim.partition)).record
    assert record is not None
    assert (record.owner, record.attempts, record.status) == ("worker-b", 2, RecordStatus.COMPLETED)


async def test_the_owners_own_live_claim_is_taken_over_at_once(store: CosmosStore) -> None:
    message, downstream = unique("message"), Downstream()
    crashed = effects(store, message, owner="worker-a")
    await crashed.own(wanted(crashed, lease_seconds=30))

    again = await effects(store, message, owner="worker-a").two_phase(downstream)

    assert again.outcome is Outcome.PROCESSED and len(downstream.calls) == 1


async def test_a_live_claim_is_waited_for_and_found_completed(store: CosmosStore) -> None:
    message, downstream = unique("message"), Downstream()
    owner = effects(store, message, owner="worker-a")
    claim = await owner.own(wanted(owner, lease_seconds=30))
    pauses: list[float] = []

    async def owner_finishes_while_we_wait(seconds: float) -> None:
        pauses.append(seconds)
        await store.complete(claim, "answer-of-a")

    waiting = effects(
        store, message, owner="worker-b", max_wait_seconds=5, sleep=owner_finishes_while_we_wait
    )
    found = await waiting.two_phase(downstream)

    assert (found.outcome, found.result) == (Outcome.DUPLICATE, "answer-of-a")
    assert len(pauses) == 1 and downstream.calls == []


async def test_a_live_claim_is_waited_for_up_to_the_bound_however_many_polls_that_takes(
    store: CosmosStore,
) -> None:
    message, downstream = unique("message"), Downstream()
    owner = effects(store, message, owner="worker-a")
    await owner.own(wanted(owner, lease_seconds=30))
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)  # no time passes: the lease stays live

    waiting = effects(store, message, owner="worker-b", max_wait_seconds=4, sleep=pause)
    with pytest.raises(InProgressElsewhereError):
        await waiting.two_phase(downstream)

    assert sum(pauses) == pytest.approx(4.0) and len(pauses) == 8  # more polls than races
    assert downstream.calls == []


async def test_a_failed_call_releases_the_claim_and_a_refusal_is_kept(
    store: CosmosStore,
) -> None:
    message = unique("message")

    async def broken(key: str) -> str:
        raise ConnectionError("downstream unreachable")

    async def refusing(key: str) -> str:
        raise Refused("card declined", reason="PaymentRefused")

    with pytest.raises(ConnectionError):
        await effects(store, message).two_phase(broken)
    key = safe_id(f"two-phase:billing:{message}")
    home = effects(store, message).key_partition
    assert (await store.read(key, home)).record is None  # released: a retry claims anew

    with pytest.raises(Refused):
        await effects(store, message).two_phase(refusing)
    with pytest.raises(PreviouslyFailedError) as failed:
        await effects(store, message, owner="worker-b").two_phase(Downstream())
    assert failed.value.existing.result == {
        "reason": "PaymentRefused",
        "description": "card declined",
    }


class ProviderBusy(Exception):
    """A client's own "try later", which only its caller knows to be transient."""


async def test_an_error_named_transient_propagates_as_retry_later_and_releases_the_claim(
    store: CosmosStore,
) -> None:
    message = unique("message")

    async def busy(key: str) -> str:
        raise ProviderBusy("the provider sheds load")

    with pytest.raises(RetryLater) as later:
        await effects(store, message).two_phase(busy, transient=(ProviderBusy,))
    with pytest.raises(ProviderBusy):  # without `transient=` it propagates as it is
        await effects(store, message).two_phase(busy)

    assert isinstance(later.value.__cause__, ProviderBusy)
    decision = decision_for_error(later.value, consumer="billing", message_id=message)
    assert decision.outcome is Outcome.TRANSIENT_FAILURE
    key = safe_id(f"two-phase:billing:{message}")
    assert (await store.read(key, effects(store, message).key_partition)).record is None


async def test_an_answer_whose_record_was_not_completed_is_recorded_by_the_next_attempt(
    store: CosmosStore,
) -> None:
    message, downstream = unique("message"), Downstream()
    bound = effects(store, message)
    # The first attempt's completion write fails after the downstream answered.
    failing = FailingCompletion(store)
    with one_delivery():
        with pytest.raises(TransientStoreError):
            await effects(failing, message).two_phase(downstream)  # type: ignore[arg-type]
        # The next attempt of the same delivery (the same owner) finds its own claim at once.
        done = await bound.two_phase(downstream)

    assert done.outcome is Outcome.PROCESSED and done.result == "answer-1"
    assert len(downstream.calls) == 1  # the answer was kept, not asked for again


class FailingCompletion:
    """The store, but its next completion write fails for now (a 503 after the SDK's retries)."""

    def __init__(self, store: CosmosStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def complete(self, *args: object, **kwargs: object) -> Record:
        raise TransientStoreError("Cosmos DB answered 503")


async def test_a_claim_kept_on_error_stays_with_its_lease_ended_and_is_taken_over_at_once(
    store: CosmosStore,
) -> None:
    """The downstream's answer was lost (it may have acted): the record stays, so a reader
    deciding whether there is anything to undo sees it; the next attempt does not wait out the
    30 s lease, and calls again with the same key."""
    message = unique("message")

    async def answer_lost(key: str) -> str:
        raise ConnectionError("the answer was lost")

    first = effects(store, message, lease_seconds=30.0)
    with pytest.raises(ConnectionError):
        await first.two_phase(answer_lost, keep_claim_on_error=True)
    key = safe_id(f"two-phase:billing:{message}")
    kept = (await store.read(key, first.key_partition)).record
    assert kept is not None
    assert (kept.status, kept.owner, kept.lease_seconds, kept.attempts) == (
        RecordStatus.IN_PROGRESS,
        "worker-a",
        0.0,
        1,
    )

    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        await asyncio.sleep(seconds)  # the database's clock moves only with real time

    downstream = Downstream()
    next_attempt = effects(store, message, owner="worker-b", max_wait_seconds=5, sleep=pause)
    done = await next_attempt.two_phase(downstream)

    assert done.outcome is Outcome.PROCESSED and downstream.calls == [f"billing:{message}"]
    # At most the rest of the write's second (the database's clock has whole seconds).
    assert sum(pauses) <= 1.5


async def test_a_record_named_by_the_application_carries_the_claims_data(
    store: CosmosStore,
) -> None:
    message, downstream = unique("message"), Downstream()
    bound = effects(store, message)

    done = await bound.two_phase(
        downstream,
        record_key=f"charge:{message}",
        downstream_key=f"pay:{message}",
        data={"amount": "12.50", "currency": "EUR"},
    )

    record = (await store.read(f"charge:{message}", bound.key_partition)).record
    assert record is not None
    assert (record.status, record.result, record.data) == (
        RecordStatus.COMPLETED,
        done.result,
        {"amount": "12.50", "currency": "EUR"},
    )
    assert downstream.calls == [f"pay:{message}"]
    # Nothing under the default name: the application's name is the record's only one.
    assert (
        await store.read(safe_id(f"two-phase:billing:{message}"), bound.key_partition)
    ).record is None


async def test_effects_whose_refusals_are_not_final_call_again_on_the_next_attempt(
    store: CosmosStore,
) -> None:
    message = unique("message")

    async def refusing(key: str) -> str:
        raise Refused("card declined", reason="PaymentRefused")

    with pytest.raises(Refused):
        await effects(store, message).two_phase(refusing)
    downstream = Downstream()
    retried = effects(store, message, owner="worker-b", failed_is_final=False)

    done = await retried.two_phase(downstream)

    assert done.outcome is Outcome.PROCESSED and downstream.calls == [f"billing:{message}"]


async def test_a_refusal_may_be_retried_where_the_downstream_allows_it(
    store: CosmosStore,
) -> None:
    message = unique("message")
    first = effects(store, message)
    refused = await first.own(wanted(first, lease_seconds=30))
    await store.complete(refused, {"reason": "No"}, RecordStatus.FAILED)
    retrying = Claims(store, owner="worker-b", failed_is_final=False)

    again = await retrying.own(wanted(first, lease_seconds=30))

    assert (again.status, again.owner, again.attempts) == (RecordStatus.IN_PROGRESS, "worker-b", 2)
    with pytest.raises(PreviouslyFailedError):
        await Claims(store, owner="worker-c").own(
            await store.complete(again, {"reason": "No"}, RecordStatus.FAILED)
        )


async def test_a_claim_with_another_payload_is_a_mismatch(store: CosmosStore) -> None:
    message = unique("message")
    await effects(store, message).two_phase(Downstream())

    with pytest.raises(PayloadMismatchError):
        await effects(store, message, request_hash="hash-2").two_phase(Downstream())


async def test_inbox_records_are_scoped_by_consumer(store: CosmosStore) -> None:
    message, partition = unique("message"), unique("order")

    shipping = await effects(store, message, consumer="shipping").inbox(
        partition, [{"id": f"shipment-{message}"}]
    )
    again = await effects(store, message, consumer="shipping").inbox(
        partition, [{"id": f"shipment-{message}"}]
    )
    emails = await effects(store, message, consumer="emails").inbox(
        partition, [{"id": f"email-{message}"}]
    )

    assert (shipping, again, emails) == (Outcome.PROCESSED, Outcome.DUPLICATE, Outcome.PROCESSED)
    with pytest.raises(PayloadMismatchError):
        await effects(store, message, consumer="shipping", request_hash="other").inbox(
            partition, [{"id": f"shipment-{message}"}]
        )


async def test_an_effect_document_without_its_marker_is_a_conflict(store: CosmosStore) -> None:
    message, partition = unique("message"), unique("order")
    await store.create_all(partition, [{"id": "shared"}])

    with pytest.raises(DocumentExistsError) as exists:
        await effects(store, message).inbox(partition, [{"id": "shared"}])

    assert exists.value.index == 1
    marker = safe_id(f"inbox:billing:{message}")
    assert await store.get(marker, partition) is None  # the batch wrote nothing


def test_safe_id_keeps_plain_ids_and_hashes_the_rest() -> None:
    assert safe_id("inbox:shipping:order-1") == "inbox:shipping:order-1"
    hashed = safe_id("inbox:shipping:a/b?c#d")
    assert hashed.startswith("inbox:") and len(hashed) == len("inbox:") + 64
    assert safe_id("x:" + "y" * 300) != safe_id("x:" + "y" * 301)


async def test_a_missing_versioned_document_stands_at_its_absent_version(
    store: CosmosStore,
) -> None:
    partition = unique("order")

    stale = await apply_version(store, partition, "status", 1, lambda _: {}, absent_version=1)
    written = await apply_version(store, partition, "status", 2, lambda _: {}, absent_version=1)

    assert (stale, written) == (Outcome.STALE, Outcome.PROCESSED)
    stored = await store.get("status", partition)
    assert stored is not None and stored.body["version"] == 2


async def test_a_change_that_refuses_writes_nothing(store: CosmosStore) -> None:
    partition = unique("order")

    def refuse(_: object) -> dict[str, str]:
        raise Refused("not reachable from the stored state", reason="IllegalTransition")

    with pytest.raises(Refused):
        await apply_version(store, partition, "status", 3, refuse)

    assert await store.get("status", partition) is None


async def test_a_marker_without_a_hash_is_a_duplicate_by_its_id_alone(
    store: CosmosStore,
) -> None:
    partition = unique("order")
    marker = {"id": unique("shipping"), "type": "inbox"}
    effect = [{"id": f"{partition}:shipment"}]

    first, _ = await create_or_find(store, partition, marker, *effect, request_hash=None)
    again, _ = await create_or_find(store, partition, marker, *effect, request_hash=None)

    assert (first, again) == (Outcome.PROCESSED, Outcome.DUPLICATE)
    stored = await store.get(str(marker["id"]), partition)
    assert stored is not None and "requestHash" not in stored.body
