"""What each mechanism costs on the wire, as the README's table says: every HTTP request the real
SDK sends is counted (an azure-core raw request hook), once the client is warm."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, cast

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from core_support import unique
from servers import CosmosServer

from exactly_once import (
    ConsumerOptions,
    CosmosStore,
    Effects,
    LocalCache,
    Outcome,
    PayloadMismatchError,
    Retention,
    RetentionError,
    exactly_once,
)
from exactly_once.store import (
    DocumentExistsError,
    Found,
    JsonMapping,
    JsonObject,
    StoredDocument,
    create_or_find,
)


class RequestLog:
    def __init__(self) -> None:
        self.requests: list[str] = []

    def __call__(self, request: Any) -> None:
        self.requests.append(f"{request.http_request.method} {request.http_request.url}")


@pytest.fixture
async def counted(python_cosmos: CosmosServer) -> AsyncIterator[tuple[CosmosStore, RequestLog]]:
    log = RequestLog()
    async with CosmosClient(
        python_cosmos.endpoint, credential=python_cosmos.key, raw_request_hook=log
    ) as client:
        database = await client.create_database_if_not_exists("core")
        container = await database.create_container_if_not_exists(
            id="counted", partition_key=PartitionKey(path="/pk"), default_ttl=-1
        )
        store = CosmosStore(container)
        # Warm the SDK's caches (account, container and partition metadata) on every path.
        warm = bound(store, unique("warm"))
        await warm.inbox(unique("p"), [{"id": "x"}])
        await warm.inbox(unique("p"), [])
        await warm.inbox(warm.key_partition, [])
        await warm.two_phase(answer)
        await warm.apply_version(unique("p"), "doc", 1, lambda _: {})
        yield store, log


def bound(store: CosmosStore, message_id: str) -> Effects:
    return Effects(
        consumer="counted",
        message_id=message_id,
        request_hash="hash",
        records=store,
        documents=store,
        owner="worker",
    )


async def answer(key: str) -> str:
    return f"answer for {key}"


async def requests_of(log: RequestLog, step: Any) -> tuple[Any, int]:
    log.requests.clear()
    result = await step
    return result, len(log.requests)


# (new message, duplicate) per mechanism, as the README's table says: in the key's home, and
# in a partition the payload names (the key record written first there).
COSTS_IN_THE_KEYS_HOME = {"create_entity": (1, 2), "inbox": (1, 2), "two_phase": (2, 2)}
COSTS_ELSEWHERE = {"create_entity": (2, 4), "inbox": (2, 3), "two_phase": (2, 2)}


@pytest.mark.parametrize(
    ("in_the_keys_home", "costs"),
    [(True, COSTS_IN_THE_KEYS_HOME), (False, COSTS_ELSEWHERE)],
    ids=["in-the-keys-home", "elsewhere"],
)
async def test_each_mechanism_costs_what_the_readme_says(
    counted: tuple[CosmosStore, RequestLog], in_the_keys_home: bool, costs: dict[str, Any]
) -> None:
    store, log = counted
    message = f"m-{uuid.uuid4().hex[:8]}"
    effects = bound(store, message)
    partition = effects.key_partition if in_the_keys_home else unique("p")
    entity = {"id": f"entity-{message}"}

    assert await requests_of(log, effects.create_entity(partition, entity)) == (
        Outcome.PROCESSED,
        costs["create_entity"][0],
    )
    assert await requests_of(log, effects.create_entity(partition, entity)) == (
        Outcome.DUPLICATE,
        costs["create_entity"][1],
    )
    assert await requests_of(log, effects.inbox(partition, [{"id": f"doc-{message}"}])) == (
        Outcome.PROCESSED,
        costs["inbox"][0],
    )
    assert await requests_of(log, effects.inbox(partition, [{"id": f"doc-{message}"}])) == (
        Outcome.DUPLICATE,
        costs["inbox"][1],
    )
    first, first_count = await requests_of(log, effects.two_phase(answer))
    again, again_count = await requests_of(log, effects.two_phase(answer))
    assert (first.outcome, first_count) == (Outcome.PROCESSED, costs["two_phase"][0])
    assert (again.outcome, again_count) == (Outcome.DUPLICATE, costs["two_phase"][1])
    assert await requests_of(log, effects.apply_version(partition, "v", 2, lambda _: {})) == (
        Outcome.PROCESSED,
        2,
    )
    assert await requests_of(log, effects.apply_version(partition, "v", 2, lambda _: {})) == (
        Outcome.STALE,
        1,
    )


@pytest.mark.parametrize(
    ("in_the_keys_home", "costs"),
    [(True, (1 + 2, 2 + 2)), (False, (2 + 2, 4 + 2))],
    ids=["in-the-keys-home", "elsewhere"],
)
async def test_an_adjustment_of_two_documents_costs_what_the_readme_says(
    counted: tuple[CosmosStore, RequestLog], in_the_keys_home: bool, costs: tuple[int, int]
) -> None:
    store, log = counted
    effects = bound(store, f"m-{uuid.uuid4().hex[:8]}")
    partition = effects.key_partition if in_the_keys_home else unique("p")
    await store.create_all(partition, [{"id": "a", "n": 1}, {"id": "b", "n": 1}])

    def add_one(items: Mapping[str, JsonObject]) -> list[JsonMapping]:
        return [{**item, "n": cast(int, item["n"]) + 1} for item in items.values()]

    assert await requests_of(log, effects.adjust(partition, ["a", "b"], add_one)) == (
        Outcome.PROCESSED,
        costs[0],
    )
    assert await requests_of(log, effects.adjust(partition, ["a", "b"], add_one)) == (
        Outcome.DUPLICATE,
        costs[1],
    )


async def test_a_marker_named_by_its_id_alone_costs_one_request_when_duplicate(
    counted: tuple[CosmosStore, RequestLog],
) -> None:
    store, log = counted
    partition = unique("p")
    marker = {"id": unique("shipping"), "consumer": "shipping"}
    effect = [{"id": f"{partition}:shipment"}]

    assert await requests_of(
        log, outcome_of(create_or_find(store, partition, marker, *effect, request_hash=None))
    ) == (Outcome.PROCESSED, 1)
    assert await requests_of(
        log, outcome_of(create_or_find(store, partition, marker, *effect, request_hash=None))
    ) == (Outcome.DUPLICATE, 1)


async def outcome_of(created: Awaitable[Found]) -> Outcome:
    return (await created).outcome


class FoundOnConflict:
    """A `DocumentStore` whose conflict carries the document it found (as a store that learns
    it in the same call does): the orchestrator must not read it again."""

    def __init__(self, store: CosmosStore) -> None:
        self.store = store
        self.gets = 0

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        try:
            await self.store.create_all(partition, documents)
        except DocumentExistsError as exists:
            found = await self.store.get(exists.document_id, partition)
            raise DocumentExistsError(exists.document_id, exists.index, found) from exists

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        self.gets += 1
        return await self.store.get(document_id, partition)

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        return await self.store.replace(document, partition, etag=etag)

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        await self.store.replace_and_create(partition, document, etag=etag, created=created)

    async def replace_all_and_create(
        self,
        partition: str,
        replaced: Sequence[tuple[JsonMapping, str]],
        *,
        created: Sequence[JsonMapping],
    ) -> None:
        await self.store.replace_all_and_create(partition, replaced, created=created)


async def test_a_conflict_that_carries_the_entity_is_judged_without_another_read(
    counted: tuple[CosmosStore, RequestLog],
) -> None:
    store, _ = counted
    documents, partition = FoundOnConflict(store), unique("p")
    entity = {"id": unique("entity"), "requestHash": "h"}

    first, _ = await create_or_find(documents, partition, entity, request_hash="h")
    again, _ = await create_or_find(documents, partition, entity, request_hash="h")

    assert (first, again, documents.gets) == (Outcome.PROCESSED, Outcome.DUPLICATE, 0)
    with pytest.raises(PayloadMismatchError):
        await create_or_find(documents, partition, entity, request_hash="other")
    assert documents.gets == 0


# --- the in-process cache of completed keys (issue 36, item 3) ------------------------------


def parse_text(body: bytes) -> str:
    return body.decode()


async def write_in_the_keys_home(text: str, effects: Effects) -> Outcome:
    document: JsonMapping = {"id": f"doc-{effects.key}", "text": text}
    return await effects.inbox(effects.key_partition, [document])


@pytest.mark.parametrize(
    ("cache", "duplicate_costs"),
    [(None, 2), (LocalCache(ttl_seconds=60), 0)],
    ids=["no-cache", "cache"],
)
async def test_a_duplicate_costs_two_requests_without_the_cache_and_none_with_it(
    counted: tuple[CosmosStore, RequestLog], cache: LocalCache | None, duplicate_costs: int
) -> None:
    store, log = counted
    consumer = exactly_once(
        consumer="cached", parse=parse_text, store=store, options=ConsumerOptions(cache=cache)
    )(write_in_the_keys_home)
    message_id = unique("m")

    new, new_costs = await requests_of(log, consumer.decide(b"hello", message_id))
    again, again_costs = await requests_of(log, consumer.decide(b"hello", message_id))
    other, other_costs = await requests_of(log, consumer.decide(b"bye", message_id))

    assert (new.outcome, new_costs) == (Outcome.PROCESSED, 1)
    assert (again.outcome, again_costs) == (Outcome.DUPLICATE, duplicate_costs)
    # Another payload under a cached key is judged by the store, as without the cache.
    assert (other.outcome, other_costs) == (Outcome.MISMATCH, 2)


async def test_a_duplicate_found_by_the_store_is_cached_for_the_next_one(
    counted: tuple[CosmosStore, RequestLog],
) -> None:
    """Another process (here: another consumer without the cache) did the effect; this one
    learns it from the store once, then answers from the cache."""
    store, log = counted
    cache = LocalCache(ttl_seconds=60)
    elsewhere = exactly_once(consumer="cached", parse=parse_text, store=store)(
        write_in_the_keys_home
    )
    here = exactly_once(
        consumer="cached", parse=parse_text, store=store, options=ConsumerOptions(cache=cache)
    )(write_in_the_keys_home)
    message_id = unique("m")
    await elsewhere.decide(b"hello", message_id)

    first, first_costs = await requests_of(log, here.decide(b"hello", message_id))
    second, second_costs = await requests_of(log, here.decide(b"hello", message_id))

    assert (first.outcome, first_costs) == (Outcome.DUPLICATE, 2)
    assert (second.outcome, second_costs) == (Outcome.DUPLICATE, 0)


def test_a_cache_that_outlives_the_records_is_refused_when_the_consumer_is_built() -> None:
    retention = Retention(lock_duration_seconds=30, max_delivery_count=10, message_ttl_seconds=3600)
    store = cast(CosmosStore, object())  # never reached: the consumer refuses to be built

    with pytest.raises(RetentionError, match="ttl_seconds=999999"):
        exactly_once(
            consumer="cached",
            parse=parse_text,
            store=store,
            options=ConsumerOptions(retention=retention, cache=LocalCache(ttl_seconds=999_999)),
        )(write_in_the_keys_home)
