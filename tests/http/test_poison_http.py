"""Hostile requests: the poison corpus's bodies through POST, ambiguous headers, and what GET
tells a caller whose order the consumer refused."""

from __future__ import annotations

import asyncio
import json
import uuid

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
from fastapi import FastAPI
from http_support import Api, FakeClock, assert_problem, new_order_id, runtime_over
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poison_corpus import PoisonCase, http_problem, poison_cases

from exactly_once.exceptions import TransientStoreError
from orders.bootstrap import HttpRuntime
from orders.domain.messages import MAX_REPORTED_ERRORS
from orders.domain.received import ReceivedOrderMessage
from orders.entrypoints.http_api import create_app
from orders.service.consumer import OrderConsumer


async def fake_runtime() -> HttpRuntime:
    return runtime_over(
        FakeIdempotencyStore(), RecordingPublisher(), FakeOrderReader(FakeOrderStore()), FakeClock()
    )


BODY_CASES = [case for case in poison_cases(f"http{uuid.uuid4().hex[:6]}") if case.body_only]


@pytest.mark.parametrize("case", BODY_CASES, ids=[case.name for case in BODY_CASES])
async def test_every_poison_body_is_a_problem_and_nothing_is_claimed_or_sent(
    api: Api, case: PoisonCase
) -> None:
    status, slug = http_problem(case)

    body = assert_problem(await api.post(case.body, key=f"k-{case.name}"), status, slug)

    assert len(body["detail"]) <= 1024
    assert len(body.get("errors", [])) <= MAX_REPORTED_ERRORS
    assert api.publisher.calls == 0
    assert api.store.documents == {}  # type: ignore[attr-defined]
    # The API stays up and serves the next request.
    assert (await api.post(order_payload(new_order_id()), key="next")).status_code == 202


async def test_a_body_with_many_errors_lists_the_first_ones_and_counts_all(api: Api) -> None:
    payload = order_payload(new_order_id())
    payload["lines"] = [{"sku": 1, "quantity": "x", "unitPrice": "y"}] * 50

    body = assert_problem(await api.post(payload), 400, "invalid-order")

    assert len(body["errors"]) == MAX_REPORTED_ERRORS
    assert body["errorCount"] == 150


async def test_two_idempotency_key_headers_are_refused_not_guessed(api: Api) -> None:
    response = await api.client.post(
        "/api/orders",
        content=json.dumps(order_payload(new_order_id())),
        headers=[("Idempotency-Key", "first"), ("Idempotency-Key", "second")],
    )

    body = assert_problem(response, 400, "invalid-idempotency-key")
    assert "2 times" in body["detail"]
    assert api.publisher.calls == 0


async def test_get_during_an_outage_does_not_speak_of_idempotency_keys(api: Api) -> None:
    api.store.fail_next("find_order", TransientStoreError("503"))  # type: ignore[attr-defined]

    response = await api.client.get(f"/api/orders/{new_order_id()}")

    body = assert_problem(response, 503, "service-unavailable")
    assert "Idempotency-Key" not in body["detail"]
    assert response.headers["retry-after"]


async def test_a_caller_whose_payload_lost_the_order_id_learns_nothing_of_the_order(
    api: Api,
) -> None:
    """A direct producer stored the orderId first, for alice, with another payload; the API's
    order is then a mismatch. Its sender is told 404 by GET and by cancel, before and after the
    consumer decides, as for an order that does not exist; alice sees and cancels her order."""
    order_id = new_order_id()
    consumer = OrderConsumer(api.order_store, LAYOUT)
    other = order_payload(order_id, currency="USD")
    await consumer.handle(
        ReceivedOrderMessage(json.dumps(other).encode(), order_id, owner_property="principal:alice")
    )
    assert (await api.post(order_payload(order_id))).status_code == 202

    queued = await api.client.get(f"/api/orders/{order_id}")
    [published] = api.publisher.published
    await consumer.handle(api.publisher.as_received(published))
    decided = await api.client.get(f"/api/orders/{order_id}")
    cancel = await api.client.post(
        f"/api/orders/{order_id}/cancel", headers={"Idempotency-Key": "c"}
    )
    alice = {"X-MS-CLIENT-PRINCIPAL-ID": "alice"}
    as_alice = await api.client.get(f"/api/orders/{order_id}", headers=alice)

    for answer in (queued, decided, cancel):
        assert_problem(answer, 404, "order-not-found")
    assert "USD" not in decided.text + cancel.text
    assert as_alice.json()["status"] == "placed" and as_alice.json()["currency"] == "USD"
    assert "fulfilment" not in api.order_store.partitions[order_id][order_id]


async def test_a_rejected_direct_send_is_visible_to_get(api: Api) -> None:
    order_id = new_order_id()
    payload = order_payload(order_id)
    payload["lines"][0]["quantity"] = 0
    consumer = OrderConsumer(api.order_store, LAYOUT)
    await consumer.handle(ReceivedOrderMessage(json.dumps(payload).encode(), order_id))

    response = await api.client.get(f"/api/orders/{order_id}")

    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    assert response.json()["reason"] == "SchemaViolation"
    assert "quantity" in response.json()["description"]


# --- fuzzing the body path --------------------------------------------------------------------

FUZZ_APP = create_app(fake_runtime)


async def post_to(app: FastAPI, body: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://orders.test") as client:
        return await client.post("/api/orders", content=body, headers={"Idempotency-Key": "f"})


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_fuzzed_bodies_get_an_answer_never_a_5xx(data: st.DataObject) -> None:
    body = bytearray(json.dumps(order_payload("o-fuzz")).encode())
    for _ in range(data.draw(st.integers(1, 6))):
        position = data.draw(st.integers(0, len(body)))
        if data.draw(st.booleans()):
            body[position:position] = data.draw(st.binary(min_size=1, max_size=12))
        else:
            chunk = bytes(body[position : position + data.draw(st.integers(1, 6))])
            body[position:position] = chunk * data.draw(st.integers(1, 5000))
    response = asyncio.run(post_to(FUZZ_APP, bytes(body)))

    assert response.status_code in (202, 400, 409, 413, 422), response.text
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json"
        assert len(response.json().get("errors", [])) <= MAX_REPORTED_ERRORS
