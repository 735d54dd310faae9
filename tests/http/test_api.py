"""Every branch of the HTTP API against fakes of its ports (the store and the publisher)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from fakes import (
    LAYOUT,
    FakeIdempotencyStore,
    FakeOrderReader,
    FakeOrderStore,
    RecordingPublisher,
    order_payload,
)
from http_support import (
    LEASE_SECONDS,
    TTL_SECONDS,
    Api,
    FakeClock,
    assert_problem,
    new_order_id,
    runtime_over,
)

from exactly_once._records import Record
from exactly_once.exceptions import StoreError, TransientStoreError
from orders.bootstrap import HttpRuntime
from orders.domain.hashing import request_hash
from orders.domain.idempotency import RecordStatus, key_claim, record_id
from orders.domain.messages import parse_order
from orders.entrypoints.http_api import create_app
from orders.exceptions import PublishError, TransientPublishError
from orders.service.consumer import OrderConsumer


def fake_store(api: Api) -> FakeIdempotencyStore:
    return cast(FakeIdempotencyStore, api.store)


# --- first request, replay, mismatch ---------------------------------------------------------


async def test_first_request_publishes_once_and_answers_202_with_a_link(api: Api) -> None:
    order_id = new_order_id()

    response = await api.post(order_payload(order_id), key="k-first")

    assert response.status_code == 202
    location = f"/api/orders/{order_id}"
    assert response.json() == {"orderId": order_id, "status": "accepted", "location": location}
    assert response.headers["location"] == location
    assert "idempotent-replayed" not in response.headers
    assert [order.order_id for order in api.publisher.published] == [order_id]
    record = fake_store(api).record(record_id("app:tests", "k-first"))
    assert record is not None and record.status is RecordStatus.COMPLETED
    assert record.expires_after_seconds == TTL_SECONDS
    assert isinstance(record.result, dict) and record.result["body"] == response.json()


async def test_retry_with_the_same_body_replays_without_publishing(api: Api) -> None:
    order_id = new_order_id()
    first = await api.post(order_payload(order_id))
    # Same order, spelled differently: key order, whitespace and 3 vs 3.0 do not matter.
    respelled = (
        '{"lines":[{"unitPrice":1.250,"quantity":2,"sku":"sku-apple"},'
        '{"sku":"sku-pear","quantity":1,"unitPrice":3.0}],'
        f'"currency":"EUR","customerId":"customer-1","orderId":"{order_id}"}}'
    ).encode()

    replay = await api.post(respelled)

    assert replay.status_code == first.status_code == 202
    assert replay.json() == first.json()
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.headers["location"] == first.headers["location"]
    assert len(api.publisher.published) == 1


async def test_a_key_recorded_before_the_core_dependency_still_replays(api: Api) -> None:
    """The stored shapes did not change: a completed record as the intake wrote it before the
    API stood behind the core's dependency (a literal document) replays as it did."""
    order_id = new_order_id()
    payload = order_payload(order_id)
    order = parse_order(json.dumps(payload).encode())
    identifier = record_id("app:tests", "k-recorded")
    location = f"/api/orders/{order_id}"
    fake_store(api).documents[identifier] = {
        "id": identifier,
        "type": "idempotencyRecord",
        "scope": "app:tests",
        "key": "k-recorded",
        "orderId": order_id,
        "requestHash": request_hash(order.canonical_payload()),
        "status": "completed",
        "owner": "http-0123456789ab",
        "leaseSeconds": 30.0,
        "attempts": 1,
        "response": {
            "statusCode": 202,
            "body": {"orderId": order_id, "status": "accepted", "location": location},
            "headers": {"Location": location},
        },
        "ttl": TTL_SECONDS,
        "_etag": '"recorded"',
        "_ts": int(api.clock.now) - 60,
    }

    replay = await api.post(payload, key="k-recorded")

    assert (replay.status_code, replay.headers["idempotent-replayed"]) == (202, "true")
    assert replay.json() == {"orderId": order_id, "status": "accepted", "location": location}
    assert replay.headers["location"] == location
    assert api.publisher.published == []


