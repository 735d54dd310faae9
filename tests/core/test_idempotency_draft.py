"""draft-ietf-httpapi-idempotency-key-header-07, statement by statement, against both HTTP hosts:
the core's FastAPI dependency (`IdempotencyKeys` on `CosmosStore` over our Cosmos DB
emulator) and the orders API (`POST /api/orders`, which stands behind that dependency, with its
key records on its Cosmos adapter over the same emulator and its publisher a fake). Each case
names the section it checks; both hosts must pass every case with the same problem `type`
(under their own prefix), `title`, status and headers: one behaviour, the core's.

Where we go beyond the draft, the case says so: the replay's `Idempotent-Replayed: true`
(Stripe), 413 for an oversized body (RFC 9110 §15.5.14). Where we differ, too: §2.6 lets a
server replay a failed request's error; both hosts release the key of a request that failed,
so its retry runs again (`test_idempotency_key.py`, `tests/http/test_api.py`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from core_support import unique
from fakes import (
    LAYOUT,
    FakeOrderReader,
    FakeOrderStore,
    RecordingPublisher,
    order_payload,
)
from idempotency_app import Endpoint, app_for
from servers import CosmosServer

from exactly_once import CosmosStore
from exactly_once import _problems as problems
from exactly_once._idempotency_key import IdempotencyKeys
from exactly_once.keys import key_record_id
from orders.adapters.cosmos_idempotency import CosmosIdempotencyStore
from orders.bootstrap import HttpRuntime
from orders.domain.messages import MAX_BODY_BYTES
from orders.entrypoints.http_api import create_app
from orders.service.idempotency import IdempotentOrderIntake
from orders.service.order_lookup import OrderLookup

HEADER = "Idempotency-Key"
CORE_EXPIRES_AFTER_SECONDS = 3600


ORDERS_TTL_SECONDS = 600


@dataclass
class Subject:
    """One HTTP host under test: where it takes a keyed POST, what a valid body for it is
    (`body(variant)`: another variant is another payload), and its one effect, which a test
    can hold in flight and count."""

    name: str
    client: httpx.AsyncClient
    path: str
    type_prefix: str
    body: Callable[[str], dict[str, Any]]
    hold: Callable[[], None]
    release: Callable[[], None]
    started: asyncio.Event
    runs: Callable[[], int]
    max_body_bytes: int
    records: ContainerProxy  # where the key's records are, in the emulator
    scope: str  # the scope of the keys this subject's client sends
    expires_after_seconds: int  # the ttl the host publishes for its records (§2.3)


def core_subject(
    client: httpx.AsyncClient, endpoint: Endpoint, keys: IdempotencyKeys, records: ContainerProxy
) -> Subject:
    return Subject(
        name="core",
        client=client,
        path="/things",
        type_prefix=problems.DEFAULT_TYPE_PREFIX,
        body=lambda variant: {"thing": variant, "count": 1},
        hold=endpoint.release.clear,
        release=endpoint.release.set,
        started=endpoint.started,
        runs=lambda: endpoint.runs,
        max_body_bytes=keys.max_body_bytes,
        records=records,
        scope="things",
        expires_after_seconds=CORE_EXPIRES_AFTER_SECONDS,
    )


def orders_subject(
    client: httpx.AsyncClient, publisher: RecordingPublisher, records: ContainerProxy
) -> Subject:
    order_id = f"o-{uuid.uuid4().hex[:12]}"
    return Subject(
        name="orders",
        client=client,
        path="/api/orders",
        type_prefix="urn:orders:problem:",
        body=lambda variant: order_payload(order_id, customerId=f"customer-{variant}"),
        hold=publisher.hold,
        release=publisher.release,
        started=publisher.started,
        runs=lambda: len(publisher.published),
        max_body_bytes=MAX_BODY_BYTES,
        records=records,
        scope="app:draft",
        expires_after_seconds=ORDERS_TTL_SECONDS,
    )


@pytest.fixture
async def orders_records(python_cosmos: CosmosServer) -> AsyncIterator[ContainerProxy]:
    """The orders API's key records as its Cosmos adapter expects them: partitioned by /id."""
    async with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        database = await client.create_database_if_not_exists("core")
        yield await database.create_container_if_not_exists(
            id=f"idempotency-{uuid.uuid4().hex[:8]}",
            partition_key=PartitionKey(path="/id"),
            default_ttl=-1,
        )


@pytest.fixture(params=["core", "orders"])
def host(request: pytest.FixtureRequest) -> tuple[str, ContainerProxy]:
    """The host's name, and the container of its key records. A plain fixture: an async one
    cannot ask for another async fixture by name."""
    if request.param == "core":
        return "core", request.getfixturevalue("container")
    return "orders", request.getfixturevalue("orders_records")


