"""A hostile caller's ids: the API refuses every id outside the one id grammar at intake, with a
problem+json 400 that names the rule, and publishes nothing.

The hole this closes: the API took an orderId with a leading space, a no-break space or a
zero-width space; the payment provider refused to charge it, billing dead-lettered the event
with `PaymentRefused`, and shipping shipped the order anyway.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fakes import order_payload
from http_support import Api, assert_problem, new_order_id

from orders.domain.ids import ID_PATTERN, ID_RULE, MAX_ID_LENGTH

HOSTILE_IDS = [" abc", "a\u00a0b", "a\u200bb", "abc ", "caf\u00e9", "-abc", "a%2Fb"]


def assert_names_the_rule(body: dict[str, object]) -> None:
    assert ID_RULE in str(body["detail"])


@pytest.mark.parametrize("order_id", HOSTILE_IDS)
async def test_post_of_a_hostile_order_id_is_400_naming_the_rule_and_publishes_nothing(
    api: Api, order_id: str
) -> None:
    response = await api.post(order_payload(order_id), key=f"k-{new_order_id()}")

    body = assert_problem(response, 400, "invalid-id")
    assert_names_the_rule(body)
    assert body["errors"][0]["location"] == "orderId"
    assert ID_RULE in body["errors"][0]["message"]
    assert api.publisher.published == []


async def test_post_of_a_dot_segment_order_id_is_400(api: Api) -> None:
    # `..` in a path is resolved away by every URL client: it could never be GET again.
    response = await api.post(order_payload(".."), key=f"k-{new_order_id()}")

    assert_names_the_rule(assert_problem(response, 400, "invalid-id"))


@pytest.mark.parametrize(
    "changes",
    [{"customerId": " c-1"}, {"lines": [{"sku": "s\u200b1", "quantity": 1, "unitPrice": 1}]}],
)
async def test_the_other_ids_of_an_order_follow_the_same_rule(
    api: Api, changes: dict[str, object]
) -> None:
    payload = order_payload(new_order_id()) | changes

    body = assert_problem(await api.post(payload, key=f"k-{new_order_id()}"), 400, "invalid-id")

    assert_names_the_rule(body)
    assert api.publisher.published == []


@pytest.mark.parametrize("order_id", HOSTILE_IDS)
async def test_get_and_cancel_of_a_hostile_order_id_are_400_naming_the_rule(
    api: Api, order_id: str
) -> None:
    path = f"/api/orders/{quote(order_id, safe='')}"

    got = assert_problem(await api.client.get(path), 400, "invalid-id")
    cancelled = assert_problem(
        await api.client.post(f"{path}/cancel", headers={"Idempotency-Key": "c-1"}),
        400,
        "invalid-id",
    )

    assert_names_the_rule(got)
    assert_names_the_rule(cancelled)
    assert api.publisher.published == []


async def test_an_id_is_never_trimmed_into_another_order(api: Api) -> None:
    """The neighbour of a hostile id is a real order: the hostile one must not reach it."""
    order_id = new_order_id()
    assert (await api.post(order_payload(order_id), key=f"k-{order_id}")).status_code == 202

    response = await api.post(order_payload(f" {order_id}"), key=f"k2-{order_id}")

    assert_problem(response, 400, "invalid-id")
    assert len(api.publisher.published) == 1


async def test_the_openapi_document_states_the_grammar_wherever_an_order_id_goes(api: Api) -> None:
    document = (await api.client.get("/api/openapi.json")).json()
    order = document["components"]["schemas"]["OrderPlaced"]["properties"]["orderId"]
    path_ids = [
        parameter["schema"]
        for path, operations in document["paths"].items()
        if "{orderId}" in path
        for operation in operations.values()
        for parameter in operation["parameters"]
        if parameter["in"] == "path"
    ]

    assert order["pattern"] == ID_PATTERN and order["maxLength"] == MAX_ID_LENGTH
    assert len(path_ids) == 2  # GET and cancel
    assert all(schema["pattern"] == ID_PATTERN for schema in path_ids)
    assert "400" in document["paths"]["/api/orders/{orderId}"]["get"]["responses"]
