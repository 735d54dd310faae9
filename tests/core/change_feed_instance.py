"""One change-feed processor instance as a process, for the kill-and-restart test.

`python change_feed_instance.py URL KEY DATABASE CONTAINER LEASES OWNER OUT`: reads CONTAINER's
change feed with the leases in LEASES; the handler appends each change's id to OUT (one line
each, written before the handler returns, so before the checkpoint). SIGTERM stops it cleanly
(its leases released); SIGKILL leaves them to end by the database's clock.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any, TextIO

from azure.cosmos.aio import CosmosClient

from exactly_once.change_feed import ChangeFeedProcessor
from exactly_once.cosmos_change_feed import CosmosChangeFeed, CosmosLeaseStore

# Short enough for a test: a killed holder's lease ends within about 4 s of its last renewal.
LEASE_SECONDS = 3.0
RENEW_SECONDS = 1.0
ACQUIRE_SECONDS = 0.5
POLL_SECONDS = 0.2
PAGE_SIZE = 5


async def main(
    url: str, key: str, database: str, container: str, leases: str, owner: str, handled: TextIO
) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def record(changes: list[dict[str, Any]]) -> None:
        handled.write("".join(f"{change['id']}\n" for change in changes))
        handled.flush()  # in the kernel before the checkpoint: a SIGKILL keeps it

    async with CosmosClient(url, credential=key) as client:
        db = client.get_database_client(database)
        processor = ChangeFeedProcessor(
            CosmosChangeFeed(db.get_container_client(container)),
            CosmosLeaseStore(db.get_container_client(leases)),
            record,
            owner=owner,
            lease_seconds=LEASE_SECONDS,
            renew_seconds=RENEW_SECONDS,
            acquire_seconds=ACQUIRE_SECONDS,
            poll_seconds=POLL_SECONDS,
            page_size=PAGE_SIZE,
        )
        await processor.run(stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    logging.getLogger("azure").setLevel(logging.WARNING)  # not a line per HTTP request
    url, key, database, container, leases, owner, out = sys.argv[1:8]
    with open(out, "a", encoding="utf-8") as handled:
        asyncio.run(main(url, key, database, container, leases, owner, handled))
