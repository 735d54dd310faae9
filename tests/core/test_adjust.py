"""`Effects.adjust` against our Cosmos DB emulator through the SDK: existing documents of one
partition changed by a rule once per key, the key's marker in the same batch; a refusal that
writes nothing and answers every redelivery alike; races lost and decided again; keys that are
no Cosmos ids; and `two_phase` without the partition it never used."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Mapping, Sequence

import pytest
from core_support import unique

from exactly_once import CosmosStore, Effects, Outcome, PayloadMismatchError, Refused
from exactly_once._orchestrator import ADJUSTMENT_TYPE, AdjustmentRule
from exactly_once.store import JsonMapping, JsonObject

CLOUD_EVENT_KEY = 'stock:["/warehouse/eu-west","e1"]'
UNSAFE_ID_CHARACTERS = set("/\\?#")


def effects(
    store: CosmosStore, key: str, *, request_hash: str = "hash-1", consumer: str = "stock"
) -> Effects:
    return Effects(
        consumer=consumer,
        message_id=unique("message"),
        key=key,
        request_hash=request_hash,
        records=store,
        documents=store,
        owner=unique("delivery"),
    )


def take(lines: Mapping[str, int], calls: list[int] | None = None) -> AdjustmentRule:
    """The guide's rule: take each quantity, or refuse the whole reservation."""

    def rule(items: Mapping[str, JsonObject]) -> list[JsonMapping]:
        if calls is not None:
            calls.append(len(calls) + 1)
        changed: list[JsonMapping] = []
        for item_id, quantity in lines.items():
            item = items.get(item_id)
            available = item.get("available") if item is not None else None
            if item is None or not isinstance(available, int) or available < quantity:
                raise Refused(f"{item_id}: {available} left", reason="OutOfStock")
            changed.append({**item, "available": available - quantity})
        return changed

    return rule


async def stocked(store: CosmosStore, **levels: int) -> str:
    warehouse = unique("warehouse")
    await store.create_all(warehouse, [{"id": i, "available": n} for i, n in levels.items()])
    return warehouse


async def levels(store: CosmosStore, warehouse: str, *ids: str) -> dict[str, object]:
    found = {i: await store.get(i, warehouse) for i in ids}
    return {i: (None if doc is None else doc.body["available"]) for i, doc in found.items()}


async def test_the_documents_and_the_marker_are_written_once_and_a_redelivery_is_a_duplicate(
    store: CosmosStore,
) -> None:
    warehouse = await stocked(store, a=5, b=2)
    key = unique("reservation")

    first = await effects(store, key).adjust(warehouse, ["a", "b"], take({"a": 3, "b": 2}))
    # The same message again: the stock left would refuse it, the marker says it is done.
    again = await effects(store, key).adjust(warehouse, ["a", "b"], take({"a": 3, "b": 2}))

    assert (first, again) == (Outcome.PROCESSED, Outcome.DUPLICATE)
    assert await levels(store, warehouse, "a", "b") == {"a": 2, "b": 0}


async def test_a_refusal_writes_nothing_and_every_redelivery_is_refused_alike(
    store: CosmosStore,
) -> None:
    warehouse = await stocked(store, a=5, b=1)
    before = {i: await store.get(i, warehouse) for i in ("a", "b")}
    key = unique("reservation")

    with pytest.raises(Refused) as refused:
        await effects(store, key).adjust(warehouse, ["a", "b"], take({"a": 1, "b": 2}))
    after = {i: await store.get(i, warehouse) for i in ("a", "b")}
    # Restocked: a new message could take it, this one stays refused.
    assert after["b"] is not None
    await store.replace({**after["b"].body, "available": 9}, warehouse, etag=after["b"].etag)
    with pytest.raises(Refused) as again:
        await effects(store, key).adjust(warehouse, ["a", "b"], take({"a": 1, "b": 2}))
    fresh = await effects(store, unique("reservation")).adjust(warehouse, ["b"], take({"b": 2}))

    assert refused.value.reason == again.value.reason == "OutOfStock"
    assert again.value.description == refused.value.description == "b: 1 left"
    assert after == before  # the same bodies and the same ETags: nothing was written
    assert fresh is Outcome.PROCESSED
    assert await levels(store, warehouse, "a", "b") == {"a": 5, "b": 7}


async def test_a_key_reused_with_another_payload_is_a_mismatch(store: CosmosStore) -> None:
    warehouse = await stocked(store, a=5)
    key = unique("reservation")
    await effects(store, key).adjust(warehouse, ["a"], take({"a": 1}))

    with pytest.raises(PayloadMismatchError):
        await effects(store, key, request_hash="hash-2").adjust(warehouse, ["a"], take({"a": 2}))
    assert await levels(store, warehouse, "a") == {"a": 4}