async def test_same_key_with_a_different_body_is_422(api: Api) -> None:
    order_id = new_order_id()
    await api.post(order_payload(order_id))

    response = await api.post(order_payload(order_id, currency="USD"))

    assert_problem(response, 422, "idempotency-key-reused")
    assert len(api.publisher.published) == 1


async def test_in_progress_claim_answers_409_with_retry_after_then_replays(api: Api) -> None:
    order_id = new_order_id()
    api.publisher.hold()
    first = asyncio.create_task(api.post(order_payload(order_id)))
    await api.publisher.started.wait()

    concurrent = await api.post(order_payload(order_id))

    assert_problem(concurrent, 409, "request-in-progress")
    assert concurrent.headers["retry-after"] == "1"
    api.publisher.release()
    assert (await first).status_code == 202
    retried = await api.post(order_payload(order_id))
    assert retried.status_code == 202 and retried.headers["idempotent-replayed"] == "true"
    assert len(api.publisher.published) == 1


async def test_a_different_body_is_422_even_while_the_first_is_in_progress(api: Api) -> None:
    api.publisher.hold()
    first = asyncio.create_task(api.post(order_payload(new_order_id())))
    await api.publisher.started.wait()

    response = await api.post(order_payload(new_order_id()))

    assert_problem(response, 422, "idempotency-key-reused")
    api.publisher.release()
    assert (await first).status_code == 202


# --- keys and scopes -------------------------------------------------------------------------


async def test_missing_key_is_400_before_the_body_is_looked_at(api: Api) -> None:
    response = await api.post(b"not json", key=None)

    assert_problem(response, 400, "missing-idempotency-key")
    assert api.publisher.published == []


@pytest.mark.parametrize(
    "key",
    ["x" * 256, "tab\there", "del\x7f", "caf\u00e9"],
    ids=["256-chars", "tab", "del", "non-ascii"],
)
async def test_malformed_key_is_400(api: Api, key: str) -> None:
    headers = [(b"Idempotency-Key", key.encode("utf-8"))]

    response = await api.client.post(
        "/api/orders", json=order_payload(new_order_id()), headers=headers
    )

    assert_problem(response, 400, "invalid-idempotency-key")
    assert api.publisher.published == []


@pytest.mark.parametrize("key", ["x" * 255, "a key with spaces and ~!@#$%^&*()/\\?"])
async def test_any_printable_ascii_key_up_to_255_is_accepted(api: Api, key: str) -> None:
    response = await api.post(order_payload(new_order_id()), key=key)

    assert response.status_code == 202


async def test_a_principal_header_the_platform_did_not_set_is_ignored() -> None:
    """Without App Service authentication the header is caller-typed: it must not pick a
    scope, so the same key from "alice" and "bob" is one key (the second is a replay)."""
    store = FakeIdempotencyStore()
    runtime = runtime_over(
        store, RecordingPublisher(), FakeOrderReader(FakeOrderStore()), FakeClock()
    )
    runtime.trust_principal_header = False

    async def factory() -> HttpRuntime:
        return runtime

    transport = httpx.ASGITransport(app=create_app(factory))
    async with httpx.AsyncClient(transport=transport, base_url="http://orders.test") as client:
        payload = order_payload(new_order_id())
        alice = await client.post(
            "/api/orders",
            json=payload,
            headers={"Idempotency-Key": "k", "X-MS-CLIENT-PRINCIPAL-ID": "alice"},
        )
        bob = await client.post(
            "/api/orders",
            json=payload,
            headers={"Idempotency-Key": "k", "X-MS-CLIENT-PRINCIPAL-ID": "bob"},
        )

    assert alice.status_code == bob.status_code == 202
    assert bob.headers["idempotent-replayed"] == "true"
    assert {record["scope"] for record in store.documents.values() if "scope" in record} == {
        "app:tests"
    }


