"""The records 0.1 stored keep replaying: documents written by exactly-once 0.1 (frozen as JSON
in `records_0_1/`, written by `records_0_1/write.py` at 0.1) are loaded into our Cosmos
emulator, and this version's mechanisms treat each as 0.1 did: a duplicate of a completed
effect completes as a duplicate and writes nothing, another payload under its key is refused,
a refusal recorded stays refused, an in-progress claim whose owner died is taken over and
called again with the same downstream key."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos.aio import ContainerProxy
from records_0_1.write import take

from exactly_once import (
    CosmosStore,
    Effects,
    Outcome,
    PayloadMismatchError,
    PreviouslyFailedError,
    Refused,
    idempotent,
)
from exactly_once._records import RecordStatus, body_fingerprint
from exactly_once.store import JsonObject

FIXTURES = Path(__file__).parent / "records_0_1"
OTHER_BODY = b'{"order": "o-1", "amount": 6}'


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


async def load(container: ContainerProxy, name: str) -> dict[str, Any]:
    """The scenario's documents written into `container` as 0.1 left them."""
    written = fixture(name)
    for document in written["documents"]:
        await container.create_item(body=document)
    return written


async def stored(container: ContainerProxy) -> list[dict[str, Any]]:
    """Every document of the container, without what Cosmos DB stamps on a write."""
    found = [item async for item in container.query_items("SELECT * FROM c")]
    kept = [{k: v for k, v in item.items() if not k.startswith("_")} for item in found]
    return sorted(kept, key=lambda document: (str(document["pk"]), str(document["id"])))


def effects(
    store: CosmosStore, written: Mapping[str, Any], *, body: bytes | None = None, wait: float = 0.0
) -> Effects:
    """This version's mechanisms for the scenario's message, redelivered (another owner)."""
    return Effects(
        consumer=written["consumer"],
        message_id=written["message_id"],
        request_hash=body_fingerprint(body or written["body"].encode()),
        records=store,
        documents=store,
        owner="worker-0.2",
        max_wait_seconds=wait,
    )


def test_every_scenario_has_documents() -> None:
    names = sorted(path.stem for path in FIXTURES.glob("*.json"))
    assert len(names) == 12
    assert all(fixture(name)["documents"] for name in names)


@pytest.mark.parametrize(
    ("name", "partition", "documents"),
    [
        ("inbox-in-key-home", None, [{"id": "receipt-1", "amount": 5}]),
        ("inbox-elsewhere", "orders-1", [{"id": "receipt-2", "amount": 5}]),
    ],
)
async def test_an_inbox_record_of_0_1_makes_a_duplicate_and_refuses_another_payload(
    store: CosmosStore,
    container: ContainerProxy,
    name: str,
    partition: str | None,
    documents: Sequence[JsonObject],
) -> None:
    written = await load(container, name)
    again = effects(store, written)

    outcome = await again.inbox(partition or again.key_partition, documents)

    assert outcome is Outcome.DUPLICATE
    assert await stored(container) == written["documents"]
    other = effects(store, written, body=OTHER_BODY)
    with pytest.raises(PayloadMismatchError):
        await other.inbox(partition or other.key_partition, documents)


@pytest.mark.parametrize(
    ("name", "partition", "entity"),
    [
        ("entity-in-key-home", None, {"id": "order-1", "amount": 5}),
        ("entity-elsewhere", "orders-2", {"id": "order-2", "amount": 5}),
    ],
)
async def test_an_entity_of_0_1_makes_a_duplicate_and_refuses_another_payload(
    store: CosmosStore,
    container: ContainerProxy,
    name: str,
    partition: str | None,
    entity: JsonObject,
) -> None:
    written = await load(container, name)
    again = effects(store, written)

    outcome = await again.create_entity(partition or again.key_partition, entity)

    assert outcome is Outcome.DUPLICATE
    assert await stored(container) == written["documents"]
    other = effects(store, written, body=OTHER_BODY)
    with pytest.raises(PayloadMismatchError):
        await other.create_entity(partition or other.key_partition, entity)