@pytest.fixture
async def subject(host: tuple[str, ContainerProxy]) -> AsyncIterator[Subject]:
    name, container = host
    if name == "core":
        keys = IdempotencyKeys(
            CosmosStore(container),
            scope="things",
            expires_after_seconds=CORE_EXPIRES_AFTER_SECONDS,
        )
        endpoint = Endpoint()
        app = app_for(keys, endpoint)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            yield core_subject(client, endpoint, keys, container)
        return
    store, publisher = CosmosIdempotencyStore(container), RecordingPublisher()

    async def runtime() -> HttpRuntime:
        intake = IdempotentOrderIntake(store, publisher, ttl_seconds=ORDERS_TTL_SECONDS)
        lookup = OrderLookup(FakeOrderReader(FakeOrderStore()), store, LAYOUT)
        return HttpRuntime(intake, lookup, default_scope="draft", trust_principal_header=False)

    transport = httpx.ASGITransport(app=create_app(runtime))
    async with httpx.AsyncClient(transport=transport, base_url="http://orders.test") as client:
        yield orders_subject(client, publisher, container)


async def post(
    subject: Subject, body: bytes | dict[str, Any], headers: list[tuple[str, str | bytes]]
) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    # As bytes: a key outside ASCII must reach the host as the client sent it.
    sent = [
        (name.encode(), value if isinstance(value, bytes) else value.encode())
        for name, value in [("content-type", "application/json"), *headers]
    ]
    return await subject.client.post(subject.path, content=content, headers=sent)


def keyed(key: str) -> list[tuple[str, str | bytes]]:
    return [(HEADER, key)]


def assert_problem(subject: Subject, response: httpx.Response, expected: problems.Problem) -> None:
    """RFC 9457 §3: problem+json whose members are the core's problem, `status` the response's."""
    assert response.status_code == expected.status, response.text
    assert response.headers["content-type"] == problems.PROBLEM_JSON
    body = response.json()
    assert body["type"] == subject.type_prefix + expected.slug
    assert (body["title"], body["status"]) == (expected.title, expected.status)
    assert isinstance(body["detail"], str) and body["detail"]


# --- §2.1 Syntax -------------------------------------------------------------------------------


async def test_2_1_more_than_one_key_field_is_refused_never_guessed(subject: Subject) -> None:
    """draft-07 §2.1: "Clients MUST NOT include more than one Idempotency-Key header field"."""
    response = await post(subject, subject.body("a"), [(HEADER, "k-1"), (HEADER, "k-2")])

    assert_problem(subject, response, problems.invalid_key())
    assert subject.runs() == 0


async def test_2_1_the_drafts_example_key_an_sf_string_is_taken_and_replayed(
    subject: Subject,
) -> None:
    """draft-07 §2.1: the key is an sf-string (`"8e03978e-..."`); its bytes are the key, so
    the retry of the same sf-string is the same request."""
    key = f'"{uuid.uuid4()}"'

    first = await post(subject, subject.body("a"), keyed(key))
    retry = await post(subject, subject.body("a"), keyed(key))

    assert first.is_success and retry.status_code == first.status_code
    assert subject.runs() == 1


@pytest.mark.parametrize("key", [b"x" * 256, "caf\u00e9".encode("latin-1")])
async def test_2_1_a_key_outside_the_servers_rules_is_a_400_problem(
    subject: Subject, key: bytes
) -> None:
    """draft-07 §2.1/§2.5: the server publishes its key rules (1..255 printable ASCII)."""
    response = await post(subject, subject.body("a"), [(HEADER, key)])

    assert_problem(subject, response, problems.invalid_key())
    assert subject.runs() == 0


# --- §2.3 Validity and expiry -------------------------------------------------------------------


async def test_2_3_a_keys_record_expires_after_the_published_time(subject: Subject) -> None:
    """draft-07 §2.3: the server MAY purge a key on expiry and SHOULD publish the policy: each
    host's records carry the Cosmos DB `ttl` it publishes (the core's
    `expires_after_seconds`, the orders API's key ttl)."""
    key = unique("key")
    assert (await post(subject, subject.body("a"), keyed(key))).is_success

    record_id = key_record_id(subject.scope, key)
    document = await subject.records.read_item(record_id, partition_key=record_id)
    assert document["ttl"] == subject.expires_after_seconds


# --- §2.4 Fingerprint ----------------------------------------------------------------------------


