"""`orders dispatcher`: the outbox dispatcher as a process (the change feed's pull model).

Runs until SIGTERM or SIGINT, then gives its feed-range leases up so another dispatcher takes
over at once. Several processes share the feed ranges through their leases.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from exactly_once.options import DEFAULT_LEASE_SECONDS
from orders.bootstrap import build_dispatcher_runtime
from orders.domain.events import OrderEvent
from orders.service.dispatcher import DEFAULT_POLL_SECONDS, AfterPublish, DispatcherStats
from orders.settings import Settings

logger = logging.getLogger("orders.dispatcher")

# Fault injection for crash drills: comma-separated orderIds whose event, once published, is
# followed by an immediate exit before it is marked dispatched.
CRASH_AFTER_PUBLISH_ENV = "ORDERS_FAULT_CRASH_AFTER_PUBLISH"
CRASH_EXIT_CODE = 87


def crash_after_publish_from_env() -> AfterPublish | None:
    targets = {t for t in os.environ.get(CRASH_AFTER_PUBLISH_ENV, "").split(",") if t}
    if not targets:
        return None

    def crash(event: OrderEvent) -> None:
        if event.order_id in targets:
            logger.warning("fault injection: exiting after publishing %s", event.event_id)
            logging.shutdown()
            os._exit(CRASH_EXIT_CODE)

    return crash


async def run_dispatcher(
    settings: Settings,
    stop: asyncio.Event,
    *,
    after_publish: AfterPublish | None = None,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> DispatcherStats:
    """The dispatcher as a process (pull model, checkpoints in the leases container)."""
    runtime = await build_dispatcher_runtime(
        settings,
        after_publish=after_publish,
        poll_seconds=poll_seconds,
        lease_seconds=lease_seconds,
    )
    try:
        return await runtime.dispatcher.run(stop)
    finally:
        await runtime.close()


def run_dispatcher_until_signalled(
    settings: Settings, *, lease_seconds: float = DEFAULT_LEASE_SECONDS
) -> DispatcherStats:
    async def main() -> DispatcherStats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        return await run_dispatcher(
            settings,
            stop,
            after_publish=crash_after_publish_from_env(),
            lease_seconds=lease_seconds,
        )

    return asyncio.run(main())
