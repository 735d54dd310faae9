"""One contract, two lease stores: `FakeLeaseStore` (the unit tests' stand-in) and
`CosmosLeaseStore` on our Cosmos emulator through the real SDK. Every write but the create is
If-Match on the lease's stamp; a stale one raises `RecordChangedError` and writes nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from fakes import FakeLeaseStore
from servers import CosmosServer

from exactly_once.change_feed import Lease, LeaseStore
from exactly_once.cosmos_change_feed import CosmosLeaseStore
from exactly_once.store import RecordChangedError

RANGE = '{"Range": {"isMaxInclusive": false, "isMinInclusive": true, "max": "FF", "min": ""}}'


@pytest.fixture(params=["fake", "cosmos"])
async def leases(request: pytest.FixtureRequest) -> AsyncIterator[LeaseStore]:
    if request.param == "fake":
        yield FakeLeaseStore()
        return
    server: CosmosServer = request.getfixturevalue("python_cosmos")
    async with CosmosClient(server.endpoint, credential=server.key) as client:
        database = await client.create_database_if_not_exists("lease-contract")
        container = await database.create_container(
            id=f"leases-{uuid.uuid4().hex[:8]}", partition_key=PartitionKey(path="/id")
        )
        yield CosmosLeaseStore(container)


async def the_lease(leases: LeaseStore) -> Lease:
    [lease] = (await leases.read_all()).leases
    return lease


async def test_a_created_lease_is_free_and_a_second_create_changes_nothing(
    leases: LeaseStore,
) -> None:
    await leases.create(RANGE, 30.0)
    created = await the_lease(leases)
    await leases.create(RANGE, 99.0)

    assert await the_lease(leases) == created
    assert (created.feed_range, created.owner, created.continuation) == (RANGE, None, None)
    assert created.lease_seconds == 30.0 and created.stamp is not None


async def test_acquire_checkpoint_renew_and_release_each_write_a_new_stamp(
    leases: LeaseStore,
) -> None:
    await leases.create(RANGE, 30.0)
    acquired = await leases.acquire(await the_lease(leases), "a", 20.0)
    moved = await leases.checkpoint(acquired, '"7"')
    renewed = await leases.renew(moved)
    released = await leases.release(renewed)

    assert (acquired.owner, acquired.lease_seconds) == ("a", 20.0)
    assert (moved.owner, moved.continuation) == ("a", '"7"')
    assert (released.owner, released.continuation) == (None, '"7"')  # the checkpoint stays
    stamps = [lease.stamp for lease in (acquired, moved, renewed, released)]
    assert len({stamp.etag for stamp in stamps if stamp is not None}) == 4
    assert await the_lease(leases) == released


async def test_a_write_with_a_stale_stamp_is_refused_and_writes_nothing(
    leases: LeaseStore,
) -> None:
    await leases.create(RANGE, 30.0)
    free = await the_lease(leases)
    taken = await leases.acquire(free, "a", 30.0)

    for stale_write in (
        leases.acquire(free, "b", 30.0),
        leases.renew(free),
        leases.checkpoint(free, '"9"'),
        leases.release(free),
    ):
        with pytest.raises(RecordChangedError):
            await stale_write
    assert await the_lease(leases) == taken


async def test_a_lease_just_written_is_live_by_the_clock_read_with_it(leases: LeaseStore) -> None:
    await leases.create(RANGE, 30.0)
    await leases.acquire(await the_lease(leases), "a", 30.0)

    table = await leases.read_all()

    [lease] = table.leases
    assert lease.is_live(table.database_now_ms)
    assert not lease.is_live(table.database_now_ms + 32_000)  # `_ts` second + 30 s, and past


async def test_a_lease_created_with_a_continuation_keeps_it_and_a_second_create_changes_nothing(
    leases: LeaseStore,
) -> None:
    """A split's child: created from its parent's continuation, once, whoever creates it."""
    await leases.create(RANGE, 30.0, '"7"')
    created = await the_lease(leases)
    await leases.create(RANGE, 30.0, '"9"')

    assert (created.owner, created.continuation) == (None, '"7"')
    assert await the_lease(leases) == created


async def test_a_delete_is_if_match_and_a_deleted_lease_is_gone(leases: LeaseStore) -> None:
    await leases.create(RANGE, 30.0)
    free = await the_lease(leases)
    taken = await leases.acquire(free, "a", 30.0)

    with pytest.raises(RecordChangedError):
        await leases.delete(free)  # stale: written since
    assert await the_lease(leases) == taken
    await leases.delete(taken)
    assert (await leases.read_all()).leases == []
    with pytest.raises(RecordChangedError):
        await leases.delete(taken)  # gone


async def test_a_request_keeps_owner_and_continuation_and_the_next_owner_clears_it(
    leases: LeaseStore,
) -> None:
    await leases.create(RANGE, 30.0, '"7"')
    held = await leases.acquire(await the_lease(leases), "a", 30.0)
    asked = await leases.request(held, "b")

    assert (asked.owner, asked.continuation, asked.requested_by) == ("a", '"7"', "b")
    with pytest.raises(RecordChangedError):
        await leases.renew(held)  # the request moved the stamp
    released = await leases.release(asked)
    taken = await leases.acquire(released, "b", 30.0)
    assert released.requested_by is None and (taken.owner, taken.requested_by) == ("b", None)
