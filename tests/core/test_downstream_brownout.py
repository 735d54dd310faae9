"""A downstream brownout and a failed completion, through the library's own worker, on our
emulators and the real SDKs (issue 43).

The consumer is written as the guide shows a two-phase effect: it lets the provider's
`ConnectionError` propagate. Before, that was an unexpected failure, abandoned at once: 5
messages, MaxDeliveryCount 5 and a 20 s brownout dead-lettered all 5 within seconds. Now it is
a transient failure, backed off in place with the lock renewed: nothing is dead-lettered, each
message takes one delivery, and each text is sent once.

The brownout is the 20 s one at the default backoff, both scaled by 1/4 by settings (5 s down;
delays of 0.125 s doubling up to 3.75 s, a budget of 30 s): the same number of waits, a
quarter of the time. The provider is down until a deadline on the wall clock.

A retry of one delivery is the same owner: a completion write that fails leaves the claim in
progress under a live 30 s lease; the retry, in the same delivery (its lock token), takes its
own claim back at once and records the answer its first attempt got, without calling the
provider again and without waiting out the lease.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.servicebus import ServiceBusReceivedMessage
from brownouts import BROWNOUT_SECONDS, SCALED_BACKOFF
from core_support import RunningWorker, dead_letters, poll, queue_config, send_bodies, unique

from cosmos_emulator import RunningCosmosEmulator, start_in_background
from exactly_once import (
    ConsumerOptions,
    CosmosStore,
    Decision,
    Effects,
    ExactlyOnceConsumer,
    Outcome,
    exactly_once,
)
from exactly_once._orchestrator import key_partition_of, safe_id
from exactly_once.store import RecordStatus
from exactly_once.worker import WorkerOptions
from servicebus_emulator import RunningEmulator
from servicebus_emulator import start_in_background as start_servicebus

QUEUE = "texts"
CONSUMER = "texts"


class TextProvider:
    """Stands in for a provider that deduplicates on its key, unreachable until `back_at`."""

    def __init__(self, down_seconds: float = 0.0) -> None:
        self.back_at = time.monotonic() + down_seconds
        self.unreachable = 0
        self.sent: dict[str, str] = {}
        self.calls = Counter[str]()  # calls that reached it, by key

    async def send(self, key: str, text: str) -> str:
        if time.monotonic() < self.back_at:
            self.unreachable += 1
            raise ConnectionError("the text provider is unreachable")
        self.calls[key] += 1
        self.sent.setdefault(key, text)
        return f"sms-{key}"


def parse_text(body: bytes) -> dict[str, str]:
    text = json.loads(body)
    return {"user": str(text["user"]), "text": str(text["text"])}


def texting(store: CosmosStore, provider: TextProvider) -> ExactlyOnceConsumer[dict[str, str]]:
    """The guide's two-phase consumer: the provider's errors propagate."""

    @exactly_once(
        consumer=CONSUMER,
        parse=parse_text,
        store=store,
        options=ConsumerOptions(owner="texts-host"),
    )
    async def text_user(text: dict[str, str], effects: Effects) -> Outcome:
        async def call(downstream_key: str) -> str:
            return await provider.send(downstream_key, text["text"])

        done = await effects.two_phase(call)
        return done.outcome

    return text_user


@pytest.fixture
def cosmos() -> Iterator[RunningCosmosEmulator]:
    """An emulator of this module's own: its faults must not reach any other test."""
    with start_in_background("127.0.0.1", 0) as emulator:
        yield emulator


@pytest.fixture
async def records(cosmos: RunningCosmosEmulator) -> AsyncIterator[ContainerProxy]:
    async with CosmosClient(cosmos.url, credential=cosmos.key) as client:
        database = await client.create_database_if_not_exists("texts")
        yield await database.create_container_if_not_exists(
            id=unique("records"), partition_key=PartitionKey(path="/pk"), default_ttl=-1
        )


@pytest.fixture
def servicebus() -> Iterator[RunningEmulator]:
    running = start_servicebus(
        config=queue_config(QUEUE, max_delivery_count=5, lock_duration="PT5S")
    )
    yield running
    running.stop()


def bodies(count: int) -> dict[str, str]:
    return {
        unique("text"): json.dumps({"user": f"u{number}", "text": f"hello {number}"})
        for number in range(count)
    }


