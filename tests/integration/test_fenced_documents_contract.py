"""One contract for the fenced-documents port, three stores: the fake, our Cosmos emulator, and
@vercel/cosmosdb-server.

`CosmosFencedDocuments` is `FencedDocuments` and `OrderDocuments` at once (billing's records
and leases, the order document's saga decisions); `FakeFencedDocuments` stands in for it in
the unit tests. Every method of the two ports runs here against the fake and against the
real adapter over real Cosmos wire servers through the SDK, so the fake cannot drift from what
the adapter does: documents are keyed by (partition key, id), a transactional batch writes all
or nothing, and a conditional write fails on a moved ETag. Gaps of the third-party server are
declared here (strict xfail: if it gets fixed, the test says so).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from fakes import FakeFencedDocuments
from servers import CosmosServer, KnownGaps, expect_known_gap

from exactly_once.exceptions import (
    DocumentExistsError,
    RecordChangedError,
    StoreError,
    TransientStoreError,
)
from orders.adapters.cosmos_fenced import CosmosFencedDocuments
from orders.service.ports import FencedDocuments, OrderDocuments

# The containers the adapter serves (orders, inbox) are partitioned by /orderId.
PARTITION_KEY_PATH = "orderId"

_NO_REPLACE_IN_BATCH = (
    "@vercel/cosmosdb-server fails a replace inside a batch with a 500 (only create works)",
    TransientStoreError,
)
_MISSING_READ_500 = (
    "@vercel/cosmosdb-server answers a point read of a missing item with a 500, not a 404",
    TransientStoreError,
)
_NO_SCOPED_QUERY = (
    "@vercel/cosmosdb-server refuses the partition-scoped query that reads with the database's "
    "clock ('missing partition keys')",
    StoreError,
)
KNOWN_GAPS: KnownGaps = {
    # The check that the document is gone point-reads a missing item.
    ("vercel", "test_delete_with_the_current_etag_removes_only_that_document"): _MISSING_READ_500,
    ("vercel", "test_read_returns_the_document_and_a_database_clock_not_before_its_write"): (
        _NO_SCOPED_QUERY
    ),
    # get: the 500 for a missing item (a TransientStoreError); read: the refused query.
    ("vercel", "test_get_and_read_find_nothing_for_a_missing_id_or_another_partition"): (
        f"{_MISSING_READ_500[0]}; {_NO_SCOPED_QUERY[0]}",
        StoreError,
    ),
    ("vercel", "test_get_stored_gives_the_fields_and_the_etag_apart"): _MISSING_READ_500,
    ("vercel", "test_replace_and_create_writes_both_in_one_batch"): _NO_REPLACE_IN_BATCH,
    ("vercel", "test_replace_and_create_with_a_stale_etag_writes_nothing"): _NO_REPLACE_IN_BATCH,
    ("vercel", "test_replace_and_create_with_an_existing_id_writes_nothing"): _NO_REPLACE_IN_BATCH,
}


class FencedStore(FencedDocuments, OrderDocuments, Protocol):
    """Every port `CosmosFencedDocuments` implements."""


@pytest.fixture(params=["fake", "python-emulator", "vercel"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[FencedStore]:
    expect_known_gap(request, request.param, KNOWN_GAPS)
    if request.param == "fake":
        yield FakeFencedDocuments(partition_key_path=PARTITION_KEY_PATH)
        return
    fixture = "vercel_cosmos" if request.param == "vercel" else "python_cosmos"
    server: CosmosServer = request.getfixturevalue(fixture)
    async with CosmosClient(server.endpoint, credential=server.key) as client:
        database = await client.create_database_if_not_exists("contract")
        container = await database.create_container_if_not_exists(
            id="fenced", partition_key=PartitionKey(path=f"/{PARTITION_KEY_PATH}")
        )
        yield CosmosFencedDocuments(container)


def unique_id(prefix: str = "fenced") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def document(document_id: str, partition_key: str, **fields: Any) -> dict[str, Any]:
    return {"id": document_id, PARTITION_KEY_PATH: partition_key, **fields}


async def body_of(store: FencedStore, document_id: str, partition: str) -> dict[str, Any] | None:
    """The document's own fields as the ports hand them over (the ETag apart), or None."""
    found = await store.get_stored(document_id, partition)
    return found.body if found is not None else None


