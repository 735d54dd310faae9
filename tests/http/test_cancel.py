"""POST /api/orders/{orderId}/cancel: decided at once on the order document (cancelled, or
409 when the shipment was reserved first), only by the caller that placed the order, and
idempotent exactly as placing is (replay, 409 while in progress, 422 on reuse), over fakes of
the ports; and GET shows status, version and history."""

from __future__ import annotations

import asyncio

import httpx
from fakes import new_write, order_payload
from http_support import DEFAULT_SCOPE, Api, assert_problem, new_order_id

from orders.domain.ownership import app_scope
from orders.domain.status import OrderStatus

PRINCIPAL = "X-MS-CLIENT-PRINCIPAL-ID"


async def placed(api: Api, *, stored: bool = True, principal: str | None = None) -> str:
    """An order placed through the API and (unless `stored` is False) stored by its consumer."""
    order_id = new_order_id()
    headers = {PRINCIPAL: principal} if principal else {}
    response = await api.post(order_payload(order_id), key=f"place-{order_id}", **headers)
    assert response.status_code == 202
    if stored:
        owner = api.publisher.owners[order_id]  # as the API published it
        await api.order_store.create_all(order_id, new_write(order_id, owner_scope=owner))
    return order_id


async def cancel(
    api: Api,
    order_id: str,
    key: str | None = "cancel-1",
    body: bytes = b"",
    principal: str | None = None,
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    if principal:
        headers[PRINCIPAL] = principal
    return await api.client.post(f"/api/orders/{order_id}/cancel", content=body, headers=headers)


def reserve_shipment(api: Api, order_id: str) -> None:
    """What shipping writes on the order document when it reserves the shipment."""
    document = api.order_store.partitions[order_id][order_id]
    document["fulfilment"] = {"state": "shipping", "eventId": f"{order_id}:outbox:OrderAccepted"}
    document.pop("_etag", None)


async def test_a_cancel_takes_effect_at_once_and_its_retry_is_replayed(api: Api) -> None:
    order_id = await placed(api)

    first = await cancel(api, order_id, body=b'{"reason": "changed my mind"}')
    retry = await cancel(api, order_id, body=b'{"reason": "changed my mind"}')

    assert first.status_code == retry.status_code == 200
    assert (
        first.json()
        == retry.json()
        == {"orderId": order_id, "status": "cancelled", "location": f"/api/orders/{order_id}"}
    )
    partition = api.order_store.partitions[order_id]
    assert partition[order_id]["fulfilment"]["state"] == "cancelled"
    assert partition[order_id]["fulfilment"]["reason"] == "changed my mind"
    assert f"{order_id}:outbox:OrderCancelled" in partition  # the event billing refunds from
    shown = (await api.client.get(f"/api/orders/{order_id}")).json()
    assert (shown["status"], shown["statusVersion"]) == ("cancelled", 5)
    assert "idempotent-replayed" not in first.headers
    assert retry.headers["idempotent-replayed"] == "true"
    [change] = api.publisher.statuses
    assert (change.order_id, change.status, change.version) == (
        order_id,
        OrderStatus.CANCELLED,
        5,
    )
    assert change.reason == "changed my mind" and change.message_id == f"{order_id}:status:5"


async def test_the_same_key_with_another_reason_or_for_an_order_is_422(api: Api) -> None:
    order_id = await placed(api)
    await cancel(api, order_id, key="k", body=b'{"reason": "a"}')

    other_reason = await cancel(api, order_id, key="k", body=b'{"reason": "b"}')
    as_an_order = await api.post(order_payload(new_order_id()), key="k")

    assert_problem(other_reason, 422, "idempotency-key-reused")
    assert_problem(as_an_order, 422, "idempotency-key-reused")
    assert len(api.publisher.statuses) == 1


async def test_while_the_first_cancel_is_in_flight_a_retry_gets_409(api: Api) -> None:
    order_id = await placed(api)
    api.publisher.hold()
    first = asyncio.create_task(cancel(api, order_id))
    await api.publisher.wait_for_calls(2)  # the order's publish, then this cancel's

    retry = await cancel(api, order_id)
    api.publisher.release()

    assert_problem(retry, 409, "request-in-progress")
    assert (await first).status_code == 200


async def test_fifty_concurrent_cancels_with_one_key_publish_once(api: Api) -> None:
    order_id = await placed(api)
    start = asyncio.Event()

    async def one() -> httpx.Response:
        await start.wait()
        return await cancel(api, order_id, key="same")

    tasks = [asyncio.create_task(one()) for _ in range(50)]
    start.set()
    responses = await asyncio.gather(*tasks)

    assert {r.status_code for r in responses} <= {200, 409}
    assert (
        sum(r.status_code == 200 and "idempotent-replayed" not in r.headers for r in responses) == 1
    )
    assert len(api.publisher.statuses) == 1


async def test_a_cancel_after_the_shipment_is_reserved_is_409_and_changes_nothing(
    api: Api,
) -> None:
    order_id = await placed(api)
    reserve_shipment(api, order_id)

    refused = await cancel(api, order_id)
    again = await cancel(api, order_id)  # the key was freed: the same answer, decided again

    assert_problem(refused, 409, "order-already-shipped")
    assert_problem(again, 409, "order-already-shipped")
    partition = api.order_store.partitions[order_id]
    assert partition[order_id]["fulfilment"]["state"] == "shipping"
    assert f"{order_id}:outbox:OrderCancelled" not in partition
    assert api.publisher.statuses == []


async def test_a_second_cancel_under_another_key_answers_cancelled_and_writes_nothing(
    api: Api,
) -> None:
    order_id = await placed(api)
    first = await cancel(api, order_id, key="a")
    before = dict(api.order_store.partitions[order_id][order_id])

    second = await cancel(api, order_id, key="b")

    assert first.status_code == second.status_code == 200
    assert second.json()["status"] == "cancelled"
    assert api.order_store.partitions[order_id][order_id] == before


async def test_a_cancel_of_an_order_not_stored_yet_is_409_with_retry_after(api: Api) -> None:
    order_id = await placed(api, stored=False)

    response = await cancel(api, order_id)

    assert_problem(response, 409, "order-not-stored-yet")
    assert response.headers["retry-after"] == "1"
    owner = api.publisher.owners[order_id]
    await api.order_store.create_all(order_id, new_write(order_id, owner_scope=owner))
    assert (await cancel(api, order_id)).status_code == 200  # the same key, once it is stored


async def test_only_the_principal_that_placed_the_order_may_cancel_it(api: Api) -> None:
    order_id = await placed(api, principal="alice")

    by_bob = await cancel(api, order_id, key="k", principal="bob")
    anonymous = await cancel(api, order_id, key="k")  # the shared scope is not the owner either

    assert_problem(by_bob, 404, "order-not-found")
    assert_problem(anonymous, 404, "order-not-found")
    assert "fulfilment" not in api.order_store.partitions[order_id][order_id]
    assert api.publisher.statuses == []
    assert (await cancel(api, order_id, key="k", principal="alice")).status_code == 200


async def test_refusals(api: Api) -> None:
    order_id = await placed(api)
    assert_problem(await cancel(api, order_id, key=None), 400, "missing-idempotency-key")
    assert_problem(await cancel(api, new_order_id()), 404, "order-not-found")
    assert_problem(await cancel(api, "a%20"), 400, "invalid-id")  # outside the id rule
    for body in (
        b"[",
        b'{"reason": 1}',
        b'{"extra": true}',
        b'{"reason": "' + b"r" * 300 + b'"}',
    ):
        assert_problem(await cancel(api, order_id, body=body), 400, "invalid-cancel-request")
    # Over the cancel's limit: the core's 413, judged before the body is parsed.
    oversized = await cancel(api, order_id, body=b" " + b"x" * 2000)
    assert_problem(oversized, 413, "body-too-large")
    assert api.publisher.statuses == []


async def test_get_shows_status_version_and_history(api: Api) -> None:
    order_id = await placed(api)  # and stored by the consumer
    as_placed = (await api.client.get(f"/api/orders/{order_id}")).json()
    api.order_store.partitions[order_id][f"{order_id}:status"] = {
        "id": f"{order_id}:status",
        "orderId": order_id,
        "type": "orderStatus",
        "status": "paid",
        "version": 2,
        "history": [{"status": "paid", "version": 2, "at": "2026-11-30T00:00:00+00:00"}],
        "_etag": '"1"',
    }

    paid = (await api.client.get(f"/api/orders/{order_id}")).json()

    placed_change = {"status": "placed", "version": 1, "at": as_placed["processedAt"]}
    assert (as_placed["status"], as_placed["statusVersion"], as_placed["statusHistory"]) == (
        "placed",
        1,
        [placed_change],
    )
    assert (paid["status"], paid["statusVersion"]) == ("paid", 2)
    assert paid["statusHistory"] == [
        placed_change,
        {"status": "paid", "version": 2, "at": "2026-11-30T00:00:00+00:00"},
    ]


async def test_get_of_an_order_cancelled_through_the_api_shows_the_stored_order(api: Api) -> None:
    """The cancel's key record names the order too: it is not a submission of the order, so
    GET must not answer 202 "accepted" for an order that is stored and cancelled."""
    order_id = new_order_id()
    # Sent straight to the queue, naming the app's scope as its owner (the API's callers here).
    owner = app_scope(DEFAULT_SCOPE)
    await api.order_store.create_all(order_id, new_write(order_id, owner_scope=owner))

    cancelled = await cancel(api, order_id)
    shown = await api.client.get(f"/api/orders/{order_id}")

    assert cancelled.status_code == 200, cancelled.text
    assert shown.status_code == 200, shown.text
    assert (shown.json()["status"], shown.json()["statusVersion"]) == ("cancelled", 5)
