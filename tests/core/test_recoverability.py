"""Recoverability through the core's worker, on our emulators and the real SDKs: a write the
store refuses for good is dead-lettered on its first delivery with the store's words, and a
store outage is waited out (the lock renewed) rather than spending deliveries.

The consumer here is not the guide's: an invoice and a ledger entry in the customer's
partition, the inbox record beside them. The outage test runs with MaxDeliveryCount 1 and a
5 s lock: any abandon, or any lock that lapsed during the wait, would dead-letter a message at
once, so "nothing dead-lettered" proves both the backoff and the renewal. Its budget is scaled
down to the outage's length; tests/unit/test_backoff.py holds the default budget to a 60 s
outage, and tests/e2e/test_crash.py drills one against the orders app.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.servicebus import ServiceBusReceivedMessage
from core_support import RunningWorker, poll, queue_config, send_bodies, unique
from core_support import dead_letters as dead_letters_of
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from cosmos_emulator import RunningCosmosEmulator, start_in_background
from exactly_once import Backoff, CosmosStore, Effects, Outcome, exactly_once
from exactly_once.retries import Retrier
from exactly_once.telemetry import Telemetry
from exactly_once.worker import WorkerOptions
from servicebus_emulator import RunningEmulator
from servicebus_emulator import start_in_background as start_servicebus

QUEUE = "invoices"
CONSUMER = "invoicing"


def invoice_queue(*, max_delivery_count: int, lock: str) -> dict[str, Any]:
    config = queue_config(QUEUE, max_delivery_count=max_delivery_count)
    [queue] = config["UserConfig"]["Namespaces"][0]["Queues"]
    queue["Properties"]["LockDuration"] = lock
    return config


@pytest.fixture
def cosmos() -> Iterator[RunningCosmosEmulator]:
    """An emulator of this test's own: its faults must not reach any other test."""
    with start_in_background("127.0.0.1", 0) as emulator:
        yield emulator


@pytest.fixture
async def invoices(cosmos: RunningCosmosEmulator) -> AsyncIterator[ContainerProxy]:
    async with CosmosClient(cosmos.url, credential=cosmos.key) as client:
        database = await client.create_database_if_not_exists("billing")
        yield await database.create_container_if_not_exists(
            id="invoices", partition_key=PartitionKey(path="/pk"), default_ttl=-1
        )


def parse_invoice(body: bytes) -> dict[str, str]:
    invoice = json.loads(body)
    return {"invoice": str(invoice["invoice"]), "customer": str(invoice["customer"])}


async def issue_invoice(invoice: dict[str, str], effects: Effects) -> Outcome:
    """The invoice (its id is the producer's invoice number) and a ledger entry, in the
    customer's partition."""
    documents = [
        {"id": invoice["invoice"], "kind": "invoice"},
        {"id": f"ledger-{invoice['invoice']}", "kind": "ledger"},
    ]
    return await effects.inbox(f"customer-{invoice['customer']}", documents)


async def send(servicebus: RunningEmulator, invoices: list[tuple[str, str]]) -> None:
    await send_bodies(
        servicebus,
        QUEUE,
        {
            f"msg-{number}": json.dumps({"invoice": number, "customer": customer})
            for number, customer in invoices
        },
    )


async def dead_letters(servicebus: RunningEmulator) -> list[ServiceBusReceivedMessage]:
    return await dead_letters_of(servicebus, QUEUE)


async def stored_kinds(container: ContainerProxy) -> list[tuple[str, str]]:
    query = "SELECT c.id, c.kind FROM c WHERE IS_DEFINED(c.kind)"
    return sorted([(row["id"], row["kind"]) async for row in container.query_items(query)])


def backoffs_counted(reader: InMemoryMetricReader) -> int:
    total = 0
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "exactly_once.backoffs":
                    for point in metric.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        total += int(point.value)
    return total


