"""`IdempotencyKeys` on a FastAPI app over `CosmosStore` on our Cosmos DB emulator: a request
in progress is refused with Retry-After, a failed one is released, an abandoned one is taken
over once its lease ends by the database's clock (the app: idempotency_app.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from core_support import lease_ended, unique
from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from idempotency_app import Endpoint, app_for

from exactly_once import CosmosStore
from exactly_once._idempotency_key import (
    DEFAULT_MAX_REQUEST_BYTES,
    HEADER,
    IdempotencyKeys,
    KeyClaim,
    KeyedRequest,
)
from exactly_once._problems import REPLAYED_HEADER
from exactly_once.keys import key_record_id


@pytest.fixture
async def http(store: CosmosStore) -> AsyncIterator[tuple[httpx.AsyncClient, Endpoint]]:
    endpoint = Endpoint()
    app = app_for(IdempotencyKeys(store, scope="things", lease_seconds=1), endpoint)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client, endpoint


async def test_a_replay_has_the_first_status_body_and_headers(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    key = {"Idempotency-Key": unique("key")}

    first = await client.post("/things", json={"a": 1}, headers=key)
    again = await client.post("/things", content=b'{ "a" : 1 }', headers=key)  # same JSON

    assert (first.status_code, first.json(), first.headers["location"]) == (
        201,
        {"run": 1},
        "/things/1",
    )
    assert (again.status_code, again.json(), again.headers["location"]) == (
        201,
        {"run": 1},
        "/things/1",
    )
    assert endpoint.runs == 1


async def test_a_request_in_progress_is_refused_with_retry_after(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    key = {"Idempotency-Key": unique("key")}
    endpoint.release.clear()

    first = asyncio.create_task(client.post("/things", json={}, headers=key))
    await asyncio.wait_for(endpoint.started.wait(), 10)
    concurrent = await client.post("/things", json={}, headers=key)
    endpoint.release.set()

    assert concurrent.status_code == 409
    assert 1 <= int(concurrent.headers["retry-after"]) <= 5
    assert (await first).status_code == 201
    assert endpoint.runs == 1


async def test_a_failed_request_is_released_and_runs_again(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    key = {"Idempotency-Key": unique("key")}
    endpoint.fail_next = True

    failed = await client.post("/things", json={}, headers=key)
    retried = await client.post("/things", json={}, headers=key)

    assert failed.status_code == 500
    assert (retried.status_code, retried.json()) == (201, {"run": 2})


async def test_an_abandoned_claim_is_taken_over_once_its_lease_ends(
    store: CosmosStore, http: tuple[httpx.AsyncClient, Endpoint]
) -> None:
    client, _ = http
    crashed = IdempotencyKeys(store, scope="things", lease_seconds=1, owner="crashed")
    key = unique("key")
    # A process that claimed the key and died before it could answer or release.
    claim = await crashed.claim(key, "POST", "/things", b"{}")
    assert claim.replay is None

    refused = await client.post("/things", json={}, headers={"Idempotency-Key": key})
    assert refused.status_code == 409
    owned = claim._owned
    assert owned is not None
    await lease_ended(store, owned)
    taken = await client.post("/things", json={}, headers={"Idempotency-Key": key})

    assert (taken.status_code, taken.json()) == (201, {"run": 1})


@pytest.mark.parametrize("header", [None, b"", b"x" * 256, "café".encode("latin-1")])
async def test_a_missing_or_malformed_key_is_a_400(
    http: tuple[httpx.AsyncClient, Endpoint], header: bytes | None
) -> None:
    client, endpoint = http
    headers = [] if header is None else [(b"Idempotency-Key", header)]

    response = await client.post("/things", json={}, headers=headers)

    assert response.status_code == 400
    assert endpoint.runs == 0


# --- the whole request is the fingerprint, and the body is read no further than the limit -----


async def test_the_same_key_with_another_query_is_a_422_not_a_replay(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    key = {"Idempotency-Key": unique("key")}

    first = await client.post("/things?to=alice&note=1", json={"a": 1}, headers=key)
    reordered = await client.post("/things?note=1&to=alice", json={"a": 1}, headers=key)
    other = await client.post("/things?to=mallory&note=1", json={"a": 1}, headers=key)
    dropped = await client.post("/things", json={"a": 1}, headers=key)

    assert first.status_code == 201
    assert (reordered.status_code, reordered.json()) == (201, first.json())  # a replay
    assert (other.status_code, dropped.status_code) == (422, 422)
    assert endpoint.runs == 1


async def test_a_repeated_query_parameter_keeps_its_order(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    key = {"Idempotency-Key": unique("key")}

    first = await client.post("/things?to=a&to=b", json={}, headers=key)
    swapped = await client.post("/things?to=b&to=a", json={}, headers=key)

    assert (first.status_code, swapped.status_code) == (201, 422)
    assert endpoint.runs == 1


async def test_the_same_key_with_another_method_or_path_is_a_422(
    store: CosmosStore, http: tuple[httpx.AsyncClient, Endpoint]
) -> None:
    client, _ = http
    key = unique("key")
    keys = IdempotencyKeys(store, scope="things")
    assert (await client.post("/things", json={}, headers={"Idempotency-Key": key})).is_success

    for method, path in [("PUT", "/things"), ("POST", "/things/1")]:
        with pytest.raises(HTTPException) as refused:
            await keys.claim(key, method, path, b"{}")
        assert refused.value.status_code == 422


class CountedBody:
    """A request body of `total` bytes sent in `chunk`-sized pieces, counting what was read."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.read = total, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.read < self.total:
            piece = b" " * min(self.chunk, self.total - self.read)
            self.read += len(piece)
            yield piece