async def test_keys_are_scoped_by_the_caller_principal(api: Api) -> None:
    order_id = new_order_id()
    alice = await api.post(order_payload(order_id), **{"X-MS-CLIENT-PRINCIPAL-ID": "alice"})
    # The default scope's name, sent as a principal, must not reach the default scope's keys.
    spoof = await api.post(order_payload(order_id), **{"X-MS-CLIENT-PRINCIPAL-ID": "tests"})
    anonymous = await api.post(order_payload(order_id))

    # Each scope has its own key-1; the same order under each is the same order, accepted.
    for response in (alice, spoof, anonymous):
        assert response.status_code == 202
        assert "idempotent-replayed" not in response.headers
    assert len(api.publisher.published) == 3


async def test_a_different_payload_for_a_taken_order_id_is_refused_before_publishing(
    api: Api,
) -> None:
    order_id = new_order_id()
    first = await api.post(order_payload(order_id), key="k1")
    same_order_new_key = await api.post(order_payload(order_id), key="k2")
    other_key = await api.post(order_payload(order_id, currency="USD"), key="k3")
    other_caller = await api.post(
        order_payload(order_id, currency="USD"), key="k1", **{"X-MS-CLIENT-PRINCIPAL-ID": "bob"}
    )

    assert first.status_code == same_order_new_key.status_code == 202
    assert_problem(other_key, 409, "order-id-conflict")
    body = assert_problem(other_caller, 409, "order-id-conflict")
    assert "retry-after" not in other_caller.headers
    assert order_id in body["detail"]
    assert [order.currency for order in api.publisher.published] == ["EUR", "EUR"]
    # The refused key is free again: its retry gets the same answer at once, not "in progress".
    assert_problem(await api.post(order_payload(order_id, currency="USD"), key="k3"), 409,
                   "order-id-conflict")  # fmt: skip


# --- bodies ----------------------------------------------------------------------------------


async def test_body_that_is_not_json_is_400(api: Api) -> None:
    assert_problem(await api.post(b"{oops"), 400, "invalid-json")


async def test_schema_violation_is_400_with_field_messages(api: Api) -> None:
    payload = order_payload(new_order_id(), currency="EURO", extra="field")
    payload["lines"][0]["quantity"] = 0

    body = assert_problem(await api.post(payload), 400, "invalid-order")

    locations = {error["location"] for error in body["errors"]}
    assert {"currency", "extra", "lines.0.quantity"} <= locations
    assert all(error["message"] for error in body["errors"])
    assert api.publisher.published == []


async def test_too_many_lines_is_413(api: Api) -> None:
    lines = [{"sku": f"s{n}", "quantity": 1, "unitPrice": 1} for n in range(100)]

    assert_problem(
        await api.post(order_payload(new_order_id(), lines=lines)), 413, "order-too-large"
    )


async def test_body_over_256_kb_is_413(api: Api) -> None:
    # The core's body limit (its problem, under this API's prefix); too many lines is the
    # order's own limit (`order-too-large`, above).
    assert_problem(await api.post(b"{" + b" " * 300_000 + b"}"), 413, "body-too-large")


async def test_a_content_length_over_the_limit_is_413_before_a_byte_is_read(api: Api) -> None:
    read = 0

    async def announced() -> AsyncIterator[bytes]:
        nonlocal read
        for _ in range(5):
            read += 1
            yield b" " * 65536

    response = await api.client.post(
        "/api/orders",
        content=announced(),
        headers={"Idempotency-Key": "k", "Content-Length": str(5 * 65536)},
    )

    assert_problem(response, 413, "body-too-large")
    assert read == 0
    assert api.publisher.published == []


async def test_an_endless_body_is_413_without_being_read_to_its_end(api: Api) -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b"{"
        while sent < 1000:  # 64 MB if it were all read
            sent += 1
            yield b" " * 65536

    response = await api.client.post(
        "/api/orders", content=endless(), headers={"Idempotency-Key": "k"}
    )

    assert_problem(response, 413, "body-too-large")
    assert sent < 10


# --- crash safety ----------------------------------------------------------------------------