async def test_a_write_the_store_refuses_is_dead_lettered_on_its_first_delivery_with_its_words(
    invoices: ContainerProxy, caplog: pytest.LogCaptureFixture
) -> None:
    servicebus = start_servicebus(config=invoice_queue(max_delivery_count=10, lock="PT30S"))
    try:
        consumer = exactly_once(
            consumer=CONSUMER, parse=parse_invoice, store=CosmosStore(invoices)
        )(issue_invoice)
        # Cosmos DB refuses an id with "/" (a 400): no delivery of this message can succeed.
        await send(servicebus, [("2026/0001", "c1"), ("2026-0002", "c1")])
        with caplog.at_level(logging.INFO):
            worker = RunningWorker(servicebus, consumer.decide_message, queue_name=QUEUE)

            async def decided_both() -> bool:
                return bool(await dead_letters(servicebus)) and bool(await stored_kinds(invoices))

            await poll(decided_both, within=60, what="the refusal and the valid invoice")
            stats = await worker.stopped()
        [refused] = await dead_letters(servicebus)
    finally:
        servicebus.stop()

    assert refused.message_id == "msg-2026/0001"
    assert refused.dead_letter_reason == "StoreRefused"
    assert refused.delivery_count in (0, 1)  # the first delivery (counted from 0 or 1)
    description = refused.dead_letter_error_description or ""
    assert "400" in description and "forbidden character" in description
    assert await stored_kinds(invoices) == [
        ("2026-0002", "invoice"),
        ("ledger-2026-0002", "ledger"),
    ]
    assert stats.received == 2 and stats.settled == 2
    # Decided, not crashed: no traceback, and no backing off.
    assert not [record for record in caplog.records if record.exc_info]
    assert not [record for record in caplog.records if record.name == "exactly_once.backoff"]


@pytest.mark.slow
async def test_a_store_outage_is_waited_out_with_the_lock_renewed_and_nothing_dead_lettered(
    cosmos: RunningCosmosEmulator, invoices: ContainerProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # One delivery per message: an abandon, or a lock that lapsed, dead-letters it at once.
    servicebus = start_servicebus(config=invoice_queue(max_delivery_count=1, lock="PT5S"))
    outage_seconds = 8.0  # longer than the 5 s lock: only renewal keeps the messages held
    reader = InMemoryMetricReader()
    backoff = Backoff(first_delay_seconds=0.2, max_delay_seconds=1.0, budget_seconds=30.0)
    retrier = Retrier(
        backoff, telemetry=Telemetry(meter_provider=MeterProvider(metric_readers=[reader]))
    )
    sent = [(unique("inv"), f"c{number % 3}") for number in range(6)]
    try:
        consumer = exactly_once(
            consumer=CONSUMER, parse=parse_invoice, store=CosmosStore(invoices)
        )(issue_invoice)
        # Every request to the account answers 503 until the outage is cleared.
        cosmos.inject_fault(status=503, count=1_000_000, retry_after_ms=10)
        outage_began = time.monotonic()
        await send(servicebus, sent)
        with caplog.at_level(logging.INFO, logger="exactly_once.backoff"):
            worker = RunningWorker(
                servicebus,
                consumer.decide_message,
                queue_name=QUEUE,
                options=WorkerOptions(concurrency=4, backoff=backoff),
                retrier=retrier,
            )
            # The outage lasts its length on the wall clock: that is what is being outlasted.
            await asyncio.sleep(outage_seconds - (time.monotonic() - outage_began))
            cosmos.clear_faults()

            async def all_stored() -> bool:
                return len(await stored_kinds(invoices)) == 2 * len(sent)

            await poll(all_stored, within=60, what="every invoice stored")
            stats = await worker.stopped()
        dead = await dead_letters(servicebus)
    finally:
        servicebus.stop()

    assert dead == []
    assert await stored_kinds(invoices) == sorted(
        [(number, "invoice") for number, _ in sent]
        + [(f"ledger-{number}", "ledger") for number, _ in sent]
    )
    assert stats.received == len(sent) and stats.settled == len(sent)
    assert stats.settlement_failures == 0
    retries = [record for record in caplog.records if record.name == "exactly_once.backoff"]
    assert len(retries) >= len(sent)  # every message waited at least once
    assert all("transient_failure" in record.getMessage() for record in retries)
    assert backoffs_counted(reader) == len(retries)
