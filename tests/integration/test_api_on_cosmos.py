"""The API over the real Cosmos adapter on our emulator: the atomic create is the real lock.

50 simultaneous requests with one key must publish exactly once; a crashed claim is taken over
after its lease, and the stale claimant's completion is fenced off by the real ETag check.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from fakes import new_write, order_payload
from http_support import Api, api_over, lease_over, new_order_id
from servers import CosmosServer, clear_faults, fail_replaces

from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.domain.hashing import request_hash
from orders.domain.idempotency import record_id
from orders.domain.messages import parse_order
from orders.entrypoints.http_contract import accepted_response

CONCURRENT_REQUESTS = 50
# Leases are judged by the database's clock, which a test cannot advance: a lease this short
# ends soon enough to wait for.
SHORT_LEASE_SECONDS = 1.0


@pytest.fixture
def request_log() -> list[str]:
    """Every HTTP request the real SDK sends (filled by an azure-core raw request hook)."""
    return []


@pytest.fixture
async def container(python_cosmos: Any, request_log: list[str]) -> AsyncIterator[ContainerProxy]:
    def log(request: Any) -> None:
        request_log.append(f"{request.http_request.method} {request.http_request.url}")

    async with CosmosClient(
        python_cosmos.endpoint, credential=python_cosmos.key, raw_request_hook=log
    ) as client:
        database = await client.create_database_if_not_exists("http-api")
        yield await database.create_container_if_not_exists(
            id=f"idempotency-{uuid.uuid4().hex[:8]}",
            partition_key=PartitionKey(path="/id"),
            default_ttl=-1,
        )


@pytest.fixture
async def api(container: ContainerProxy) -> AsyncIterator[Api]:
    async for value in api_over(CosmosIdempotencyStore(container)):
        yield value


def classify(response: httpx.Response) -> str:
    if response.status_code in (200, 202):  # a cancel's answer is 200, an order's 202
        return "replay" if response.headers.get("idempotent-replayed") == "true" else "first"
    return str(response.status_code)


async def test_fifty_simultaneous_requests_with_one_key_publish_once(api: Api) -> None:
    order_id = new_order_id()
    start = asyncio.Event()

    async def one_request() -> httpx.Response:
        await start.wait()
        return await api.post(order_payload(order_id), key="same-key")

    requests = [asyncio.create_task(one_request()) for _ in range(CONCURRENT_REQUESTS)]
    start.set()
    responses = await asyncio.gather(*requests)

    kinds = [classify(response) for response in responses]
    assert kinds.count("first") == 1
    assert set(kinds) <= {"first", "replay", "409"}, kinds
    assert [order.order_id for order in api.publisher.published] == [order_id]
    for response in responses:
        if response.status_code == 409:
            assert response.headers["retry-after"] == "1"
        else:
            assert response.json()["orderId"] == order_id


async def test_while_the_first_send_is_in_flight_every_other_request_gets_409(api: Api) -> None:
    order_id = new_order_id()
    api.publisher.hold()
    first = asyncio.create_task(api.post(order_payload(order_id), key="held-key"))
    await api.publisher.started.wait()

    others = await asyncio.gather(
        *(api.post(order_payload(order_id), key="held-key") for _ in range(CONCURRENT_REQUESTS - 1))
    )
    api.publisher.release()
    # The retry comes after the first answer, as a client's would: posted beside the first's
    # completion it may still find the claim in progress (409), which is right but not this test.
    first_response = await first
    replay = await api.post(order_payload(order_id), key="held-key")

    assert [response.status_code for response in others] == [409] * (CONCURRENT_REQUESTS - 1)
    assert classify(first_response) == "first"
    assert classify(replay) == "replay"
    assert len(api.publisher.published) == 1


@pytest.fixture
async def short_lease_api(container: ContainerProxy) -> AsyncIterator[Api]:
    store = CosmosIdempotencyStore(container)
    async for value in api_over(store, lease_seconds=SHORT_LEASE_SECONDS):
        yield value


async def test_crashed_claim_is_taken_over_and_the_stale_completion_is_fenced(
    short_lease_api: Api, container: ContainerProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a claimant stuck in its send past its (short) lease: as good as crashed
    api, store = short_lease_api, short_lease_api.store
    order_id = new_order_id()
    api.publisher.hold()
    stale = asyncio.create_task(api.post(order_payload(order_id), key="crash-key"))
    await api.publisher.started.wait()
    item_id = record_id("app:tests", "crash-key")
    claimed = await container.read_item(item_id, partition_key=item_id)

    # When a retry arrives after the lease ended by the database's clock, it takes over
    # and publishes again
    found = await store.read(item_id, item_id)
    assert found.record is not None
    await lease_over(store, found.record)
    takeover = asyncio.create_task(api.post(order_payload(order_id), key="crash-key"))
    await api.publisher.wait_for_calls(2)
    taken = await container.read_item(item_id, partition_key=item_id)
    api.publisher.release()
    stale_response, takeover_response = await asyncio.gather(stale, takeover)

    # Then both answer 202; the record was completed once, by the new owner (If-Match
    # fenced the stale claimant's replace: its ETag was the claim's, replaced by the
    # takeover)
    assert claimed["status"] == taken["status"] == "inProgress"
    assert taken["_etag"] != claimed["_etag"]
    assert taken["owner"] != claimed["owner"] and taken["attempts"] == 2
    assert taken["_ts"] >= claimed["_ts"] + SHORT_LEASE_SECONDS  # the lease, dated by _ts
    assert stale_response.status_code == takeover_response.status_code == 202
    # The core's claim logs the fenced completion (the orders API completes through it).
    fenced = [r for r in caplog.records if "moved on while its owner" in r.getMessage()]
    assert len(fenced) == 1  # the stale replace got 412 from Cosmos
    final = await container.read_item(item_id, partition_key=item_id)
    assert final["status"] == "completed" and final["ttl"] > 0
    assert final["response"]["body"]["orderId"] == order_id
    assert [order.order_id for order in api.publisher.published] == [order_id, order_id]
    replay = await api.post(order_payload(order_id), key="crash-key")
    assert classify(replay) == "replay"


async def test_a_response_the_store_cannot_record_is_503_then_the_replay_published_once(
    api: Api, python_cosmos: CosmosServer, container: ContainerProxy
) -> None:
    # Given a store that fails every write of the key's record once it is claimed
    order_id = new_order_id()
    item_id = record_id("app:tests", "unrecorded-key")
    await fail_replaces(python_cosmos, item_id, status=503, count=1_000_000)
    try:
        failed = await api.post(order_payload(order_id), key="unrecorded-key")
        while_down = await api.post(order_payload(order_id), key="unrecorded-key")
        kept = await container.read_item(item_id, partition_key=item_id)
    finally:
        await clear_faults(python_cosmos)

    # Then the order was published once and the client told to retry with the same key
    assert failed.status_code == 503
    assert failed.headers["content-type"] == "application/problem+json"
    assert failed.json()["type"] == "urn:orders:problem:response-not-recorded"
    assert failed.headers["retry-after"] == "1"
    # and the record stays in progress: the retry is refused, not published again
    assert while_down.status_code == 409
    assert kept["status"] == "inProgress"
    assert [order.order_id for order in api.publisher.published] == [order_id]

    # When the store is back, the background write records the answer: the retry replays it
    deadline = time.monotonic() + 15
    replay = await api.post(order_payload(order_id), key="unrecorded-key")
    while replay.status_code == 409 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # the client's retry pause, bounded by the deadline
        replay = await api.post(order_payload(order_id), key="unrecorded-key")
    assert classify(replay) == "replay"
    assert replay.json()["orderId"] == order_id
    assert [order.order_id for order in api.publisher.published] == [order_id]


async def test_fifty_simultaneous_cancels_with_one_key_publish_once(api: Api) -> None:
    order_id = new_order_id()
    assert (await api.post(order_payload(order_id), key="place")).status_code == 202
    owner = api.publisher.owners[order_id]
    await api.order_store.create_all(
        order_id, new_write(order_id, owner_scope=owner)
    )  # as the consumer
    start = asyncio.Event()

    async def one_request() -> httpx.Response:
        await start.wait()
        return await api.client.post(
            f"/api/orders/{order_id}/cancel",
            json={"reason": "no longer needed"},
            headers={"Idempotency-Key": "cancel-key"},
        )

    requests = [asyncio.create_task(one_request()) for _ in range(CONCURRENT_REQUESTS)]
    start.set()
    responses = await asyncio.gather(*requests)

    kinds = [classify(response) for response in responses]
    assert kinds.count("first") == 1
    assert set(kinds) <= {"first", "replay", "409"}, kinds
    [change] = api.publisher.statuses
    assert (change.order_id, change.status.value, change.version) == (order_id, "cancelled", 5)


async def test_records_of_the_previous_version_are_replayed_and_their_leases_honoured(
    api: Api, container: ContainerProxy
) -> None:
    """A user upgrading has records in the old shape (the claimant's `leaseExpiresAt`, no
    owner) within their TTL: a completed one is replayed, a live one still answers 409."""
    order_id = new_order_id()
    payload = order_payload(order_id)
    order = parse_order(httpx.Request("POST", "/", json=payload).content)

    def legacy(key: str, status: str, response: Any) -> dict[str, Any]:
        return {
            "id": record_id("app:tests", key),
            "type": "idempotencyRecord",
            "scope": "app:tests",
            "key": key,
            "requestHash": request_hash(order.canonical_payload()),
            "orderId": order_id,
            "status": status,
            "leaseExpiresAt": time.time() + 600,
            "response": response,
            "ttl": 600,
        }

    await container.create_item(legacy("old-done", "completed", accepted_response(order_id)))
    await container.create_item(legacy("old-live", "inProgress", None))

    replayed = await api.post(payload, key="old-done")
    busy = await api.post(payload, key="old-live")

    assert classify(replayed) == "replay" and replayed.json()["orderId"] == order_id
    assert replayed.headers["location"] == f"/api/orders/{order_id}"
    assert busy.status_code == 409 and busy.headers["retry-after"] == "1"
    assert api.publisher.published == []


async def test_a_new_order_costs_three_requests_and_a_replay_two(
    api: Api, request_log: list[str]
) -> None:
    """On the wire, as docs/http-api.md says: a first request creates the key's record and the
    orderId's claim and completes the record (one If-Match replace); a replay is one failed
    create and one query (the record and the database's time)."""
    warm_order = new_order_id()  # the SDK's caches (account, container, partitions) warm up
    for _ in range(2):
        assert (await api.post(order_payload(warm_order), key="warm")).status_code == 202
    order_id = new_order_id()

    request_log.clear()
    first = await api.post(order_payload(order_id), key="counted")
    first_requests = list(request_log)
    request_log.clear()
    replay = await api.post(order_payload(order_id), key="counted")
    replay_requests = list(request_log)

    assert classify(first) == "first" and classify(replay) == "replay"
    assert len(first_requests) == 3, first_requests
    assert len(replay_requests) == 2, replay_requests
