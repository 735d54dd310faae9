"""End-to-end consumer throughput on the embedded local stack (prints numbers, asserts nothing).

For 1, 2 and 4 worker processes, with 0% and ~30% duplicates, a backlog of orders is sent
first, then the workers drain it; orders/s = messages settled / time from the first worker
ready to an empty queue. The same runs with a naive consumer (the same core over a store that
upserts the documents: no conflict, no read, every message completed) give the idempotency
overhead as a ratio from one run. For 0% duplicates a bare SDK loop (sync receiver with
prefetch, one transactional batch per message, complete, nothing else) drains the same backlog
too: worker/bare is what our pipeline costs on top of the SDKs.

    python scripts/bench_consumer.py [--orders 400] [--workers 1 2 4]

`ratio` runs only `orders worker` and the bare loop, back to back in each round (which goes
first alternates), for `--rounds` rounds, and prints each round's rates, each side's CPU time
per message (the worker processes' own, read from /proc just before they are stopped: what
the machine's other jobs move least) and the median of the per-round ratios:

    python scripts/bench_consumer.py ratio [--orders 1000] [--workers 1 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure.cosmos.aio import ContainerProxy

from exactly_once.store import JsonMapping, StoredDocument
from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.adapters.servicebus import create_servicebus_client
from orders.adapters.servicebus_load import count_active_messages
from orders.domain.load_plan import LoadMix, SendKind, plan_load
from orders.entrypoints.localstack import LocalStack, ManagedProcess, QueueOptions, local_stack
from orders.entrypoints.runs import send_load

DUPLICATE_MIX = LoadMix(
    producer_retries=0.0,
    late_duplicates=0.15,
    concurrent_duplicates=0.15,
    conflicts=0,
    poison=0,
    conflicts_in_window=0,
)
NO_DUPLICATES = LoadMix(0, 0, 0, 0, 0, 0)
READY = re.compile(r"worker receiving from")
# The bare loop's prefetch: what a plain SDK consumer would configure.
BARE_PREFETCH = 20


class NaiveOrderStore:
    """The baseline, as the core's `DocumentCreator`: the same documents upserted in one
    batch, so no write ever conflicts and every message is completed (no duplicate check, no
    read)."""

    def __init__(self, container: ContainerProxy) -> None:
        self._container = container

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        operations: list[tuple[str, tuple[Any, ...]]] = [
            ("upsert", (dict(document),)) for document in documents
        ]
        await self._container.execute_item_batch(operations, partition_key=partition)

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        return None  # never asked: an upsert never conflicts


def naive_worker() -> None:
    from exactly_once.worker import WorkerOptions
    from orders.entrypoints.worker import run_until_signalled
    from orders.settings import Settings

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    logging.getLogger("azure").setLevel(logging.WARNING)
    run_until_signalled(
        Settings.from_env(),
        WorkerOptions(),
        store_factory=lambda containers: NaiveOrderStore(containers.orders()),
    )


def queue_empty(stack: LocalStack) -> bool:
    async def count() -> int:
        async with create_servicebus_client(stack.settings()) as client:
            return await count_active_messages(client, stack.queue.name)

    return asyncio.run(count()) == 0


def bare_worker() -> None:
    """The yardstick: the SDKs and nothing else (sync receiver with prefetch, one transactional
    batch per message, complete). No validation, hashing, logging, spans or duplicate check."""
    import json
    import os
    import signal
    import threading

    from azure.cosmos import CosmosClient
    from azure.servicebus import ServiceBusClient

    env = os.environ
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    cosmos = CosmosClient(env["COSMOS_ENDPOINT"], credential=env["COSMOS_KEY"])
    container = cosmos.get_database_client(env["COSMOS_DATABASE"]).get_container_client(
        env["COSMOS_CONTAINER"]
    )
    with (
        ServiceBusClient.from_connection_string(env["ServiceBusConnection"]) as client,
        client.get_queue_receiver(env["ORDERS_QUEUE"], prefetch_count=BARE_PREFETCH) as receiver,
    ):
        print("worker receiving from (bare SDK loop)", flush=True)
        while not stop.is_set():
            for message in receiver.receive_messages(
                max_message_count=BARE_PREFETCH, max_wait_time=1
            ):
                order = json.loads(b"".join(message.body))
                order_id = order["orderId"]
                documents = [{"id": order_id, **{k: v for k, v in order.items() if k != "lines"}}]
                documents += [
                    {"id": f"{order_id}:line:{number:03d}", "orderId": order_id, **line}
                    for number, line in enumerate(order["lines"], start=1)
                ]
                container.execute_item_batch(
                    [("upsert", (document,)) for document in documents], partition_key=order_id
                )
                receiver.complete_message(message)
    cosmos.close()


WORKER_KINDS = {"naive": "naive-worker", "bare": "bare-worker"}


@dataclass(frozen=True)
class Drain:
    rate: float
    """Messages settled per second."""
    cpu_ms_per_message: float
    """The worker processes' CPU time (user + system) while draining, per message."""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(orders: int, workers: int, mix: LoadMix, kind: str) -> Drain:
    """How `workers` processes of `kind` drained a backlog."""
    queue = QueueOptions(duplicate_window_seconds=2)
    with local_stack(queue) as stack:
        asyncio.run(prepare_local_cosmos(stack.settings()))
        plan = plan_load(orders, mix, seed=1, run_id=f"bench{uuid.uuid4().hex[:6]}")
        asyncio.run(send_load(stack.settings(), plan, duplicate_window_seconds=2))
        delivered = sum(1 for s in plan.sends if s.kind is not SendKind.PRODUCER_RETRY)
        started: list[ManagedProcess] = []
        for _ in range(workers):
            if kind in WORKER_KINDS:
                started.append(
                    stack.spawn(
                        f"worker-{kind}-{len(started)}",
                        [str(Path(__file__).resolve()), WORKER_KINDS[kind]],
                        env=stack.environment(),
                    )
                )
            else:
                started.append(stack.start_worker())
        while not any(READY.search(w.log()) for w in started):
            time.sleep(0.01)
        began = time.perf_counter()
        cpu_before = sum(cpu_seconds(w.process.pid) for w in started)
        while not queue_empty(stack):
            time.sleep(0.05)
        elapsed = time.perf_counter() - began
        cpu = sum(cpu_seconds(w.process.pid) for w in started) - cpu_before
        stack.stop_workers()
        for worker in started:
            worker.stop()
    return Drain(delivered / elapsed, 1000 * cpu / delivered)


