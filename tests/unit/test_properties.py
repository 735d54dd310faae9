"""Property-based tests: the request hash ignores spelling; deliveries converge on one order."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from enum import StrEnum
from typing import Any

import pytest
from fakes import LAYOUT, FakeOrderStore
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly_once.decisions import Outcome
from orders.domain.hashing import request_hash
from orders.domain.ids import is_entity_id
from orders.domain.messages import parse_order
from orders.domain.received import ReceivedOrderMessage
from orders.service.consumer import OrderConsumer

ids = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/\\?#", min_codepoint=0x20),
    min_size=1,
    max_size=20,
).filter(is_entity_id)
prices = st.decimals(min_value=0, max_value=Decimal("99999999.9999"), places=4)
lines = st.fixed_dictionaries(
    {"sku": ids, "quantity": st.integers(min_value=1, max_value=10_000), "unitPrice": prices}
)
orders = st.fixed_dictionaries(
    {
        "orderId": ids,
        "customerId": ids,
        "currency": st.sampled_from(["EUR", "USD", "JPY", "GBP", "CHF"]),
        "lines": st.lists(lines, min_size=1, max_size=5),
    }
)


def spell_number(value: int | Decimal, style: int) -> str:
    """The same number written several valid JSON ways (an integer field only as an integer)."""
    if isinstance(value, int):
        return str(value)
    text = format(value, "f")
    exponent_form = f"{value.scaleb(2):f}e-2"
    return [text, text + "0" if "." in text else text + ".0", exponent_form][style % 3]


def render(value: Any, draw_order: st.DataObject, style: int) -> str:
    """Hand-written JSON with shuffled keys, varying whitespace and number spelling."""
    if isinstance(value, dict):
        keys = draw_order.draw(st.permutations(list(value)))
        space = " " * (style % 3)
        items = [f"{json.dumps(k)}:{space}{render(value[k], draw_order, style + 1)}" for k in keys]
        return "{" + f",{space}".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(render(item, draw_order, style + 1) for item in value) + "]"
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        return spell_number(value, style)
    return json.dumps(value)


@pytest.mark.slow
@given(order=orders, data=st.data(), style_a=st.integers(0, 11), style_b=st.integers(0, 11))
@settings(max_examples=150, deadline=None)
def test_hash_ignores_key_order_whitespace_and_number_spelling(
    order: dict[str, Any], data: st.DataObject, style_a: int, style_b: int
) -> None:
    first = parse_order(render(order, data, style_a).encode())
    second = parse_order(render(order, data, style_b).encode())

    assert request_hash(first.canonical_payload()) == request_hash(second.canonical_payload())


@pytest.mark.slow
@given(order=orders, other_price=prices, data=st.data())
@settings(max_examples=100, deadline=None)
def test_hash_changes_exactly_when_a_price_changes(
    order: dict[str, Any], other_price: Decimal, data: st.DataObject
) -> None:
    changed = {
        **order,
        "lines": [{**order["lines"][0], "unitPrice": other_price}, *order["lines"][1:]],
    }

    original = parse_order(render(order, data, 0).encode())
    modified = parse_order(render(changed, data, 1).encode())

    same = request_hash(original.canonical_payload()) == request_hash(modified.canonical_payload())
    assert same == (order["lines"][0]["unitPrice"] == other_price)


@given(copies=st.integers(min_value=2, max_value=12), data=st.data())
@settings(max_examples=60, deadline=None)
def test_any_interleaving_of_deliveries_yields_exactly_one_order(
    copies: int, data: st.DataObject
) -> None:
    store = FakeOrderStore()
    consumer = OrderConsumer(store, LAYOUT)
    body = json.dumps(
        {
            "orderId": "order-1",
            "customerId": "c-1",
            "currency": "EUR",
            "lines": [{"sku": "a", "quantity": 1, "unitPrice": 2}],
        }
    ).encode()
    # Each delivery yields to the loop a random number of times first, so hypothesis explores
    # how the concurrent deliveries interleave around the atomic create.
    delays = data.draw(st.lists(st.integers(0, 5), min_size=copies, max_size=copies))

    async def deliver(delay: int) -> StrEnum:
        for _ in range(delay):
            await asyncio.sleep(0)
        message = ReceivedOrderMessage(body=body, message_id="order-1")
        return (await consumer.handle(message)).outcome

    async def run() -> list[StrEnum]:
        return list(await asyncio.gather(*(deliver(d) for d in delays)))

    outcomes = asyncio.run(run())

    assert outcomes.count(Outcome.PROCESSED) == 1
    assert outcomes.count(Outcome.DUPLICATE) == copies - 1
    assert store.order_ids() == ["order-1"]
    assert len(store.documents("order-1")) == 3  # order, outbox event, line
