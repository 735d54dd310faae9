"""Fuzzing the parser of untrusted order bodies: it is total (an order or a `MessageRejected`,
never another exception).

Three generators: arbitrary JSON values, valid orders with one field swapped for an arbitrary
value or a hostile number, and raw byte mutations of a valid body. That it is bounded is the
size, element-count and digit bounds checked before decoding (tests/unit/test_consumer.py,
the poison corpus); what a rejection costs is printed by scripts/bench_poison.py, never timed
here (a per-example deadline failed on a loaded 2-core machine).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poison_corpus import order

from orders.adapters.cosmos_layout import order_write
from orders.domain.hashing import request_hash
from orders.domain.ids import is_entity_id
from orders.domain.messages import MAX_DESCRIPTION_CHARS, MessageRejected, parse_order
from orders.domain.model import OrderPlaced

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same examples on every run: a CI failure is reproducible
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=80)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
# Number spellings that are cheap to write and were once expensive to read.
hostile_numbers = st.sampled_from(
    [
        "1E+999999999999",
        "-1E+999999999999",
        "1E-999999999999",
        "1E+10000000",
        "9" * 4301,
        "9" * 41,
        "-0",
        "-0.0",
        "0E-400",
        "1." + "0" * 5000,
        "NaN",
        "Infinity",
        "2.0",
        "true",
        '"2"',
    ]
)


def check(body: bytes) -> None:
    try:
        parsed = parse_order(body)
    except MessageRejected as rejection:
        assert rejection.description and len(rejection.description) <= MAX_DESCRIPTION_CHARS
        return
    # What passes must be storable: valid ids, a hash, documents with bounded amount texts.
    assert isinstance(parsed, OrderPlaced)
    assert all(is_entity_id(v) for v in (parsed.order_id, parsed.customer_id))
    write = order_write(
        parsed,
        request_hash=request_hash(parsed.canonical_payload()),
        message_id=parsed.order_id,
        processed_at=datetime(2026, 1, 1, tzinfo=UTC),
        owner_scope=None,
    )
    assert all(len(json.dumps(d)) < 4096 for d in write)


@FUZZ
@given(value=json_values)
def test_any_json_value_is_an_order_or_a_rejection(value: Any) -> None:
    check(json.dumps(value).encode())


@FUZZ
@given(
    field=st.sampled_from(
        ["orderId", "customerId", "currency", "lines", "sku", "quantity", "unitPrice"]
    ),
    replacement=json_values,
)
def test_an_order_with_one_field_replaced_is_an_order_or_a_rejection(
    field: str, replacement: Any
) -> None:
    document = order("o-1")
    if field in document:
        document[field] = replacement
    else:
        document["lines"][0][field] = replacement
    check(json.dumps(document).encode())


@FUZZ
@given(
    field=st.sampled_from(["quantity", "unitPrice", "orderId", "extra"]), literal=hostile_numbers
)
def test_hostile_number_spellings_are_rejected_or_parsed_quickly(field: str, literal: str) -> None:
    body = json.dumps(order("o-1")).replace('"sku-1"', '"sku-1", "extra": 0')
    written = {
        "quantity": '"quantity": 2',
        "unitPrice": '"unitPrice": 1.25',
        "orderId": '"orderId": "o-1"',
        "extra": '"extra": 0',
    }[field]
    assert written in body
    check(body.replace(written, f'"{field}": {literal}').encode())


@FUZZ
@given(data=st.data())
def test_byte_mutations_of_a_valid_body_are_an_order_or_a_rejection(data: st.DataObject) -> None:
    body = bytearray(json.dumps(order("o-1")).encode())
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(body)))
        action = data.draw(st.sampled_from(["flip", "insert", "delete", "repeat"]))
        if action == "flip" and position < len(body):
            body[position] = data.draw(st.integers(0, 255))
        elif action == "insert":
            body[position:position] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del body[position : position + data.draw(st.integers(1, 8))]
        else:
            chunk = bytes(body[position : position + data.draw(st.integers(1, 8))])
            body[position:position] = chunk * data.draw(st.integers(1, 2000))
    check(bytes(body))
