"""The five failures of @vercel/cosmosdb-server that motivated this emulator (issue 5, "Why").

Each one passes against our emulator. Against the third-party server they are strict xfails,
so this file also notices the day that server is fixed (or our knowledge of it goes stale).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey, exceptions
from cosmos_rest import values

from cosmos_emulator import WELL_KNOWN_KEY, RunningCosmosEmulator

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

VERCEL_FAILS = pytest.mark.xfail(strict=True, reason="known @vercel/cosmosdb-server gap")


@pytest.fixture(
    params=["ours", pytest.param("vercel", marks=[VERCEL_FAILS, pytest.mark.crosscheck])]
)
def gap_container(request: pytest.FixtureRequest) -> Iterator[ContainerProxy]:
    if request.param == "ours":
        emu: RunningCosmosEmulator = request.getfixturevalue("cosmos_emulator")
        url, key = emu.url, emu.key
    else:
        url, key = request.getfixturevalue("vercel_url"), WELL_KNOWN_KEY
    client = CosmosClient(url, key)
    db = client.create_database(f"gap-{uuid.uuid4().hex[:8]}")
    try:
        yield db.create_container("c", PartitionKey("/pk"), default_ttl=-1)
    finally:
        client.delete_database(db)


def test_gap1_batch_is_atomic(gap_container: ContainerProxy) -> None:
    gap_container.create_item({"id": "taken", "pk": "a"})
    with pytest.raises(exceptions.CosmosBatchOperationError) as err:
        gap_container.execute_item_batch(
            [
                ("create", ({"id": "first", "pk": "a"},)),
                ("create", ({"id": "taken", "pk": "a"},)),
            ],
            partition_key="a",
        )
    assert err.value.error_index == 1
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        gap_container.read_item("first", "a")


def test_gap2_upsert_replace_read_delete_inside_a_batch(gap_container: ContainerProxy) -> None:
    gap_container.create_item({"id": "x", "pk": "a", "v": 1})
    results = gap_container.execute_item_batch(
        [
            ("upsert", ({"id": "u", "pk": "a"},)),
            ("replace", ("x", {"id": "x", "pk": "a", "v": 2})),
            ("read", ("x",)),
            ("delete", ("u",)),
        ],
        partition_key="a",
    )
    assert [r["statusCode"] for r in results] == [201, 200, 200, 204]


def test_gap3_point_read_of_a_missing_item_is_404(gap_container: ContainerProxy) -> None:
    with pytest.raises(exceptions.CosmosResourceNotFoundError):
        gap_container.read_item("missing", "a")


def test_gap4_query_on_an_empty_partition(gap_container: ContainerProxy) -> None:
    # Checked here: the third-party server answers "missing partition keys" to any
    # partition-scoped query whose WHERE does not itself filter on the partition key.
    assert list(gap_container.query_items("SELECT * FROM c", partition_key="empty")) == []
    assert values(
        gap_container.query_items("SELECT VALUE COUNT(1) FROM c", partition_key="empty")
    ) == [0]


def test_gap5_item_ttl(gap_container: ContainerProxy) -> None:
    gap_container.create_item({"id": "t", "pk": "a", "ttl": 1})
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            gap_container.read_item("t", "a")
        except exceptions.CosmosResourceNotFoundError:
            return
        time.sleep(0.05)
    pytest.fail("an item with ttl=1 was still readable after 3 s")