@pytest.mark.slow
async def test_a_20_s_downstream_brownout_dead_letters_nothing_and_sends_each_text_once(
    records: ContainerProxy, servicebus: RunningEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    provider = TextProvider(down_seconds=BROWNOUT_SECONDS)
    consumer = texting(CosmosStore(records), provider)
    sent = bodies(5)

    with caplog.at_level(logging.INFO, logger="exactly_once"):
        await send_bodies(servicebus, QUEUE, sent)
        worker = RunningWorker(
            servicebus,
            consumer.decide_message,
            queue_name=QUEUE,
            options=WorkerOptions(concurrency=5, backoff=SCALED_BACKOFF),
        )

        async def all_sent() -> bool:
            return len(provider.sent) == len(sent)

        await poll(all_sent, within=60, what="every text sent")
        stats = await worker.stopped()
    dead = await dead_letters(servicebus, QUEUE)

    assert dead == []
    assert provider.unreachable >= len(sent)  # every message met the brownout
    assert sorted(provider.calls.values()) == [1] * len(sent)  # each text sent once
    assert sorted(provider.sent) == sorted(f"{CONSUMER}:{message_id}" for message_id in sent)
    # One delivery each: no abandon spent a delivery.
    assert (stats.received, stats.settled, stats.settlement_failures) == (len(sent), len(sent), 0)
    # The operator's view: each wait says it waits; one outcome line per message, its final one.
    waits = [r.getMessage() for r in caplog.records if r.name == "exactly_once.backoff"]
    outcomes = [r.getMessage() for r in caplog.records if r.name == "exactly_once.outcomes"]
    assert len(waits) >= len(sent)
    assert all(
        line.startswith("backing off, deciding again in ") and f"consumer={CONSUMER} " in line
        for line in waits
    )
    assert {line.split(" key=")[1].split()[0] for line in waits} == set(sent)
    assert sorted(line.split(" key=")[1].split()[0] for line in outcomes) == sorted(sent)
    assert all("outcome=processed settlement=complete attempts=" in line for line in outcomes)
    assert not [r for r in caplog.records if r.exc_info]  # a brownout is no bug: no traceback


async def test_a_retry_of_one_delivery_finishes_its_own_claim_without_waiting_out_its_lease(
    cosmos: RunningCosmosEmulator,
    records: ContainerProxy,
    servicebus: RunningEmulator,
) -> None:
    provider = TextProvider()
    store = CosmosStore(records)
    consumer = texting(store, provider)
    [message_id] = sent = bodies(1)
    deliveries: list[str] = []

    async def handle(message: ServiceBusReceivedMessage) -> Decision:
        deliveries.append(str(message.lock_token))
        return await consumer.decide_message(message)

    # The completion write (a replace If-Match) fails: the claim stays in progress, its 30 s
    # lease live, after the provider has answered.
    cosmos.inject_fault(status=503, count=2, operation="Replace")
    record_key = safe_id(f"two-phase:{CONSUMER}:{message_id}")
    partition = key_partition_of(CONSUMER, message_id)

    async def completed() -> bool:
        found = await store.read(record_key, partition)
        return found.record is not None and found.record.status is RecordStatus.COMPLETED

    started = time.monotonic()
    await send_bodies(servicebus, QUEUE, sent)
    worker = RunningWorker(
        servicebus,
        handle,
        queue_name=QUEUE,
        options=WorkerOptions(backoff=SCALED_BACKOFF),
    )
    await poll(completed, within=60, what="the text's record completed")
    took = time.monotonic() - started
    stats = await worker.stopped()

    assert cosmos.pending_faults() == []  # the completion failed (twice), then succeeded
    assert took < 10.0  # not the 30 s lease a stranger's claim is waited for
    assert provider.calls == {f"{CONSUMER}:{message_id}": 1}  # the answer kept, not asked again
    # Several attempts, one delivery, one owner: the delivery's lock token names it.
    assert len(deliveries) >= 2 and len(set(deliveries)) == 1
    found = await store.read(record_key, partition)
    assert found.record is not None and found.record.owner == f"texts-host/{deliveries[0]}"
    assert (stats.received, stats.settled) == (1, 1)
    assert await dead_letters(servicebus, QUEUE) == []
