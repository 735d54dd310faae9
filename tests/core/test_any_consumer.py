"""A consumer the guide does not show, written from the guide: `InvoiceIssued` writes an invoice
and a ledger entry into the customer's partition (`effects.inbox`: a partition the payload names,
not the key's), and a second consumer e-mails the invoice through `two_phase` with a downstream
key of its own. Against our Service Bus and Cosmos DB emulators through the real SDKs:

- a MessageId reused with another body naming another customer is a mismatch, dead-lettered,
  for `inbox`, `two_phase` and the entity marker alike (the key is judged in its own home);
- two copies of one message at once in one process never call the downstream twice (a claim
  belongs to one delivery);
- every record the core writes carries the consumer's ttl, business documents none, and a
  retention below the redelivery window is refused when the consumer is built.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from azure.cosmos.aio import ContainerProxy
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from core_support import queue_config, unique
from invoicing import InvoiceIssued, invoice, invoice_consumers, parse_invoice

from exactly_once import (
    ConsumerOptions,
    CosmosStore,
    DeadLetterReason,
    Effects,
    Outcome,
    PayloadMismatchError,
    Retention,
    RetentionError,
    exactly_once,
)
from exactly_once._orchestrator import KEY_TYPE
from exactly_once.decisions import Settlement
from exactly_once.store import Record, RecordExistsError, RecordRead
from exactly_once.worker import WorkerOptions, run_worker
from servicebus_emulator import RunningEmulator, start_in_background

INVOICES, EMAILS = "invoices", "invoice-emails"


class Mailer:
    """An e-mail provider that deduplicates on the key it is given, counting every call. With
    `hold_first`, the first call waits for it (a slow provider), and `first_entered` says when
    that call has begun; every later call answers at once."""

    def __init__(self, hold_first: asyncio.Event | None = None) -> None:
        self.calls: list[str] = []
        self.sent: dict[str, str] = {}
        self.first_entered = asyncio.Event()
        self._hold_first = hold_first

    async def send(self, key: str, to: str, text: str) -> str:
        self.calls.append(key)
        if len(self.calls) == 1:
            self.first_entered.set()
            if self._hold_first is not None:
                await self._hold_first.wait()
        return self.sent.setdefault(key, f"mail {len(self.sent) + 1} to {to}: {text}")


class WatchedStore(CosmosStore):
    """The real store, telling the test when a second copy has acted on the first's live claim:
    taken it over, or read it again after waiting for it. An event, so the test never sleeps to
    let the second copy get there."""

    def __init__(self, container: ContainerProxy) -> None:
        super().__init__(container)
        self.claims_found_taken = 0
        self.second_copy_acted = asyncio.Event()

    async def claim(self, record: Record) -> Record:
        try:
            return await super().claim(record)
        except RecordExistsError:
            self.claims_found_taken += 1
            raise

    async def take_over(self, existing: Record, owner: str, lease_seconds: float) -> Record:
        taken = await super().take_over(existing, owner, lease_seconds)
        self.second_copy_acted.set()
        return taken

    async def read(self, key: str, partition: str) -> RecordRead:
        found = await super().read(key, partition)
        if self.claims_found_taken:
            self.second_copy_acted.set()
        return found


async def stored(container: ContainerProxy, partition: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    async for item in container.query_items("SELECT * FROM c", partition_key=partition):
        found[item["id"]] = item
    return found


# --- through the broker: competing workers, resends and reuses ---------------------------------


@pytest.fixture
def invoice_queues() -> Iterator[RunningEmulator]:
    queues = [
        queue_config(name)["UserConfig"]["Namespaces"][0]["Queues"][0]
        for name in (INVOICES, EMAILS)
    ]
    config = queue_config()
    config["UserConfig"]["Namespaces"][0]["Queues"] = queues
    running = start_in_background(config=config)
    yield running
    running.stop()


@pytest.fixture
async def broker(invoice_queues: RunningEmulator) -> AsyncIterator[ServiceBusClient]:
    async with ServiceBusClient.from_connection_string(invoice_queues.connection_string) as client:
        yield client


async def settled_on(client: ServiceBusClient, queue: str) -> tuple[int, dict[str, str | None]]:
    """(messages still active, MessageId -> reason of every dead letter) of `queue`."""
    async with client.get_queue_receiver(queue) as receiver:
        active = len(await receiver.peek_messages(max_message_count=100))
    async with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        letters = await dlq.peek_messages(max_message_count=100)
    return active, {str(letter.message_id): letter.dead_letter_reason for letter in letters}


async def test_reused_message_ids_naming_another_customer_are_dead_lettered_as_mismatches(
    broker: ServiceBusClient, container: ContainerProxy
) -> None:
    """Given 8 invoices, a resend of 4 and a reuse of 3 MessageIds whose bodies name ANOTHER
    customer, on both consumers' queues, with two competing workers each: every invoice is
    written and mailed once, every reuse is dead-lettered as a mismatch, nothing valid is."""
    store, mailer = CosmosStore(container), Mailer()
    issue_invoice, email_invoice = invoice_consumers(store, mailer)
    customers = {unique("invoice"): unique("customer") for _ in range(8)}
    invoice_ids = list(customers)
    reused = invoice_ids[:3]
    elsewhere = {invoice_id: unique("other-customer") for invoice_id in reused}
    valid = [(i, invoice(i, customers[i])) for i in [*invoice_ids, *invoice_ids[4:]]]
    reuses = [(i, invoice(i, elsewhere[i], amount_cents=99)) for i in reused]

    stop = asyncio.Event()
    options = WorkerOptions(concurrency=4, shutdown_grace_seconds=10)
    workers = [
        asyncio.create_task(
            run_worker(broker, queue_name=queue, handle=handle, options=options, stop=stop)
        )
        for queue, handle in (
            (INVOICES, issue_invoice.decide_message),
            (INVOICES, issue_invoice.decide_message),
            (EMAILS, email_invoice.decide_message),
            (EMAILS, email_invoice.decide_message),
        )
    ]

    async def send_and_settle(batch: list[tuple[str, bytes]], letters: int) -> list[Any]:
        for queue in (INVOICES, EMAILS):
            async with broker.get_queue_sender(queue) as sender:
                await sender.send_messages(
                    [ServiceBusMessage(body, message_id=message_id) for message_id, body in batch]
                )
        deadline = time.monotonic() + 60
        while True:
            states = [await settled_on(broker, queue) for queue in (INVOICES, EMAILS)]
            if all(active == 0 and len(dead) == letters for active, dead in states):
                return states
            assert time.monotonic() < deadline, f"not settled within 60 s: {states}"
            assert not any(worker.done() for worker in workers), "a worker ended before `stop`"
            await asyncio.sleep(0.2)  # polling the broker's state, bounded by the deadline

    # The valid messages first (the resends racing their originals), then the reuses: which
    # body of a MessageId is the valid one is then never a race.
    await send_and_settle(valid, letters=0)
    states = await send_and_settle(reuses, letters=len(reuses))
    stop.set()
    await asyncio.wait_for(asyncio.gather(*workers), 30)

    for _, letters in states:
        assert letters == dict.fromkeys(reused, DeadLetterReason.REQUEST_HASH_MISMATCH.value)
    for invoice_id, customer in customers.items():
        documents = await stored(container, customer)
        assert documents[f"invoice-{invoice_id}"]["amountCents"] == 1200
        assert documents[f"ledger-{invoice_id}"]["debitCents"] == 1200
        assert len(documents) == 3  # the invoice, its ledger entry, the inbox record: once
    for other_customer in elsewhere.values():
        assert await stored(container, other_customer) == {}  # no reuse wrote anything
    assert sorted(mailer.calls) == sorted(f"invoice-mail:{i}" for i in invoice_ids)


# --- the key's home, mechanism by mechanism ---------------------------------------------------


def bound(store: CosmosStore, message_id: str, request_hash: str, **options: Any) -> Effects:
    return Effects(
        consumer="invoicing",
        message_id=message_id,
        request_hash=request_hash,
        records=store,
        documents=store,
        owner=unique("delivery"),
        max_wait_seconds=0,
        **options,
    )


async def answer(downstream_key: str) -> str:
    return f"sent under {downstream_key}"


@pytest.mark.parametrize("mechanism", ["inbox", "create_entity", "two_phase"])
async def test_a_reuse_naming_another_partition_is_a_mismatch_for_each_mechanism(
    store: CosmosStore, container: ContainerProxy, mechanism: str
) -> None:
    message_id, first, other = unique("message"), unique("customer"), unique("customer")

    async def run(effects: Effects, partition: str) -> Outcome:
        if mechanism == "inbox":
            return await effects.inbox(partition, [{"id": f"invoice-{partition}"}])
        if mechanism == "create_entity":
            return await effects.create_entity(partition, {"id": f"invoice-{partition}"})
        return (await effects.two_phase(answer)).outcome

    assert await run(bound(store, message_id, "hash-1"), first) is Outcome.PROCESSED
    assert await run(bound(store, message_id, "hash-1"), first) is Outcome.DUPLICATE
    with pytest.raises(PayloadMismatchError):
        await run(bound(store, message_id, "hash-2"), other)

    assert await stored(container, other) == {}


async def test_a_consumer_may_name_its_keys_home_and_keeps_one_batch_there(
    store: CosmosStore, container: ContainerProxy
) -> None:
    """An invoice consumer whose MessageId is the invoice id and whose effect lives in the
    invoice's partition: the key record is the inbox record of the effect's own batch."""
    issue: list[Outcome] = []

    @exactly_once(
        consumer="invoicing",
        parse=parse_invoice,
        store=store,
        options=ConsumerOptions(key_partition=lambda message_id: f"invoice:{message_id}"),
    )
    async def issue_invoice(invoice: InvoiceIssued, effects: Effects) -> Outcome:
        done = await effects.inbox(f"invoice:{invoice.invoice_id}", [{"id": "invoice"}])
        issue.append(done)
        return done

    invoice_id = unique("invoice")
    bodies = (invoice(invoice_id, "c1"), invoice(invoice_id, "c1"), invoice(invoice_id, "c2", 5))
    decisions = [await issue_invoice.decide(body, invoice_id) for body in bodies]

    assert issue == [Outcome.PROCESSED, Outcome.DUPLICATE]
    assert decisions[2].dead_letter_reason == DeadLetterReason.REQUEST_HASH_MISMATCH
    documents = await stored(container, f"invoice:{invoice_id}")
    # No key record of its own: the inbox record in the effect's batch is the key's.
    assert sorted(documents) == sorted(["invoice", f"inbox:invoicing:{invoice_id}"])


# --- ownership per delivery -------------------------------------------------------------------


async def test_two_copies_at_once_in_one_process_call_the_downstream_once(
    container: ContainerProxy,
) -> None:
    """The first copy holds the provider (an event); the second reaches its claim meanwhile and
    waits for it (the provider answers only once the second has acted on the claim), then finds
    it completed: one e-mail, one `processed`, one `duplicate`."""
    store, provider_may_answer = WatchedStore(container), asyncio.Event()
    mailer = Mailer(hold_first=provider_may_answer)
    _, email_invoice = invoice_consumers(store, mailer)
    invoice_id = unique("invoice")
    body = invoice(invoice_id, unique("customer"))

    first = asyncio.create_task(email_invoice.decide(body, invoice_id))
    await asyncio.wait_for(mailer.first_entered.wait(), 10)
    second = asyncio.create_task(email_invoice.decide(body, invoice_id))
    await asyncio.wait_for(store.second_copy_acted.wait(), 10)
    provider_may_answer.set()
    decisions = await asyncio.wait_for(asyncio.gather(first, second), 30)

    assert mailer.calls == [f"invoice-mail:{invoice_id}"]
    assert [d.outcome for d in decisions] == [Outcome.PROCESSED, Outcome.DUPLICATE]


async def test_a_second_copy_that_may_not_wait_defers_to_the_first(
    container: ContainerProxy,
) -> None:
    store, provider_may_answer = CosmosStore(container), asyncio.Event()
    mailer = Mailer(hold_first=provider_may_answer)
    _, email_invoice = invoice_consumers(store, mailer, ConsumerOptions(max_wait_seconds=0))
    invoice_id = unique("invoice")
    body = invoice(invoice_id, unique("customer"))

    first = asyncio.create_task(email_invoice.decide(body, invoice_id))
    await asyncio.wait_for(mailer.first_entered.wait(), 10)
    second = await asyncio.wait_for(email_invoice.decide(body, invoice_id), 10)
    provider_may_answer.set()
    done = await asyncio.wait_for(first, 10)

    assert (second.outcome, second.settlement) == (
        Outcome.IN_PROGRESS_ELSEWHERE,
        Settlement.ABANDON,
    )
    assert done.outcome is Outcome.PROCESSED
    assert mailer.calls == [f"invoice-mail:{invoice_id}"]


# --- retention --------------------------------------------------------------------------------


async def test_every_record_carries_the_consumers_ttl_and_no_business_document_does(
    store: CosmosStore, container: ContainerProxy
) -> None:
    retention = Retention(
        lock_duration_seconds=120, max_delivery_count=10, message_ttl_seconds=3600
    )
    customer = unique("customer")
    effects = bound(store, unique("message"), "hash-1", retention=retention)
    at_home = bound(store, unique("message"), "hash-1", retention=retention)

    await effects.inbox(customer, [{"id": "invoice"}])
    await effects.create_entity(customer, {"id": "account"})
    await effects.two_phase(answer)
    await at_home.inbox(at_home.key_partition, [{"id": "note"}])

    documents = [
        document
        for partition in (customer, effects.key_partition, at_home.key_partition)
        for document in (await stored(container, partition)).values()
    ]
    business = {"invoice", "account", "note"}
    assert [d.get("ttl") for d in documents if d["id"] in business] == [None, None, None]
    records = [d for d in documents if d["id"] not in business]
    # The inbox record beside the invoice, the keys of the inbox and the entity in their home,
    # the two-phase record there, and the inbox record that is its own key (at home).
    assert sorted(str(d.get("type")) for d in records) == sorted(
        ["exactlyOnceInbox", KEY_TYPE, KEY_TYPE, "exactlyOnceRecord", "exactlyOnceInbox"]
    )
    assert {d.get("ttl") for d in records} == {retention.ttl_seconds}
    assert retention.ttl_seconds == 120 * 10 + 3600 + 7 * 24 * 3600


async def test_records_expire_in_a_container_with_ttl_on(
    store: CosmosStore, container: ContainerProxy
) -> None:
    short = Retention(
        lock_duration_seconds=1,
        max_delivery_count=1,
        message_ttl_seconds=1,
        dead_letter_margin_seconds=0,
    )
    message_id, customer = unique("message"), unique("customer")
    effects = bound(store, message_id, "hash-1", retention=short)
    await effects.inbox(customer, [{"id": "invoice"}])

    deadline = time.monotonic() + 15
    while len(await stored(container, customer)) > 1:
        assert time.monotonic() < deadline, "the inbox record did not expire within 15 s"
        await asyncio.sleep(0.2)  # polling the store's expiry, bounded by the deadline

    assert set(await stored(container, customer)) == {"invoice"}  # the business document stays
    assert await stored(container, effects.key_partition) == {}


def test_a_retention_below_the_redelivery_window_is_refused_at_start_up() -> None:
    with pytest.raises(RetentionError, match="below the redelivery window of 4800 s"):
        Retention(
            lock_duration_seconds=120,
            max_delivery_count=10,
            message_ttl_seconds=3600,
            record_ttl_seconds=3600,
        )
    assert Retention(message_ttl_seconds=3600, record_ttl_seconds=4200).ttl_seconds == 4200


# --- the broker's size limit ------------------------------------------------------------------


async def test_the_default_body_bound_is_what_the_standard_tier_delivers(
    store: CosmosStore,
) -> None:
    issue_invoice, _ = invoice_consumers(store, Mailer())
    standard_limit = 256 * 1024

    too_large = await issue_invoice.decide(b"x" * (standard_limit + 1), unique("message"))
    at_limit = await issue_invoice.decide(b"x" * standard_limit, unique("message"))

    assert too_large.dead_letter_reason == DeadLetterReason.BODY_TOO_LARGE
    assert at_limit.dead_letter_reason == DeadLetterReason.INVALID_MESSAGE  # parsed, refused
