"""Throughput of the pure-Python Cosmos emulator through the real SDK (prints, asserts nothing).

    .venv/bin/python scripts/bench_cosmos_emulator.py [--seconds 3] [--url URL --key KEY]
        [--feed-sizes 1000,10000,100000] [--only-feed]

Measures point creates/s and 2-operation transactional batches/s with 1 and 4 clients, for the
sync SDK (one thread per client) and the async SDK (one task per client), then how fast the
sync SDK drains the change feed of everything written, from the beginning, 100 items a page.

Then the cost of one change feed page against the container's size: containers of 1k, 10k and
100k documents (loaded with 100-item batches), each read through the sync SDK 100 items a page:
the first page from the beginning, the median and slowest page of a full drain, the first page
of one partition key, and the "nothing new" poll at the end. With the LSN index these stay flat
as the container grows; a per-page scan of the container grows with it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

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


def _fill(container: ContainerProxy, size: int) -> None:
    """`size` documents, 100 per batch, one partition key per batch."""
    for start in range(0, size, 100):
        pk = f"p{start // 100}"
        container.execute_item_batch(
            [
                ("create", ({"id": f"d{i}", "pk": pk, "n": i},))
                for i in range(start, min(size, start + 100))
            ],
            partition_key=pk,
        )


def _timed_first_page(container: ContainerProxy, **kwargs: Any) -> float:
    began = time.perf_counter()
    pages = container.query_items_change_feed(max_item_count=100, **kwargs).by_page()
    list(next(pages, []))  # no page at all when nothing is new
    return time.perf_counter() - began


def feed_page_costs(url: str, key: str, db: str, sizes: list[int]) -> None:
    database = CosmosClient(url, key).get_database_client(db)
    print("change feed page cost (sync SDK, 100 items a page, ms)")
    print(
        f"{'documents':>10}{'first page':>12}{'median page':>13}{'slowest page':>14}"
        f"{'one pk':>8}{'nothing new':>13}{'load s':>8}"
    )
    for size in sizes:
        container = database.create_container(f"feed-{size}", PartitionKey("/pk"))
        began = time.monotonic()
        _fill(container, size)
        load = time.monotonic() - began
        first = min(_timed_first_page(container, start_time="Beginning") for _ in range(5))
        one_pk = min(
            _timed_first_page(container, start_time="Beginning", partition_key="p0")
            for _ in range(5)
        )
        times: list[float] = []
        items = 0
        pages = container.query_items_change_feed(start_time="Beginning", max_item_count=100)
        iterator = pages.by_page()
        while True:
            began = time.perf_counter()
            try:
                page = list(next(iterator))
            except StopIteration:
                break
            times.append(time.perf_counter() - began)
            items += len(page)
        assert items == size, (items, size)
        token = str(container.client_connection.last_response_headers["etag"])
        nothing_new = min(_timed_first_page(container, continuation=token) for _ in range(5))
        print(
            f"{size:>10}{first * 1000:>12.1f}{statistics.median(times) * 1000:>13.1f}"
            f"{max(times) * 1000:>14.1f}{one_pk * 1000:>8.1f}{nothing_new * 1000:>13.1f}"
            f"{load:>8.1f}",
            flush=True,
        )
        database.delete_container(container)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--url", default=None, help="benchmark an already running server")
    parser.add_argument("--key", default=None)
    parser.add_argument(
        "--feed-sizes",
        default="1000,10000,100000",
        help="container sizes for the change feed page cost (comma-separated)",
    )
    parser.add_argument(
        "--only-feed", action="store_true", help="skip the throughput rows and the drain"
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.feed_sizes.split(",") if n]
    emu = None
    if args.url:
        url, key = args.url, args.key
    else:
        emu = start_in_background()
        url, key = emu.url, emu.key
    try:
        db = f"bench-{uuid.uuid4().hex[:6]}"
        CosmosClient(url, key).create_database(db).create_container("bench", PartitionKey("/pk"))
        if args.only_feed:
            feed_page_costs(url, key, db, sizes)
            CosmosClient(url, key).delete_database(db)
            return
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
        feed_page_costs(url, key, db, sizes)
        CosmosClient(url, key).delete_database(db)
    finally:
        if emu is not None:
            emu.stop()


if __name__ == "__main__":
    main()
