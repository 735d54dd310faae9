"""The change feed's LSN indexes answer exactly what a scan of the container would.

`LsnIndex` against a plain dict model (hypothesis: random adds, stale and real removals,
reads from any LSN), then the SDK's change feed, page by page, by partition key, by
hierarchical prefix and by a feed range narrower than the container, against a model of
the writes. Its cost is shown by `scripts/bench_cosmos_emulator.py`, not asserted here.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

from azure.cosmos import ContainerProxy, DatabaseProxy, PartitionKey
from azure.cosmos.exceptions import CosmosResourceNotFoundError
from cosmos_rest import unique
from hypothesis import given, settings
from hypothesis import strategies as st

from cosmos_emulator.epk import effective_partition_key, in_range
from cosmos_emulator.lsn_index import BUCKET_SPAN, LsnIndex

operations = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "remove", "stale", "read"]),
        st.integers(0, 6 * BUCKET_SPAN),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(operations)
def test_the_index_lists_what_a_sorted_model_lists(steps: list[tuple[str, int]]) -> None:
    index: LsnIndex[object] = LsnIndex()
    model: dict[int, object] = {}
    for kind, lsn in steps:
        if kind == "add":
            value = object()
            index.add(lsn, value)
            model[lsn] = value
        elif kind == "remove" and lsn in model:
            index.discard(lsn, model.pop(lsn))
        elif kind == "stale":
            index.discard(lsn, object())  # not the value stored there: nothing happens
        expected = sorted((k, v) for k, v in model.items() if k > lsn)
        assert list(index.after(lsn)) == expected
        assert len(index) == len(model)
    assert list(index.after(-1)) == sorted(model.items(), key=lambda kv: kv[0])


def _drain(container: ContainerProxy, **scope: Any) -> list[str]:
    """Every id the change feed lists from the beginning, 3 a page, continuing page by page."""
    ids: list[str] = []
    token: str | None = None
    while True:
        if token is None:
            pages = container.query_items_change_feed(
                start_time="Beginning", max_item_count=3, **scope
            )
        else:
            pages = container.query_items_change_feed(continuation=token, max_item_count=3)
        page = list(next(pages.by_page(), []))
        token = str(container.client_connection.last_response_headers["etag"])
        if not page:
            return ids
        assert len(page) <= 3
        ids += [d["id"] for d in page]


def _random_writes(container: ContainerProxy, keys: list[dict[str, Any]], seed: int) -> None:
    rng = random.Random(seed)
    for step in range(120):
        key = rng.choice(keys)
        item_id = f"i{rng.randrange(15)}"
        if rng.random() < 0.2:
            with contextlib.suppress(CosmosResourceNotFoundError):
                container.delete_item(item_id, list(key.values()))
        else:
            container.upsert_item({"id": item_id, **key, "step": step})


def _model(container: ContainerProxy) -> list[dict[str, Any]]:
    docs = container.query_items("SELECT * FROM c", enable_cross_partition_query=True)
    return sorted(docs, key=lambda d: d["_lsn"])


def test_feeds_by_partition_key_and_range_match_the_items(database: DatabaseProxy) -> None:
    container = database.create_container(unique("idx"), PartitionKey("/pk"))
    keys = [{"pk": f"k{n}"} for n in range(6)]
    _random_writes(container, keys, seed=7)
    everything = _model(container)
    assert _drain(container) == [d["id"] for d in everything]
    for key in keys:
        expected = [d["id"] for d in everything if d["pk"] == key["pk"]]
        assert _drain(container, partition_key=key["pk"]) == expected
    # A feed range wider than one key but narrower than the container: the filtered path.
    low, high = "", "2"
    feed_range = {
        "Range": {"min": low, "max": high, "isMinInclusive": True, "isMaxInclusive": False}
    }
    expected = [
        d["id"]
        for d in everything
        if in_range(effective_partition_key([d["pk"]], "Hash"), low, high)
    ]
    assert 0 < len(expected) < len(everything)  # the range splits these keys
    assert _drain(container, feed_range=feed_range) == expected


def test_hierarchical_prefixes_and_whole_keys_match_the_items(database: DatabaseProxy) -> None:
    container = database.create_container(
        unique("idxh"), PartitionKey(["/t", "/u"], kind="MultiHash")
    )
    keys = [{"t": t, "u": u} for t in ("a", "b") for u in ("x", "y", "z")]
    _random_writes(container, keys, seed=11)
    everything = _model(container)
    for tenant in ("a", "b"):
        expected = [d["id"] for d in everything if d["t"] == tenant]
        assert _drain(container, partition_key=[tenant]) == expected
    for key in keys:
        expected = [d["id"] for d in everything if (d["t"], d["u"]) == (key["t"], key["u"])]
        assert _drain(container, partition_key=[key["t"], key["u"]]) == expected