def crashed_claim(api: Api, order_id: str, key: str) -> Record:
    """The record a claimant leaves behind when it dies before publishing."""
    from orders.domain.hashing import request_hash
    from orders.domain.messages import parse_order

    order = parse_order(httpx.Request("POST", "/", json=order_payload(order_id)).content)
    return key_claim(
        "app:tests",
        key,
        order_id,
        request_hash(order.canonical_payload()),
        owner="http-crashed",
        lease_seconds=LEASE_SECONDS,
        ttl_seconds=TTL_SECONDS,
    )


async def test_a_crashed_claim_blocks_until_its_lease_ends_then_is_taken_over(api: Api) -> None:
    order_id = new_order_id()
    abandoned = await api.store.claim(crashed_claim(api, order_id, "k-crash"))

    blocked = await api.post(order_payload(order_id), key="k-crash")
    # The database stamps whole seconds (`_ts`): the lease counts from the end of that second.
    api.clock.advance(LEASE_SECONDS + 1)
    taken_over = await api.post(order_payload(order_id), key="k-crash")

    assert_problem(blocked, 409, "request-in-progress")
    assert taken_over.status_code == 202 and "idempotent-replayed" not in taken_over.headers
    assert [order.order_id for order in api.publisher.published] == [order_id]
    record = fake_store(api).record(abandoned.key)
    assert record is not None and record.status is RecordStatus.COMPLETED
    assert record.stamp != abandoned.stamp
    assert fake_store(api).calls.count("take_over") == 1


async def test_a_stale_claimant_cannot_overwrite_the_new_owner(api: Api) -> None:
    # Given a claimant whose send outlives its lease, and a retry that takes over meanwhile
    order_id = new_order_id()
    api.publisher.hold()
    stale = asyncio.create_task(api.post(order_payload(order_id), key="k-slow"))
    await api.publisher.started.wait()
    api.clock.advance(LEASE_SECONDS + 1)
    takeover = asyncio.create_task(api.post(order_payload(order_id), key="k-slow"))
    await api.publisher.wait_for_calls(2)  # the takeover reached its own send
    store = fake_store(api)
    owner_etag_before = store.documents[record_id("app:tests", "k-slow")]["_etag"]

    # When both sends finish
    api.publisher.release()
    stale_response, takeover_response = await asyncio.gather(stale, takeover)

    # Then both answer the same 202, and the record is the new owner's completion
    assert stale_response.status_code == takeover_response.status_code == 202
    assert stale_response.json() == takeover_response.json()
    assert [order.order_id for order in api.publisher.published] == [order_id, order_id]
    assert store.calls.count("complete") == 2  # one succeeded, the stale one was fenced off
    document = store.documents[record_id("app:tests", "k-slow")]
    assert document["status"] == "completed" and document["_etag"] != owner_etag_before


async def test_losing_the_race_for_an_expired_claim_is_409(api: Api) -> None:
    # Another retry replaces the expired record between our read and our If-Match replace.
    order_id = new_order_id()
    expired = await api.store.claim(crashed_claim(api, order_id, "k-race"))
    api.clock.advance(LEASE_SECONDS + 1)

    async def another_retry_takes_it_over() -> None:
        await fake_store(api).take_over(expired, "http-other", LEASE_SECONDS)

    fake_store(api).before_next("take_over", another_retry_takes_it_over)

    response = await api.post(order_payload(order_id), key="k-race")

    assert_problem(response, 409, "request-in-progress")
    assert api.publisher.published == []


# --- failures of the dependencies ------------------------------------------------------------


async def test_transient_publish_failure_is_503_and_frees_the_key(api: Api) -> None:
    order_id = new_order_id()
    api.publisher.fail_next(TransientPublishError("server busy"))

    failed = await api.post(order_payload(order_id))
    retried = await api.post(order_payload(order_id))

    assert_problem(failed, 503, "service-unavailable")
    assert failed.headers["retry-after"] == "5"
    assert retried.status_code == 202 and "idempotent-replayed" not in retried.headers
    assert [order.order_id for order in api.publisher.published] == [order_id]
    assert fake_store(api).calls.count("release") == 1


