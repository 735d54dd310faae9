"""Throughput of the pure-Python Cosmos emulator through the real SDK (prints, asserts nothing).

    .venv/bin/python scripts/bench_cosmos_emulator.py [--seconds 3] [--url URL --key KEY]

Measures point creates/s and 2-operation transactional batches/s with 1 and 4 clients, for the
sync SDK (one thread per client) and the async SDK (one task per client), then how fast the
sync SDK drains the change feed of everything written, from the beginning, 100 items a page.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid
from collections.abc import Callable

from azure.cosmos import ContainerProxy, CosmosClient, PartitionKey
from azure.cosmos.aio import CosmosClient as AioCosmosClient

from cosmos_emulator import start_in_background


def _create(container: ContainerProxy, worker: int, i: int) -> None:
    container.create_item({"id": f"w{worker}-{i}", "pk": f"p{worker}-{i % 50}"})


def _batch(container: ContainerProxy, worker: int, i: int) -> None:
    pk = f"b{worker}-{i}"
    container.execute_item_batch(
        [
            ("create", ({"id": "dedup", "pk": pk},)),
            ("create", ({"id": "effect", "pk": pk, "n": i},)),
        ],
        partition_key=pk,
    )


def run_sync(
    url: str,
    key: str,
    db: str,
    clients: int,
    seconds: float,
    op: Callable[[ContainerProxy, int, int], None],
) -> float:
    proxies = [
        CosmosClient(url, key).get_database_client(db).get_container_client("bench")
        for _ in range(clients)
    ]
    counts = [0] * clients
    start = threading.Barrier(clients + 1)
    deadline = 0.0

    def work(worker: int) -> None:
        nonlocal deadline
        start.wait()
        tag = uuid.uuid4().hex[:6]
        i = 0
        while time.monotonic() < deadline:
            op(proxies[worker], hash((tag, worker)) % 10**6, i)
            i += 1
        counts[worker] = i

    threads = [threading.Thread(target=work, args=(w,)) for w in range(clients)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + seconds
    began = time.monotonic()
    start.wait()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - began)


async def run_aio(url: str, key: str, db: str, clients: int, seconds: float, batch: bool) -> float:
    async with AioCosmosClient(url, key) as client:
        container = client.get_database_client(db).get_container_client("bench")
        deadline = time.monotonic() + seconds
        tag = uuid.uuid4().hex[:6]

        async def work(worker: int) -> int:
            i = 0
            while time.monotonic() < deadline:
                if batch:
                    pk = f"ab{tag}{worker}-{i}"
                    await container.execute_item_batch(
                        [
                            ("create", ({"id": "dedup", "pk": pk},)),
                            ("create", ({"id": "effect", "pk": pk},)),
                        ],
                        partition_key=pk,
                    )
                else:
                    await container.create_item({"id": f"a{tag}{worker}-{i}", "pk": f"p{i % 50}"})
                i += 1
            return i

        began = time.monotonic()
        done = await asyncio.gather(*(work(w) for w in range(clients)))
        return sum(done) / (time.monotonic() - began)


def drain_change_feed(url: str, key: str, db: str) -> tuple[int, int, float]:
    """(items, pages, seconds) of one change feed read from the beginning to the end."""
    container = CosmosClient(url, key).get_database_client(db).get_container_client("bench")
    began = time.monotonic()
    items = pages = 0
    for page in container.query_items_change_feed(
        start_time="Beginning", max_item_count=100
    ).by_page():
        pages += 1
        items += len(list(page))
    return items, pages, time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--url", default=None, help="benchmark an already running server")
    parser.add_argument("--key", default=None)
    args = parser.parse_args()
    emu = None
    if args.url:
        url, key = args.url, args.key
    else:
        emu = start_in_background()
        url, key = emu.url, emu.key
    try:
        db = f"bench-{uuid.uuid4().hex[:6]}"
        CosmosClient(url, key).create_database(db).create_container("bench", PartitionKey("/pk"))
        print(f"cosmos emulator benchmark against {url} ({args.seconds:.0f} s per row)")
        print(f"{'transport':<10}{'clients':>8}{'creates/s':>12}{'batches/s':>12}")
        for clients in (1, 4):
            creates = run_sync(url, key, db, clients, args.seconds, _create)
            batches = run_sync(url, key, db, clients, args.seconds, _batch)
            print(f"{'sync':<10}{clients:>8}{creates:>12.0f}{batches:>12.0f}", flush=True)
        for clients in (1, 4):
            creates = asyncio.run(run_aio(url, key, db, clients, args.seconds, batch=False))
            batches = asyncio.run(run_aio(url, key, db, clients, args.seconds, batch=True))
            print(f"{'aio':<10}{clients:>8}{creates:>12.0f}{batches:>12.0f}", flush=True)
        items, pages, took = drain_change_feed(url, key, db)
        rate = items / took
        print(f"change feed: {items} items, {pages} pages, {took:.2f} s ({rate:.0f}/s)", flush=True)
        CosmosClient(url, key).delete_database(db)
    finally:
        if emu is not None:
            emu.stop()


if __name__ == "__main__":
    main()