class Downstream:
    def __init__(self) -> None:
        self.keys: list[str] = []

    async def __call__(self, key: str) -> JsonObject:
        self.keys.append(key)
        return {"charge": f"ch-{key}"}


async def test_a_completed_two_phase_record_of_0_1_replays_its_answer(
    store: CosmosStore, container: ContainerProxy
) -> None:
    written = await load(container, "two-phase-completed")
    downstream = Downstream()

    result = await effects(store, written).two_phase(downstream)

    assert (result.outcome, result.result) == (
        Outcome.DUPLICATE,
        {"charge": "ch-stock:m-completed"},
    )
    assert downstream.keys == []
    with pytest.raises(PayloadMismatchError):
        await effects(store, written, body=OTHER_BODY).two_phase(downstream)


async def test_a_failed_two_phase_record_of_0_1_stays_refused(
    store: CosmosStore, container: ContainerProxy
) -> None:
    written = await load(container, "two-phase-failed")
    downstream = Downstream()

    with pytest.raises(PreviouslyFailedError) as failed:
        await effects(store, written).two_phase(downstream)

    assert failed.value.existing.result == {"reason": "declined", "description": "card declined"}
    assert downstream.keys == []


@pytest.mark.parametrize("name", ["two-phase-lease-ended", "two-phase-crashed-mid-call"])
async def test_an_in_progress_claim_of_0_1_is_taken_over_with_its_downstream_key(
    store: CosmosStore, container: ContainerProxy, name: str
) -> None:
    written = await load(container, name)
    (claim,) = written["documents"]
    downstream = Downstream()

    # The crashed owner's lease (1 s from the load's write) is waited out, by the database's clock.
    result = await effects(store, written, wait=10.0).two_phase(downstream)

    assert result.outcome is Outcome.PROCESSED
    assert downstream.keys == [claim["downstreamKey"]]
    found = await store.read(claim["id"], claim["pk"])
    assert found.record is not None
    assert (found.record.status, found.record.attempts) == (RecordStatus.COMPLETED, 2)


@pytest.mark.parametrize(
    ("name", "partition"), [("adjust-in-key-home", None), ("adjust-elsewhere", "warehouse-eu")]
)
async def test_an_adjustment_of_0_1_is_a_duplicate_and_changes_nothing_again(
    store: CosmosStore, container: ContainerProxy, name: str, partition: str | None
) -> None:
    written = await load(container, name)
    again = effects(store, written)

    outcome = await again.adjust(
        partition or again.key_partition, ["sku-1", "sku-2"], take(2), step="reserve"
    )

    assert outcome is Outcome.DUPLICATE
    assert await stored(container) == written["documents"]


async def test_a_refused_adjustment_of_0_1_is_refused_again(
    store: CosmosStore, container: ContainerProxy
) -> None:
    written = await load(container, "adjust-refused")

    with pytest.raises(Refused) as refused:
        await effects(store, written).adjust(
            "warehouse-eu", ["sku-1", "sku-2"], take(1), step="reserve"
        )

    assert (refused.value.reason, refused.value.description) == ("out-of-stock", "sku-2 has 3")
    assert await stored(container) == written["documents"]


async def test_an_idempotent_call_recorded_by_0_1_replays_its_value(
    store: CosmosStore, container: ContainerProxy
) -> None:
    await load(container, "idempotent-completed")
    runs: list[int] = []

    @idempotent(store=store, scope="credits", key=lambda account, amount: account)
    async def credit(account: str, amount: int) -> dict[str, int]:
        runs.append(amount)
        return {"balance": 0}

    assert await credit("acct-1", 5) == {"balance": 105}
    assert runs == []
    with pytest.raises(PayloadMismatchError):
        await credit("acct-1", 6)