async def test_permanent_publish_failure_is_500_problem_and_frees_the_key(api: Api) -> None:
    api.publisher.fail_next(PublishError("entity disabled"))

    assert_problem(await api.post(order_payload(new_order_id())), 500, "internal-error")
    # The key is freed; the orderId stays claimed for this payload (the send may have landed).
    assert [d["type"] for d in fake_store(api).documents.values()] == ["orderIdClaim"]


async def test_a_failed_release_leaves_the_claim_to_its_lease(api: Api) -> None:
    order_id = new_order_id()
    api.publisher.fail_next(TransientPublishError("timeout"))
    fake_store(api).fail_next("release", TransientStoreError("503"))

    assert (await api.post(order_payload(order_id))).status_code == 503
    assert (await api.post(order_payload(order_id))).status_code == 409
    api.clock.advance(LEASE_SECONDS + 1)
    assert (await api.post(order_payload(order_id))).status_code == 202


@pytest.mark.parametrize(
    ("error", "status", "slug"),
    [
        (TransientStoreError("429"), 503, "service-unavailable"),
        (StoreError("403 forbidden"), 500, "internal-error"),
    ],
)
async def test_store_failures_are_problems_not_crashes(
    api: Api, error: Exception, status: int, slug: str
) -> None:
    fake_store(api).fail_next("claim", error)

    assert_problem(await api.post(order_payload(new_order_id())), status, slug)
    assert api.publisher.published == []


async def test_a_completion_failure_after_publish_is_retried_in_place(api: Api) -> None:
    order_id = new_order_id()
    fake_store(api).fail_next("complete", TransientStoreError("timeout"))

    answered = await api.post(order_payload(order_id))
    retried = await api.post(order_payload(order_id))

    assert answered.status_code == 202 and "idempotent-replayed" not in answered.headers
    assert retried.headers["idempotent-replayed"] == "true"
    assert [order.order_id for order in api.publisher.published] == [order_id]
    assert fake_store(api).calls.count("complete") == 2


async def test_a_runtime_that_cannot_be_built_is_503_problem_and_retried(api: Api) -> None:
    from orders.entrypoints.http_api import create_app

    attempts = 0

    async def broken_factory() -> Any:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("COSMOS_ENDPOINT unreachable")

    transport = httpx.ASGITransport(app=create_app(broken_factory))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        first = await client.post(
            "/api/orders", json=order_payload("o-1"), headers={"Idempotency-Key": "k"}
        )
        second = await client.get("/api/orders/o-1")

    assert_problem(first, 503, "service-unavailable")
    assert_problem(second, 503, "service-unavailable")
    assert first.headers["retry-after"] == "5"
    assert attempts == 2


# --- GET -------------------------------------------------------------------------------------


async def consume_published(api: Api) -> None:
    consumer = OrderConsumer(api.order_store, LAYOUT)
    for order in api.publisher.published:
        await consumer.handle(api.publisher.as_received(order))


async def test_get_follows_an_order_from_accepted_to_stored(api: Api) -> None:
    order_id = new_order_id()
    placed = await api.post(order_payload(order_id))

    queued = await api.client.get(placed.headers["location"])
    await consume_published(api)
    stored = await api.client.get(placed.headers["location"])

    assert queued.status_code == 202
    assert queued.headers["retry-after"] == "1"
    assert queued.json()["status"] == "accepted"
    assert stored.status_code == 200
    body = stored.json()
    assert body["orderId"] == order_id and body["status"] == "placed"
    assert body["totalAmount"] == "5.5" and body["totalQuantity"] == 3
    assert [(line["lineNumber"], line["sku"], line["lineTotal"]) for line in body["lines"]] == [
        (1, "sku-apple", "2.5"),
        (2, "sku-pear", "3"),
    ]


async def test_get_of_an_unknown_order_is_404(api: Api) -> None:
    assert_problem(await api.client.get("/api/orders/nope"), 404, "order-not-found")


