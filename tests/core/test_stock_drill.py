"""The stock drill (issue 45, "Done when"): the guide's `adjust` consumer, which reserves
several items of one warehouse partition, under competing worker processes, copies of every
message decided beside each other, and SIGKILLs.

3 worker processes (stock_drill_worker.py: the guide's `reserve_stock` under `run_worker`)
share one queue with a 5 s lock. The load: 80 reservations of 1 to 3 items of one warehouse,
each sent twice under two MessageIds (the same CloudEvent: one key), asking more than the
warehouse holds, so that some are refused. During it, 3 SIGKILLs of random workers (each
restarted at once: the messages they held come back when their locks lapse).

Then: no item's level is below zero, and each item's level is its first level less the
quantities of exactly the reservations whose marker says they were applied (a reservation
applied twice, or applied and refused, would not add up); every reservation has one marker;
no key was decided `processed` twice; the refused reservations (and only they) are
dead-lettered `OutOfStock`, both copies.

What it catches (tried by breaking the core on purpose): a batch that does not fence the items
by their ETags (items written unconditionally: two racing reservations both take the last
units, and the levels no longer add up: 20 - 23). About 15 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import CosmosClient, PartitionKey
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from core_support import queue_config
from servers import CosmosServer, wait_for_output
from stock_drill_worker import QUEUE_NAME, READY_LINE

from servicebus_emulator import RunningEmulator, start_in_background

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RESERVATIONS, WORKERS, ITEMS = 80, 3, ("i0", "i1", "i2", "i3", "i4")
FIRST_LEVEL = 20  # 100 units in all; the load asks for about 320
KILLS_WHEN_DECIDED = (30, 70, 110)  # of 160 messages
WORKER = Path(__file__).with_name("stock_drill_worker.py")
WAREHOUSE = "eu-west"
SOURCE = f"/warehouse/{WAREHOUSE}"


@pytest.fixture
def stock_queue() -> Iterator[RunningEmulator]:
    running = start_in_background(config=queue_config(QUEUE_NAME, lock_duration="PT5S"))
    yield running
    running.stop()


class Workers:
    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env, self.folder = env, folder
        self.running: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}
        self.started = 0

    def start(self) -> None:
        self.started += 1
        log = self.folder / f"worker-{self.started}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, str(WORKER),
                 "--decisions", str(self.folder / f"worker-{self.started}.decisions.jsonl")],
                stdout=sink, stderr=subprocess.STDOUT, env=self.env,
            )  # fmt: skip
        self.logs[process.pid] = log
        self.running.append(process)

    def kill_one(self, rng: random.Random) -> None:
        victim = self.running.pop(rng.randrange(len(self.running)))
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        self.start()

    def decisions(self) -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for path in self.folder.glob("*.decisions.jsonl")
            for line in path.read_text().splitlines()
        ]

    def check_alive(self) -> None:
        for process in self.running:
            assert process.poll() is None, f"a worker exited by itself: {self.logs[process.pid]}"

    def stop_all(self) -> None:
        for process in self.running:
            wait_for_output(self.logs[process.pid], re.compile(re.escape(READY_LINE)), process)
        for process in self.running:
            process.send_signal(signal.SIGTERM)
        codes = [process.wait(timeout=60) for process in self.running]
        assert codes == [0] * len(self.running), codes


def poll_until(check: Callable[[], bool], *, within: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + within
    while not check():
        workers.check_alive()
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.05)  # a poll of files and the store, bounded by the deadline


def reservation_message(event_id: str, lines: dict[str, int], message_id: str) -> ServiceBusMessage:
    """The guide's `binary_event` of a `Reservation`, built without the guide's module."""
    return ServiceBusMessage(
        json.dumps({"warehouse": WAREHOUSE, "lines": lines}),
        message_id=message_id,
        content_type="application/json",
        application_properties={
            "cloudEvents:specversion": "1.0",
            "cloudEvents:type": "com.example.reservation",
            "cloudEvents:source": SOURCE,
            "cloudEvents:id": event_id,
        },
    )


def test_the_stock_drill_never_oversells_and_applies_each_reservation_once(
    python_cosmos: CosmosServer,
    stock_queue: RunningEmulator,
    reaped_env: dict[str, str],
    tmp_path: Path,
) -> None:
    rng = random.Random(45)
    reservations = {
        f"r-{number:03d}": {
            item: rng.randint(1, 3) for item in rng.sample(ITEMS, rng.randint(1, 3))
        }
        for number in range(RESERVATIONS)
    }
    with CosmosClient(python_cosmos.endpoint, credential=python_cosmos.key) as client:
        database = client.create_database_if_not_exists("greetings")
        stock = database.create_container_if_not_exists(
            id="stock", partition_key=PartitionKey(path="/warehouse"), default_ttl=-1
        )
        for item in ITEMS:
            stock.create_item({"id": item, "warehouse": WAREHOUSE, "available": FIRST_LEVEL})

        workers = Workers(
            {
                **reaped_env,
                "ServiceBusConnection": stock_queue.connection_string,
                "COSMOS_ENDPOINT": python_cosmos.endpoint,
                "COSMOS_KEY": python_cosmos.key,
                "PYTHONUNBUFFERED": "1",
            },
            tmp_path,
        )
        for _ in range(WORKERS):
            workers.start()
        with ServiceBusClient.from_connection_string(stock_queue.connection_string) as servicebus:
            with servicebus.get_queue_sender(QUEUE_NAME) as sender:
                # Each reservation's two copies side by side: two workers decide them at once.
                messages = [
                    reservation_message(event_id, lines, f"{event_id}-copy-{copy}")
                    for event_id, lines in reservations.items()
                    for copy in (1, 2)
                ]
                for start in range(0, len(messages), 40):
                    sender.send_messages(messages[start : start + 40])

            for count in KILLS_WHEN_DECIDED:
                poll_until(
                    lambda: len(workers.decisions()) >= count,  # noqa: B023 (read at once)
                    within=90,
                    what=f"{count} decisions",
                    workers=workers,
                )
                workers.kill_one(rng)

            def markers() -> list[dict[str, Any]]:
                query = "SELECT * FROM c WHERE c.type = 'exactlyOnceAdjustment'"
                return list(stock.query_items(query, partition_key=WAREHOUSE))

            def settled() -> bool:
                with servicebus.get_queue_receiver(QUEUE_NAME) as active:
                    busy = active.peek_messages(max_message_count=1, sequence_number=1)
                return len(markers()) == RESERVATIONS and not busy

            poll_until(settled, within=120, what="every reservation decided", workers=workers)
            workers.stop_all()
            with servicebus.get_queue_receiver(
                QUEUE_NAME, sub_queue=ServiceBusSubQueue.DEAD_LETTER
            ) as dlq:
                letters = dlq.peek_messages(max_message_count=250, sequence_number=1)
        levels = {
            item: stock.read_item(item, partition_key=WAREHOUSE)["available"] for item in ITEMS
        }
        found = markers()

    applied = {json.loads(m["key"])[1] for m in found if "refused" not in m}
    refused = {json.loads(m["key"])[1] for m in found if "refused" in m}
    assert applied | refused == set(reservations) and not applied & refused
    assert applied and refused, "the load must both fit and not fit"
    for item in ITEMS:
        taken = sum(reservations[event_id].get(item, 0) for event_id in applied)
        assert levels[item] == FIRST_LEVEL - taken >= 0, item
    processed = Counter(d["key"] for d in workers.decisions() if d["outcome"] == "processed")
    assert max(processed.values()) == 1
    assert {str(letter.message_id) for letter in letters} == {
        f"{event_id}-copy-{copy}" for event_id in refused for copy in (1, 2)
    }
    assert {str(letter.dead_letter_reason) for letter in letters} == {"OutOfStock"}