# --- create ----------------------------------------------------------------------------------


async def test_create_returns_the_stored_document_with_its_etag_and_timestamp(
    store: FencedStore,
) -> None:
    partition = unique_id("order")
    written = document(unique_id(), partition, owner="a")

    stored = await store.create(written)

    assert stored.body == written
    assert isinstance(stored.stamp.etag, str) and stored.stamp.etag
    assert isinstance(stored.stamp.written_at_s, int) and stored.stamp.written_at_s > 0
    found = await store.get_stored(written["id"], partition)
    assert found is not None and found.etag == stored.stamp.etag


async def test_create_refuses_an_id_that_exists_in_the_partition_and_keeps_the_first(
    store: FencedStore,
) -> None:
    partition = unique_id("order")
    first = document(unique_id(), partition, owner="a")
    await store.create(first)

    with pytest.raises(DocumentExistsError):
        await store.create({**first, "owner": "b"})

    assert await body_of(store, first["id"], partition) == first


async def test_the_same_id_in_two_partitions_is_two_documents(store: FencedStore) -> None:
    shared_id = unique_id()
    one, other = unique_id("order"), unique_id("order")

    await store.create(document(shared_id, one, owner="a"))
    await store.create(document(shared_id, other, owner="b"))

    assert await body_of(store, shared_id, one) == document(shared_id, one, owner="a")
    assert await body_of(store, shared_id, other) == document(shared_id, other, owner="b")


# --- get and read (the latter with the database's clock) -----------------------------------------


async def test_read_returns_the_document_and_a_database_clock_not_before_its_write(
    store: FencedStore,
) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, owner="a"))

    read = await store.read(stored.body["id"], partition)

    assert read.document is not None and read.document.stamp.etag == stored.stamp.etag
    assert read.document.body == stored.body
    # `_ts` has whole seconds; the clock is in milliseconds, read after the write.
    assert read.database_now_ms >= stored.stamp.written_at_s * 1000


async def found(store: FencedStore, lookup: str, document_id: str, partition: str) -> Any:
    if lookup == "get":
        return await store.get_stored(document_id, partition)
    return (await store.read(document_id, partition)).document


async def test_get_stored_gives_the_fields_and_the_etag_apart(store: FencedStore) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, owner="a"))

    found = await store.get_stored(stored.body["id"], partition)

    assert found is not None
    assert (found.body, found.etag) == (stored.body, stored.stamp.etag)
    assert await store.get_stored(unique_id(), partition) is None


@pytest.mark.parametrize("lookup", ["get", "read"])
async def test_get_and_read_find_nothing_for_a_missing_id_or_another_partition(
    store: FencedStore, lookup: str
) -> None:
    partition = unique_id("order")
    written = document(unique_id(), partition)
    await store.create(written)

    assert await found(store, lookup, unique_id(), partition) is None
    assert await found(store, lookup, written["id"], unique_id("order")) is None


# --- replace (If-Match) ----------------------------------------------------------------------


async def test_replace_with_the_current_etag_writes_and_moves_the_etag(store: FencedStore) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, owner="a"))

    replaced = await store.replace({**stored.body, "owner": "b"}, etag=stored.stamp.etag)

    assert replaced.body["owner"] == "b" and replaced.stamp.etag != stored.stamp.etag
    found = await store.get_stored(stored.body["id"], partition)
    assert found is not None and found.body["owner"] == "b" and found.etag == replaced.stamp.etag


async def test_replace_with_a_stale_etag_is_a_lost_lease_and_writes_nothing(
    store: FencedStore,
) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, owner="a"))
    moved = await store.replace({**stored.body, "owner": "b"}, etag=stored.stamp.etag)

    with pytest.raises(RecordChangedError):
        await store.replace({**stored.body, "owner": "c"}, etag=stored.stamp.etag)

    found = await store.get_stored(stored.body["id"], partition)
    assert found is not None and found.body["owner"] == "b" and found.etag == moved.stamp.etag