BOUND = DEFAULT_MAX_REQUEST_BYTES


async def test_a_content_length_over_the_limit_is_refused_before_a_byte_is_read(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    body = CountedBody(150 * 1024 * 1024)
    headers = {"Idempotency-Key": unique("key"), "Content-Length": str(body.total)}

    refused = await client.post("/things", content=body, headers=headers)

    assert refused.status_code == 413
    assert str(BOUND) in refused.json()["detail"]
    assert body.read == 0
    assert endpoint.runs == 0


async def test_a_chunked_body_is_read_no_further_than_the_limit(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    body = CountedBody(150 * 1024 * 1024)  # no Content-Length: sent chunked

    refused = await client.post("/things", content=body, headers={"Idempotency-Key": unique("k")})

    assert refused.status_code == 413
    assert body.read <= BOUND + 2 * body.chunk  # the limit, and the chunk that passed it
    assert endpoint.runs == 0


@pytest.mark.parametrize("length", ["abc", "1,2", "\u00b2", "9" * 40])
async def test_a_malformed_or_absurd_content_length_is_refused(
    http: tuple[httpx.AsyncClient, Endpoint], length: str
) -> None:
    client, endpoint = http
    headers = [
        (b"Idempotency-Key", unique("key").encode()),
        (b"Content-Length", length.encode("latin-1")),
    ]

    refused = await client.post("/things", content=CountedBody(0), headers=headers)

    assert refused.status_code in (400, 413)
    slug = {400: "invalid-content-length", 413: "body-too-large"}[refused.status_code]
    assert refused.json()["type"] == f"urn:exactly-once:problem:{slug}"
    assert endpoint.runs == 0


async def test_a_body_within_the_limit_reaches_the_endpoint_whole(
    store: CosmosStore,
) -> None:
    seen: list[bytes] = []

    async def endpoint(claim: KeyClaim) -> JSONResponse:
        seen.append(claim.body)
        return await claim.complete(201, {})

    app = app_for(IdempotencyKeys(store, scope="things", max_body_bytes=BOUND), endpoint)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        body = b'{"pad": "' + b"x" * (BOUND - 20) + b'"}'
        sent = await client.post("/things", content=body, headers={"Idempotency-Key": unique("k")})

    assert sent.status_code == 201
    assert seen == [body]


async def test_problems_are_typed_under_the_prefix_the_app_chooses(store: CosmosStore) -> None:
    endpoint = Endpoint()
    keys = IdempotencyKeys(store, scope="things", problem_type_prefix="urn:greetings:problem:")
    transport = httpx.ASGITransport(app=app_for(keys, endpoint))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        missing = await client.post("/things", json={})

    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json()["type"] == "urn:greetings:problem:missing-idempotency-key"
    assert endpoint.runs == 0


async def test_without_answer_problems_a_refusal_keeps_its_status_and_headers(
    store: CosmosStore,
) -> None:
    endpoint = Endpoint()
    endpoint.release.clear()
    app = app_for(IdempotencyKeys(store, scope="things"), endpoint, problems=False)
    key = {"Idempotency-Key": unique("key")}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        missing = await client.post("/things", json={})
        first = asyncio.create_task(client.post("/things", json={}, headers=key))
        await asyncio.wait_for(endpoint.started.wait(), 10)
        busy = await client.post("/things", json={}, headers=key)
        endpoint.release.set()
        await first

    assert (missing.status_code, missing.headers["content-type"]) == (400, "application/json")
    assert "required" in missing.json()["detail"]  # FastAPI's own body
    assert busy.status_code == 409 and int(busy.headers["retry-after"]) >= 1


async def test_a_missing_key_is_refused_before_a_byte_of_the_body_is_read(
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    body = CountedBody(150 * 1024 * 1024)  # chunked: only reading it would find its size

    refused = await client.post("/things", content=body)

    assert refused.status_code == 400
    assert refused.json()["type"] == "urn:exactly-once:problem:missing-idempotency-key"
    assert body.read == 0
    assert endpoint.runs == 0


def described_by_name(request: Request, body: bytes) -> KeyedRequest:
    """A host's own fingerprint: the `name` its body holds (anything else in it may change),
    refusing a body without one; the record keeps the name for the host's readers."""
    name = json.loads(body).get("name") if body.strip() else None
    if not isinstance(name, str):
        raise HTTPException(400, "a name is required")
    return KeyedRequest(request_hash=f"name:{name}", data={"name": name})


async def test_describe_chooses_the_fingerprint_and_the_records_data(store: CosmosStore) -> None:
    endpoint = Endpoint()
    keys = IdempotencyKeys(store, scope="things", describe=described_by_name)
    key = unique("key")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app_for(keys, endpoint)), base_url="http://test"
    ) as client:
        first = await client.post("/things", json={"name": "a", "at": 1}, headers={HEADER: key})
        same_name = await client.post("/things", json={"name": "a", "at": 2}, headers={HEADER: key})
        other_name = await client.post("/things", json={"name": "b"}, headers={HEADER: key})

    assert first.status_code == 201
    assert (same_name.status_code, same_name.headers[REPLAYED_HEADER]) == (201, "true")
    assert other_name.status_code == 422
    found = await store.read(key_record_id("things", key), key_record_id("things", key))
    assert found.record is not None
    assert (found.record.request_hash, found.record.data) == ("name:a", {"name": "a"})
    assert endpoint.runs == 1


async def test_a_body_describe_refuses_claims_no_key(store: CosmosStore) -> None:
    endpoint = Endpoint()
    keys = IdempotencyKeys(store, scope="things", describe=described_by_name)
    key = unique("key")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app_for(keys, endpoint)), base_url="http://test"
    ) as client:
        refused = await client.post("/things", json={"nameless": True}, headers={HEADER: key})

    assert refused.status_code == 400
    found = await store.read(key_record_id("things", key), key_record_id("things", key))
    assert found.record is None
    assert endpoint.runs == 0


async def test_retry_after_is_capped_as_the_host_chooses(store: CosmosStore) -> None:
    endpoint = Endpoint()
    endpoint.release.clear()
    keys = IdempotencyKeys(store, scope="things", lease_seconds=60, retry_after_cap=1)
    key = {HEADER: unique("key")}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app_for(keys, endpoint)), base_url="http://test"
    ) as client:
        first = asyncio.create_task(client.post("/things", json={}, headers=key))
        await asyncio.wait_for(endpoint.started.wait(), 10)
        busy = await client.post("/things", json={}, headers=key)
        endpoint.release.set()
        await first

    assert (busy.status_code, busy.headers["retry-after"]) == (409, "1")
