"""Write the records and markers exactly-once 0.1 stores, one JSON file per scenario, beside
this file: `python tests/core/records_0_1/write.py` (run once, by the 0.1 code, at commit
"records written by 0.1"; `test_records_0_1.py` loads them and checks that 0.2 replays them).

Each scenario runs the 0.1 mechanism against our Cosmos emulator through the real SDK and
saves every document the container then holds, without the properties a write stamps (`_etag`,
`_ts`, `_rid`, `_self`, `_attachments`, our emulator's `_lsn`), which a load writes anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient

from cosmos_emulator import start_in_background
from exactly_once import CosmosStore, Effects, Refused, idempotent
from exactly_once._records import body_fingerprint
from exactly_once.store import JsonObject

HERE = Path(__file__).parent
CONSUMER = "stock"
# The commit whose code wrote the files (main before 0.2).
COMMIT = "9681360"
STAMPED = ("_etag", "_ts", "_rid", "_self", "_attachments", "_lsn")
# The body of every scenario's message: its fingerprint is the records' request hash.
BODY = b'{"order": "o-1", "amount": 5}'

Scenario = Callable[[Effects], Awaitable[object]]


def effects(store: CosmosStore, message_id: str, lease_seconds: float = 30.0) -> Effects:
    return Effects(
        consumer=CONSUMER,
        message_id=message_id,
        request_hash=body_fingerprint(BODY),
        records=store,
        documents=store,
        owner="worker-0.1",
        lease_seconds=lease_seconds,
        max_wait_seconds=0.0,
    )


async def documents_of(container: ContainerProxy) -> list[dict[str, Any]]:
    found = [item async for item in container.query_items("SELECT * FROM c")]
    kept = [{k: v for k, v in item.items() if k not in STAMPED} for item in found]
    return sorted(kept, key=lambda document: (str(document["pk"]), str(document["id"])))


def take(count: int) -> Callable[[Mapping[str, JsonObject]], Sequence[JsonObject]]:
    """An adjustment's rule: `count` taken from each stock level, refused below zero."""

    def rule(levels: Mapping[str, JsonObject]) -> Sequence[JsonObject]:
        changed = []
        for level in levels.values():
            left = int(str(level["available"])) - count
            if left < 0:
                raise Refused(f"{level['id']} has {level['available']}", reason="out-of-stock")
            changed.append({**level, "available": left})
        return changed

    return rule


async def two_phase_refused(run: Effects) -> None:
    async def refuse(key: str) -> str:
        raise Refused("card declined", reason="declined")

    try:
        await run.two_phase(refuse)
    except Refused:
        return


async def crashed_mid_call(store: CosmosStore, container: ContainerProxy) -> list[dict[str, Any]]:
    """A two-phase claim whose owner died during the call: the record as it stood then."""
    called = asyncio.Event()

    async def hang(key: str) -> str:
        called.set()
        await asyncio.Event().wait()
        return "never"

    task = asyncio.create_task(effects(store, "m-crashed", lease_seconds=1.0).two_phase(hang))
    await called.wait()
    written = await documents_of(container)
    task.cancel()
    return written


async def lease_ended(run: Effects) -> None:
    async def timeout(key: str) -> str:
        raise TimeoutError("no answer")

    try:
        await run.two_phase(timeout, keep_claim_on_error=True)
    except TimeoutError:
        return


async def levels(store: CosmosStore, partition: str) -> None:
    await store.create_all(
        partition,
        [
            {"id": "sku-1", "type": "stockLevel", "available": 10},
            {"id": "sku-2", "type": "stockLevel", "available": 3},
        ],
    )


SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "inbox-in-key-home": (
        "m-inbox-home",
        lambda run: run.inbox(run.key_partition, [{"id": "receipt-1", "amount": 5}]),
    ),
    "inbox-elsewhere": (
        "m-inbox-elsewhere",
        lambda run: run.inbox("orders-1", [{"id": "receipt-2", "amount": 5}]),
    ),
    "entity-in-key-home": (
        "m-entity-home",
        lambda run: run.create_entity(run.key_partition, {"id": "order-1", "amount": 5}),
    ),
    "entity-elsewhere": (
        "m-entity-elsewhere",
        lambda run: run.create_entity("orders-2", {"id": "order-2", "amount": 5}),
    ),
    "two-phase-completed": (
        "m-completed",
        lambda run: run.two_phase(_answer, data={"amount": 5, "currency": "EUR"}),
    ),
    "two-phase-failed": ("m-failed", two_phase_refused),
    "two-phase-lease-ended": ("m-lease-ended", lease_ended),
}


async def _answer(key: str) -> JsonObject:
    return {"charge": f"ch-{key}"}


async def main() -> None:
    emulator = start_in_background(host="127.0.0.1", port=0)
    try:
        async with CosmosClient(emulator.url, credential=emulator.key) as client:
            database = await client.create_database_if_not_exists("records-0-1")

            async def fresh() -> tuple[ContainerProxy, CosmosStore]:
                container = await database.create_container(
                    id=f"c-{uuid.uuid4().hex[:8]}",
                    partition_key=PartitionKey(path="/pk"),
                    default_ttl=-1,
                )
                return container, CosmosStore(container)

            written: dict[str, list[dict[str, Any]]] = {}
            message_ids: dict[str, str] = {}
            for name, (message_id, scenario) in SCENARIOS.items():
                container, store = await fresh()
                await scenario(effects(store, message_id))
                written[name], message_ids[name] = await documents_of(container), message_id

            container, store = await fresh()
            written["two-phase-crashed-mid-call"] = await crashed_mid_call(store, container)
            message_ids["two-phase-crashed-mid-call"] = "m-crashed"

            for name, message_id, count in (
                ("adjust-in-key-home", "m-adjust-home", 2),
                ("adjust-elsewhere", "m-adjust-elsewhere", 2),
                ("adjust-refused", "m-adjust-refused", 7),
            ):
                container, store = await fresh()
                run = effects(store, message_id)
                partition = run.key_partition if name == "adjust-in-key-home" else "warehouse-eu"
                await levels(store, partition)
                with contextlib.suppress(Refused):
                    await run.adjust(partition, ["sku-1", "sku-2"], take(count), step="reserve")
                written[name], message_ids[name] = await documents_of(container), message_id

            container, store = await fresh()

            @idempotent(store=store, scope="credits", key=lambda account, amount: account)
            async def credit(account: str, amount: int) -> dict[str, int]:
                return {"balance": 100 + amount}

            await credit("acct-1", 5)
            written["idempotent-completed"] = await documents_of(container)
            message_ids["idempotent-completed"] = "acct-1"
    finally:
        emulator.stop()

    for name, documents in written.items():
        fixture = {
            "written_by": f"exactly-once-azure 0.1.0 at {COMMIT}",
            "consumer": CONSUMER,
            "message_id": message_ids[name],
            "body": BODY.decode(),
            "documents": documents,
        }
        path = HERE / f"{name}.json"
        path.write_text(json.dumps(fixture, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(Path.cwd())}: {len(documents)} documents", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