async def test_replace_of_a_missing_document_is_a_lost_lease(store: FencedStore) -> None:
    partition = unique_id("order")
    elsewhere = await store.create(document(unique_id(), partition, owner="a"))

    with pytest.raises(RecordChangedError):
        await store.replace(document(unique_id(), partition), etag=elsewhere.stamp.etag)
    # The same id in another partition is another document: nothing there to replace.
    with pytest.raises(RecordChangedError):
        await store.replace(
            document(elsewhere.body["id"], unique_id("order")), etag=elsewhere.stamp.etag
        )

    assert await body_of(store, elsewhere.body["id"], partition) == elsewhere.body


# --- delete (If-Match) -----------------------------------------------------------------------


async def test_delete_with_the_current_etag_removes_only_that_document(store: FencedStore) -> None:
    partition, other_partition = unique_id("order"), unique_id("order")
    stored = await store.create(document(unique_id(), partition, owner="a"))
    twin = await store.create(document(stored.body["id"], other_partition, owner="b"))

    await store.delete(stored.body["id"], partition, etag=stored.stamp.etag)

    assert await store.get_stored(stored.body["id"], partition) is None
    assert await body_of(store, twin.body["id"], other_partition) == twin.body


async def test_delete_with_a_stale_etag_or_of_a_missing_document_is_a_lost_lease(
    store: FencedStore,
) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, owner="a"))
    moved = await store.replace(
        document(stored.body["id"], partition, owner="b"), etag=stored.stamp.etag
    )

    with pytest.raises(RecordChangedError):
        await store.delete(stored.body["id"], partition, etag=stored.stamp.etag)
    with pytest.raises(RecordChangedError):
        await store.delete(unique_id(), partition, etag=moved.stamp.etag)

    assert await body_of(store, stored.body["id"], partition) == moved.body


# --- replace_and_create (one transactional batch) --------------------------------------------


async def test_replace_and_create_writes_both_in_one_batch(store: FencedStore) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, state="placed"))
    created = [document(unique_id(), partition, n=1), document(unique_id(), partition, n=2)]

    await store.replace_and_create(
        partition, {**stored.body, "state": "cancelled"}, etag=stored.stamp.etag, created=created
    )

    found = await store.get_stored(stored.body["id"], partition)
    assert found is not None and found.body["state"] == "cancelled"
    assert found.etag != stored.stamp.etag
    for expected in created:
        assert await body_of(store, expected["id"], partition) == expected


async def test_replace_and_create_with_a_stale_etag_writes_nothing(store: FencedStore) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, state="placed"))
    await store.replace({**stored.body, "state": "paid"}, etag=stored.stamp.etag)
    created = document(unique_id(), partition)

    with pytest.raises(RecordChangedError):
        await store.replace_and_create(
            partition,
            {**stored.body, "state": "cancelled"},
            etag=stored.stamp.etag,
            created=[created],
        )

    found = await store.get_stored(stored.body["id"], partition)
    assert found is not None and found.body["state"] == "paid"
    assert await store.get_stored(created["id"], partition) is None


async def test_replace_and_create_with_an_existing_id_writes_nothing(store: FencedStore) -> None:
    partition = unique_id("order")
    stored = await store.create(document(unique_id(), partition, state="placed"))
    existing = await store.create(document(unique_id(), partition, n=0))
    fresh = document(unique_id(), partition, n=1)

    with pytest.raises(DocumentExistsError):
        await store.replace_and_create(
            partition,
            {**stored.body, "state": "cancelled"},
            etag=stored.stamp.etag,
            created=[fresh, document(existing.body["id"], partition, n=2)],
        )

    found = await store.get_stored(stored.body["id"], partition)
    assert found is not None and found.body["state"] == "placed" and found.etag == stored.stamp.etag
    assert await store.get_stored(fresh["id"], partition) is None
    assert await body_of(store, existing.body["id"], partition) == existing.body