async def test_2_4_the_fingerprint_is_of_the_payload_not_its_spelling(subject: Subject) -> None:
    """draft-07 §2.4: the fingerprint is the server's choice; both hash the canonical JSON, so
    a retry that differs in spacing or key order is the same request (a replay, not a 422)."""
    key = unique("key")
    body = subject.body("a")
    respelled = json.dumps(dict(reversed(body.items())), indent=3).encode()

    first = await post(subject, body, keyed(key))
    retry = await post(subject, respelled, keyed(key))

    assert (retry.status_code, retry.json()) == (first.status_code, first.json())
    assert subject.runs() == 1


# --- §2.6 Enforcement scenarios ------------------------------------------------------------------


async def test_2_6_a_first_request_is_processed_normally(subject: Subject) -> None:
    """draft-07 §2.6 "First time request": processed normally, not marked as a replay."""
    response = await post(subject, subject.body("a"), keyed(unique("key")))

    assert response.is_success
    assert problems.REPLAYED_HEADER.lower() not in response.headers
    assert subject.runs() == 1


async def test_2_6_a_retry_after_completion_gets_the_first_result_marked_as_a_replay(
    subject: Subject,
) -> None:
    """draft-07 §2.6 "Retry": the result of the completed operation; marked
    `Idempotent-Replayed: true` (Stripe's header: the draft leaves the marking open)."""
    key = unique("key")

    first = await post(subject, subject.body("a"), keyed(key))
    retry = await post(subject, subject.body("a"), keyed(key))

    assert (retry.status_code, retry.json()) == (first.status_code, first.json())
    assert retry.headers[problems.REPLAYED_HEADER] == "true"
    assert subject.runs() == 1


async def test_2_6_and_2_7_a_retry_while_the_first_is_in_flight_is_a_409_with_retry_after(
    subject: Subject,
) -> None:
    """draft-07 §2.6 "Concurrent Request" (MUST: a resource conflict error) and §2.7 (409,
    with a problem body); `Retry-After` says when to come back."""
    key = unique("key")
    subject.hold()
    first = asyncio.create_task(post(subject, subject.body("a"), keyed(key)))
    await asyncio.wait_for(subject.started.wait(), 10)

    concurrent = await post(subject, subject.body("a"), keyed(key))
    subject.release()

    assert_problem(subject, concurrent, problems.request_in_progress(1))
    assert int(concurrent.headers["retry-after"]) >= 1
    assert (await asyncio.wait_for(first, 10)).is_success
    assert subject.runs() == 1


# --- §2.7 Error scenarios ------------------------------------------------------------------------


async def test_2_7_a_missing_key_is_a_400_problem(subject: Subject) -> None:
    """draft-07 §2.7: a missing key on an operation that requires it is 400, with a problem
    body (the draft's example uses RFC 7807)."""
    response = await post(subject, subject.body("a"), [])

    assert_problem(subject, response, problems.missing_key())
    assert subject.runs() == 0


async def test_2_7_a_key_reused_with_another_payload_is_a_422_problem(subject: Subject) -> None:
    """draft-07 §2.2 (a key MUST NOT be reused with another payload) and §2.7 (422)."""
    key = unique("key")
    assert (await post(subject, subject.body("a"), keyed(key))).is_success

    reused = await post(subject, subject.body("b"), keyed(key))

    assert_problem(subject, reused, problems.key_reused())
    assert subject.runs() == 1


async def test_2_7_a_reuse_is_a_422_even_while_the_first_is_in_flight(subject: Subject) -> None:
    """draft-07 §2.7: another payload under the key is refused as a reuse whatever the first
    request's state (it must be corrected, not retried later)."""
    key = unique("key")
    subject.hold()
    first = asyncio.create_task(post(subject, subject.body("a"), keyed(key)))
    await asyncio.wait_for(subject.started.wait(), 10)

    reused = await post(subject, subject.body("b"), keyed(key))
    subject.release()

    assert_problem(subject, reused, problems.key_reused())
    assert (await asyncio.wait_for(first, 10)).is_success


async def test_an_oversized_body_is_a_413_problem_before_a_key_is_claimed(
    subject: Subject,
) -> None:
    """Beyond the draft, RFC 9110 §15.5.14: a body over the host's limit is 413, and the key
    stays free, so the corrected request under it runs."""
    key = unique("key")
    padded = {**subject.body("a"), "pad": "x" * subject.max_body_bytes}

    refused = await post(subject, padded, keyed(key))
    corrected = await post(subject, subject.body("a"), keyed(key))

    assert refused.status_code == 413
    assert refused.headers["content-type"] == problems.PROBLEM_JSON
    assert refused.json()["status"] == 413
    assert refused.json()["type"] == subject.type_prefix + problems.body_too_large("").slug
    assert corrected.is_success
    assert subject.runs() == 1