def ratio_rounds(orders: int, workers: int, rounds: int) -> None:
    """`orders worker` against the bare loop, back to back, `rounds` times; the medians."""
    ratios: list[float] = []
    cpu: dict[str, list[float]] = {"idempotent": [], "bare": []}
    for number in range(rounds):
        order = ("idempotent", "bare") if number % 2 == 0 else ("bare", "idempotent")
        drains = {kind: one_run(orders, workers, NO_DUPLICATES, kind) for kind in order}
        ratios.append(drains["idempotent"].rate / drains["bare"].rate)
        for kind, drain in drains.items():
            cpu[kind].append(drain.cpu_ms_per_message)
        print(
            f"workers {workers} round {number + 1}: worker {drains['idempotent'].rate:.0f} msg/s "
            f"({drains['idempotent'].cpu_ms_per_message:.2f} ms CPU/msg), bare "
            f"{drains['bare'].rate:.0f} msg/s ({drains['bare'].cpu_ms_per_message:.2f} ms CPU/msg)"
            f", worker/bare {ratios[-1]:.2f}",
            flush=True,
        )
    worker_cpu, bare_cpu = (statistics.median(cpu[kind]) for kind in ("idempotent", "bare"))
    print(
        f"workers {workers} median: worker/bare {statistics.median(ratios):.2f}, CPU/msg worker "
        f"{worker_cpu:.2f} ms, bare {bare_cpu:.2f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "mode",
        nargs="?",
        default="bench",
        choices=["bench", "ratio", "naive-worker", "bare-worker"],
    )
    parser.add_argument("--orders", type=int, default=None, help="400; 1000 for ratio")
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="1 2 4; 1 2 for ratio")
    parser.add_argument("--rounds", type=int, default=5, help="ratio's rounds")
    args = parser.parse_args()
    if args.mode == "naive-worker":
        naive_worker()
        return
    if args.mode == "bare-worker":
        bare_worker()
        return
    if args.mode == "ratio":
        for workers in args.workers or [1, 2]:
            ratio_rounds(args.orders or 1000, workers, args.rounds)
        return
    orders = args.orders or 400
    rows = []
    print("{:>7} {:>10} {:>17} {:>12} {:>6}".format(
        "workers", "duplicates", "idempotent msg/s", "naive msg/s", "ratio"))  # fmt: skip
    for workers in args.workers or [1, 2, 4]:
        for label, mix in (("0%", NO_DUPLICATES), ("30%", DUPLICATE_MIX)):
            idempotent = one_run(orders, workers, mix, "idempotent").rate
            naive = one_run(orders, workers, mix, "naive").rate
            print(
                f"{workers:>7} {label:>10} {idempotent:>17.0f} {naive:>12.0f} "
                f"{idempotent / naive:>6.2f}",
                flush=True,
            )
            if label == "0%":
                rows.append((workers, idempotent, one_run(orders, workers, mix, "bare").rate))
    print()
    print(
        "{:>7} {:>13} {:>13} {:>12}".format("workers", "worker msg/s", "bare msg/s", "worker/bare")
    )
    for workers, worker_rate, bare_rate in rows:
        print(
            f"{workers:>7} {worker_rate:>13.0f} {bare_rate:>13.0f} {worker_rate / bare_rate:>12.2f}"
        )


if __name__ == "__main__":
    main()