async def test_get_of_an_id_outside_the_id_rule_is_400_naming_it(api: Api) -> None:
    assert_problem(await api.client.get("/api/orders/has%23hash"), 400, "invalid-id")
    assert_problem(await api.client.get("/api/orders/" + "x" * 65), 400, "invalid-id")


async def test_a_queued_order_is_visible_only_to_the_caller_that_placed_it(api: Api) -> None:
    order_id = new_order_id()
    await api.post(order_payload(order_id), **{"X-MS-CLIENT-PRINCIPAL-ID": "alice"})

    as_alice = await api.client.get(
        f"/api/orders/{order_id}", headers={"X-MS-CLIENT-PRINCIPAL-ID": "alice"}
    )
    as_bob = await api.client.get(
        f"/api/orders/{order_id}", headers={"X-MS-CLIENT-PRINCIPAL-ID": "bob"}
    )

    assert as_alice.status_code == 202
    assert_problem(as_bob, 404, "order-not-found")


async def test_get_store_failure_is_503(api: Api) -> None:
    fake_store(api).fail_next("find_order", TransientStoreError("throttled"))

    assert_problem(await api.client.get("/api/orders/o-1"), 503, "service-unavailable")


# --- FastAPI's own errors --------------------------------------------------------------------


async def test_unknown_path_and_wrong_method_are_problems(api: Api) -> None:
    assert_problem(await api.client.get("/api/nothing-here"), 404, "not-found")
    wrong_method = await api.client.delete("/api/orders")
    assert_problem(wrong_method, 405, "method-not-allowed")
    assert "POST" in wrong_method.headers["allow"]


async def test_runtime_is_built_once_and_only_when_needed(api: Api) -> None:
    assert api.builds == []
    await asyncio.gather(*(api.post(order_payload(new_order_id()), key=f"k{n}") for n in range(5)))
    assert len(api.builds) == 1


async def test_openapi_document_describes_the_key_header_and_the_body(api: Api) -> None:
    document = (await api.client.get("/api/openapi.json")).json()

    post = document["paths"]["/api/orders"]["post"]
    [key] = [p for p in post["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["required"] is True and key["schema"]["maxLength"] == 255
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/OrderPlaced"
    )
    assert {"OrderPlaced", "OrderLine", "Problem"} <= set(document["components"]["schemas"])
    assert {"202", "400", "409", "413", "422", "503"} <= set(post["responses"])


# --- hosted by the Functions worker ----------------------------------------------------------


async def test_functions_host_hands_the_full_api_path_to_the_same_routes(api: Api) -> None:
    # The host's routePrefix is `api` and AsgiMiddleware passes the whole URL path through.
    import json

    import azure.functions as func

    from orders.entrypoints.http_api import create_app

    async def factory() -> HttpRuntime:
        return runtime_over(api.store, api.publisher, FakeOrderReader(api.order_store), api.clock)

    host = func.AsgiFunctionApp(app=create_app(factory), http_auth_level=func.AuthLevel.FUNCTION)
    [function] = [f for f in host.get_functions() if f.get_function_name() == "http_app_func"]
    handler = function.get_user_function()
    order_id = new_order_id()
    request = func.HttpRequest(
        method="POST",
        url="https://orders.azurewebsites.net/api/orders?code=function-key",
        headers={"Idempotency-Key": "hosted", "Content-Type": "application/json"},
        body=json.dumps(order_payload(order_id)).encode(),
    )

    try:
        first = await handler(request, None)
        replay = await handler(request, None)
    finally:
        # Shut the ASGI app down here, in this loop: left to the garbage collector, the host's
        # __del__ calls asyncio.run() inside whichever test's loop is running then, and its
        # coroutine is never awaited (the warning used to surface in tests/http/test_cancel.py).
        await host.middleware.notify_shutdown()  # type: ignore[no-untyped-call]  # untyped SDK
        host.startup_task_done = False

    assert first.status_code == 202
    assert json.loads(first.get_body())["location"] == f"/api/orders/{order_id}"
    assert replay.status_code == 202 and replay.headers["Idempotent-Replayed"] == "true"
    assert [order.order_id for order in api.publisher.published] == [order_id]
