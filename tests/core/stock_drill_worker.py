"""One competing worker of the stock drill (test_stock_drill.py): the guide's stock consumer
(`reserve_stock`, from "Apply an amount once: adjust", its code run from the guide as written)
under the guide's `run_worker`, in a process of its own so that the drill can SIGKILL it.

    python tests/core/stock_drill_worker.py --decisions FILE

The emulators' settings come from the environment the guide reads: `ServiceBusConnection`,
`COSMOS_ENDPOINT` and `COSMOS_KEY`. `--decisions` gets one JSON line per decision this process
reached, written before the message is settled (invoice_drill_worker.py's journal).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient
from core_support import run_guide
from invoice_drill_worker import append_line

from exactly_once import Decision
from exactly_once.worker import WorkerOptions, WorkerStats, run_worker

QUEUE_NAME = "stock"
READY_LINE = "stock drill worker: SIGTERM stops it gracefully"


async def serve(decisions: Path) -> WorkerStats:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    guide: dict[str, Any] = {"__name__": "guide"}
    run_guide(guide)
    consumer = guide["reserve_stock"]
    print(READY_LINE, flush=True)
    servicebus_connection = os.environ["ServiceBusConnection"]  # noqa: SIM112 (the app setting)
    async with (
        guide["cosmos"],
        guide["servicebus_client"],
        ServiceBusClient.from_connection_string(servicebus_connection) as servicebus,
    ):

        async def decide_and_journal(message: ServiceBusReceivedMessage) -> Decision:
            decision: Decision = await consumer.decide_message(message)
            append_line(
                decisions,
                {
                    "message_id": str(message.message_id),
                    "key": decision.key,
                    "outcome": str(decision.outcome),
                    "settlement": str(decision.settlement),
                    "reason": decision.dead_letter_reason,
                    "pid": os.getpid(),
                },
            )
            return decision

        return await run_worker(
            servicebus,
            queue_name=QUEUE_NAME,
            handle=decide_and_journal,
            options=WorkerOptions(concurrency=4, shutdown_grace_seconds=5),
            stop=stop,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    asyncio.run(serve(args.decisions))


if __name__ == "__main__":
    main()