class TakesFirst(CosmosStore):
    """Another message takes stock between this batch's read and its write, once: the batch
    loses its race on the ETag (a real interleaving, made deterministic)."""

    def __init__(self, store: CosmosStore, other: Effects, warehouse: str) -> None:
        super().__init__(store._container)
        self.other, self.warehouse, self.raced = other, warehouse, False

    async def replace_all_and_create(
        self,
        partition: str,
        replaced: Sequence[tuple[JsonMapping, str]],
        *,
        created: Sequence[JsonMapping],
    ) -> None:
        if not self.raced:
            self.raced = True
            assert (
                await self.other.adjust(self.warehouse, ["a"], take({"a": 2})) is Outcome.PROCESSED
            )
        await super().replace_all_and_create(partition, replaced, created=created)


async def test_a_lost_race_reads_again_and_decides_on_what_the_winner_left(
    store: CosmosStore,
) -> None:
    warehouse = await stocked(store, a=3)
    racing = TakesFirst(store, effects(store, unique("other")), warehouse)
    calls: list[int] = []
    loser = Effects(
        consumer="stock",
        message_id=unique("message"),
        request_hash="hash-1",
        records=racing,
        documents=racing,
        owner=unique("delivery"),
    )

    with pytest.raises(Refused):  # 3 - 2 = 1 left, 2 asked: refused on the second reading
        await loser.adjust(warehouse, ["a"], take({"a": 2}, calls))

    assert racing.raced and calls == [1, 2]
    assert await levels(store, warehouse, "a") == {"a": 1}


async def test_messages_racing_for_one_item_never_oversell(store: CosmosStore) -> None:
    warehouse = await stocked(store, a=4)
    racers = [effects(store, unique("reservation")) for _ in range(7)]

    async def reserve(bound: Effects) -> str:
        try:
            return str(await bound.adjust(warehouse, ["a"], take({"a": 1})))
        except Refused as refused:
            return refused.reason

    decided = await asyncio.gather(*(reserve(bound) for bound in racers))

    assert sorted(decided) == ["OutOfStock"] * 3 + ["processed"] * 4
    assert await levels(store, warehouse, "a") == {"a": 0}


async def test_the_rule_changes_only_documents_it_was_given(store: CosmosStore) -> None:
    warehouse = await stocked(store, a=1, b=1)

    def reaches_further(items: Mapping[str, JsonObject]) -> list[JsonMapping]:
        return [{"id": "b", "available": 0}]

    with pytest.raises(ValueError, match="'b', which it was not given"):
        await effects(store, unique("r")).adjust(warehouse, ["a"], reaches_further)
    assert await levels(store, warehouse, "a", "b") == {"a": 1, "b": 1}


async def test_each_step_of_a_message_has_its_own_marker(store: CosmosStore) -> None:
    """A reservation and its give-back in one partition: two adjustments of one message."""
    warehouse = await stocked(store, a=5)
    bound = effects(store, unique("shipment"))

    reserved = await bound.adjust(warehouse, ["a"], take({"a": 2}), step="reserve")
    given_back = await bound.adjust(warehouse, ["a"], take({"a": -2}), step="give-back")
    again = await bound.adjust(warehouse, ["a"], take({"a": 2}), step="reserve")

    assert (reserved, given_back, again) == (
        Outcome.PROCESSED,
        Outcome.PROCESSED,
        Outcome.DUPLICATE,
    )
    assert await levels(store, warehouse, "a") == {"a": 5}


async def test_a_cloud_events_key_is_handed_out_and_stored_as_a_safe_id(
    store: CosmosStore,
) -> None:
    """The key holds `/`, which Cosmos DB refuses in an id: the markers, the key record, the
    safe key and the default downstream key are all ids the store takes."""
    warehouse = await stocked(store, a=2)
    bound = effects(store, CLOUD_EVENT_KEY)
    called: list[str] = []

    async def call(downstream_key: str) -> str:
        called.append(downstream_key)
        return "ok"

    assert await bound.adjust(warehouse, ["a"], take({"a": 1})) is Outcome.PROCESSED
    await bound.two_phase(call)
    await store.create_all(warehouse, [{"id": f"note-{bound.safe_key}"}])  # the user's own

    markers = [
        item
        async for item in store._container.query_items(
            "SELECT * FROM c WHERE c.type = @type",
            parameters=[{"name": "@type", "value": ADJUSTMENT_TYPE}],
            partition_key=warehouse,
        )
    ]
    assert bound.key == CLOUD_EVENT_KEY
    assert [m["key"] for m in markers] == [CLOUD_EVENT_KEY]  # the raw key kept beside it
    for safe in (bound.safe_key, called[0], markers[0]["id"], bound.key_partition):
        assert not UNSAFE_ID_CHARACTERS.intersection(safe), safe


async def test_0_1s_two_phase_with_a_partition_still_runs_and_says_it_is_deprecated(
    store: CosmosStore,
) -> None:
    async def call(downstream_key: str) -> str:
        return downstream_key

    with pytest.warns(DeprecationWarning, match=r"two_phase\(partition, call\) is deprecated"):
        done = await effects(store, unique("m")).two_phase("a-partition", call)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = await effects(store, unique("m")).two_phase(call)

    assert (done.outcome, again.outcome) == (Outcome.PROCESSED, Outcome.PROCESSED)
    with pytest.raises(TypeError, match="two_phase takes one call"):
        await effects(store, unique("m")).two_phase(call, call)
