"""One competing worker of the invoice drill (test_invoice_drill.py): the guide's worker
(`run_worker`, the clients opened at the top and closed on the way out, SIGTERM as the stop)
around the invoicing consumer or the e-mail consumer of invoicing.py, in a process of its own
so that the drill can SIGKILL it.

    python tests/core/invoice_drill_worker.py {invoicing|invoice-emails} \
        --decisions FILE --mail-journal FILE

The emulators' settings come from the environment, under the names `orders env` prints:
`ServiceBusConnection`, `COSMOS_ENDPOINT` and `COSMOS_KEY`. The drill's test reads two files:
`--decisions`, one JSON line per decision this process reached (every attempt, the transient
ones too), written before the message is settled; and `--mail-journal`, the e-mail provider:
one JSON line per call, appended by every e-mail worker (a provider that deduplicates on the
key: the mail sent for a key is its first line; a call made again shows as another line of the
key, and a reuse that reached the provider as a line with another body).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import time
from pathlib import Path

from azure.cosmos.aio import CosmosClient
from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient
from invoicing import INVOICE_EMAILS, INVOICING, invoice_consumers

from exactly_once import ConsumerOptions, CosmosStore, Decision, Retention
from exactly_once.worker import WorkerOptions, WorkerStats, run_worker

DATABASE, CONTAINER = "billing", "invoices"
QUEUE_OF = {INVOICING: "invoices", INVOICE_EMAILS: "invoice-emails"}
# The queues' settings (the drill's Service Bus config): the records outlive every delivery.
LOCK_SECONDS, MAX_DELIVERY_COUNT, MESSAGE_TTL_SECONDS = 10, 10, 3600
# A claim stranded by a SIGKILL is taken over once its lease ends: the e-mail provider answers
# in a millisecond, so 10 s is ample for a call and keeps the drill short (the default is 30 s).
LEASE_SECONDS = 10.0
PROVIDER_SECONDS = 0.05
READY_LINE = "invoice drill worker: SIGTERM stops it gracefully"


def append_line(path: Path, entry: dict[str, object]) -> None:
    """One JSON line, in one `write` to a file opened for appending: lines of several processes
    never interleave, and a SIGKILL leaves whole lines (a write is not interrupted half way)."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)


class JournalMailer:
    """The e-mail provider: every call journaled, the answer the same for every call of a key."""

    def __init__(self, journal: Path) -> None:
        self._journal = journal

    async def send(self, key: str, to: str, text: str) -> str:
        append_line(self._journal, {"key": key, "to": to, "text": text, "pid": os.getpid()})
        # A provider's round trip: the time in which a second copy of the message, decided
        # beside the first, could reach its claim and call again.
        await asyncio.sleep(PROVIDER_SECONDS)
        return f"mailed to {to} under {key}"


async def serve(consumer_name: str, decisions: Path, mail_journal: Path) -> WorkerStats:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    # From here a SIGTERM is a graceful stop: the drill waits for this line before sending one.
    print(READY_LINE, flush=True)
    retention = Retention(
        lock_duration_seconds=LOCK_SECONDS,
        max_delivery_count=MAX_DELIVERY_COUNT,
        message_ttl_seconds=MESSAGE_TTL_SECONDS,
    )
    # `ServiceBusConnection` is the Functions app setting's name (the guide's trigger binds
    # it), not a shell convention: kept as `orders env` prints it.
    servicebus_connection = os.environ["ServiceBusConnection"]  # noqa: SIM112
    async with (
        CosmosClient(os.environ["COSMOS_ENDPOINT"], credential=os.environ["COSMOS_KEY"]) as cosmos,
        ServiceBusClient.from_connection_string(servicebus_connection) as servicebus,
    ):
        container = cosmos.get_database_client(DATABASE).get_container_client(CONTAINER)
        consumers = invoice_consumers(
            CosmosStore(container),
            JournalMailer(mail_journal),
            ConsumerOptions(retention=retention, lease_seconds=LEASE_SECONDS),
        )
        consumer = {c.consumer: c for c in consumers}[consumer_name]

        async def decide_and_journal(message: ServiceBusReceivedMessage) -> Decision:
            decision = await consumer.decide_message(message)
            append_line(
                decisions,
                {
                    "message_id": str(message.message_id),
                    "outcome": decision.outcome.value,
                    "settlement": decision.settlement.value,
                    "reason": decision.dead_letter_reason,
                    "delivery_count": message.delivery_count,
                    "pid": os.getpid(),
                    "at": time.time(),
                },
            )
            return decision

        return await run_worker(
            servicebus,
            queue_name=QUEUE_OF[consumer_name],
            handle=decide_and_journal,
            options=WorkerOptions(concurrency=4, shutdown_grace_seconds=10),
            stop=stop,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("consumer", choices=sorted(QUEUE_OF))
    parser.add_argument("--decisions", type=Path, required=True)
    parser.add_argument("--mail-journal", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    asyncio.run(serve(args.consumer, args.decisions, args.mail_journal))


if __name__ == "__main__":
    main()
