"""Delayed retries (`exactly_once.delayed_retries`) on our Service Bus and Cosmos DB emulators
through the real SDKs: a downstream brownout longer than the in-place budget is outlasted by
scheduled copies, one effect per message; a downstream that never comes back is dead-lettered
after the configured retries with what failed and how often; a copy scheduled on a topic does
not reach a sibling subscription's effect; and a completion that fails after the copy was
scheduled leaves two messages and still one effect.

The consumer is written as the guide shows (a `two_phase` call to a provider that takes a key,
whose `ConnectionError` the effect lets propagate). The "10-minute" brownout runs at seconds by
settings: an in-place budget of about 1 s and delayed retries 1 s apart. The queue has
MaxDeliveryCount 1, so any abandon (a delivery spent) would dead-letter a message at once:
"nothing dead-lettered" proves that every failed delivery was retried later instead.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusError
from core_support import RunningWorker, poll, unique
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from poison_corpus import core_hostile_retry_properties

from exactly_once import (
    Backoff,
    ConsumerOptions,
    CosmosStore,
    Decision,
    DelayedRetries,
    Effects,
    Outcome,
    exactly_once,
)
from exactly_once.decisions import Settlement
from exactly_once.delayed_retries import SUBSCRIPTION_PROPERTY, CopyScheduler, original_message_id
from exactly_once.telemetry import Telemetry
from exactly_once.worker import WorkerOptions
from servicebus_emulator import RunningEmulator, start_in_background

QUEUE, TOPIC = "payments", "events"
# A queue whose messages may come back once more than a copy: a lost lock spends a delivery.
REDELIVERED = "refunds"
BILLING, AUDIT, ARCHIVE = "billing", "audit", "archive"
IN_PLACE = Backoff(first_delay_seconds=0.1, max_delay_seconds=0.3, budget_seconds=1.0)


def entity(name: str, deliveries: int = 1, **rules: Any) -> dict[str, Any]:
    """A queue or subscription: one delivery per message (unless told), a short lock, no
    duplicate detection (correctness must not depend on it)."""
    return {
        "Name": name,
        "Properties": {
            "DeadLetteringOnMessageExpiration": True,
            "DefaultMessageTimeToLive": "PT1H",
            "LockDuration": "PT5S",
            "MaxDeliveryCount": deliveries,
            "RequiresSession": False,
        },
        **rules,
    }


def only_its_own_copies(subscription: str) -> dict[str, Any]:
    """The rule the orders app's Bicep and emulator config give each subscription: every
    message, except a delayed retry's copy addressed to another subscription."""
    expression = f"{SUBSCRIPTION_PROPERTY} IS NULL OR {SUBSCRIPTION_PROPERTY} = '{subscription}'"
    return {
        "Rules": [
            {
                "Name": "own-copies",
                "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}},
            }
        ]
    }


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    """A queue, and a topic whose `archive` subscription has the filter rule (the others take
    everything, as a subscription without rules does)."""
    topic = {
        "Name": TOPIC,
        "Properties": {},
        "Subscriptions": [
            entity(BILLING),
            entity(AUDIT),
            entity(ARCHIVE, **only_its_own_copies(ARCHIVE)),
        ],
    }
    namespace = {
        "Name": "sbemulatorns",
        "Queues": [entity(QUEUE), entity(REDELIVERED, deliveries=10)],
        "Topics": [topic],
    }
    running = start_in_background(
        config={"UserConfig": {"Namespaces": [namespace], "Logging": {"Type": "Console"}}}
    )
    yield running
    running.stop()


class Provider:
    """A payment provider that deduplicates on the key it is given, unreachable while down."""

    def __init__(self) -> None:
        self.charged: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.down = True
        self.before_failing: Callable[[], Awaitable[None]] | None = None

    async def charge(self, key: str, amount: int) -> str:
        if self.down:
            self.failed[key] += 1
            if self.before_failing is not None:
                await self.before_failing()
            raise ConnectionError("payment provider unreachable")
        self.charged[key] += 1
        return f"charge-{key}-{amount}"


def parse_payment(body: bytes) -> dict[str, Any]:
    payment = json.loads(body)
    return {"customer": str(payment["customer"]), "amount": int(payment["amount"])}


def paying(provider: Provider) -> Callable[[dict[str, Any], Effects], Awaitable[Outcome]]:
    """The effect, as the guide writes one: two phases around a call that takes a key; the
    provider's error propagates."""

    async def pay(payment: dict[str, Any], effects: Effects) -> Outcome:
        async def call(downstream_key: str) -> str:
            return await provider.charge(downstream_key, payment["amount"])

        done = await effects.two_phase(call)
        return done.outcome

    return pay


def payment(number: int) -> ServiceBusMessage:
    body = json.dumps({"customer": f"c{number % 2}", "amount": 10 + number})
    return ServiceBusMessage(
        body,
        message_id=unique(f"pay{number}"),
        content_type="application/json",
        subject="PaymentRequested",
        correlation_id=f"order-{number}",
        application_properties={"tenant": "contoso"},
    )


async def send(emulator: RunningEmulator, entity_name: str, messages: list[Any]) -> None:
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        sender = (
            client.get_topic_sender(entity_name)
            if entity_name == TOPIC
            else client.get_queue_sender(entity_name)
        )
        async with sender:
            await sender.send_messages(messages)


async def peeked(
    emulator: RunningEmulator,
    *,
    queue: str = QUEUE,
    subscription: str | None = None,
    dead: bool = False,
) -> list[ServiceBusReceivedMessage]:
    """Every message the queue (or the topic's subscription) holds, active and scheduled, or
    its dead letters."""
    sub_queue = ServiceBusSubQueue.DEAD_LETTER if dead else None
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        receiver = (
            client.get_subscription_receiver(TOPIC, subscription, sub_queue=sub_queue)
            if subscription is not None
            else client.get_queue_receiver(queue, sub_queue=sub_queue)
        )
        async with receiver:
            return list(await receiver.peek_messages(max_message_count=100, sequence_number=1))


def options(delayed: DelayedRetries) -> WorkerOptions:
    return WorkerOptions(concurrency=4, backoff=IN_PLACE, delayed_retries=delayed)


@pytest.mark.slow
async def test_a_brownout_longer_than_the_budget_is_outlasted_by_delayed_retries(
    emulator: RunningEmulator, store: CosmosStore
) -> None:
    provider = Provider()
    consumer = exactly_once(consumer="payments", parse=parse_payment, store=store)(paying(provider))
    sent = [payment(number) for number in range(5)]
    # Each original's deliveries, by the MessageId they came under (a copy's is its own).
    deliveries: dict[str, set[str]] = {str(message.message_id): set() for message in sent}

    async def handle(message: ServiceBusReceivedMessage) -> Decision:
        deliveries[str(original_message_id(message))].add(str(message.message_id))
        return await consumer.decide_message(message)

    await send(emulator, QUEUE, sent)
    worker = RunningWorker(
        emulator,
        handle,
        queue_name=QUEUE,
        # The defaults' shape (3 retries, n x delay apart), at seconds for minutes.
        options=options(DelayedRetries(retries=3, delay_seconds=1.0)),
    )

    # The brownout lasts until every message came back as its second copy: longer than two
    # in-place budgets, and each copy a delivery that MaxDeliveryCount 1 allows only once.
    async def brownout_over() -> bool:
        return all(len(seen) >= 3 for seen in deliveries.values())

    await poll(brownout_over, within=60, what="two delayed retries of every message")
    provider.down = False

    async def drained() -> bool:
        return len(provider.charged) == len(sent) and not await peeked(emulator)

    await poll(drained, within=60, what="every payment charged and the queue drained")
    stats = await worker.stopped()

    assert await peeked(emulator, dead=True) == []
    # One charge per message, under one key each, though each failed on several deliveries.
    assert sorted(provider.charged.values()) == [1] * len(sent)
    assert all(count >= 2 for count in provider.failed.values())
    assert stats.settlement_failures == 0
    assert stats.received == stats.settled >= 3 * len(sent)  # the original and two copies


@pytest.mark.slow
async def test_a_downstream_that_never_returns_is_dead_lettered_after_the_retries_with_why(
    emulator: RunningEmulator, store: CosmosStore
) -> None:
    provider = Provider()  # down for good
    consumer = exactly_once(consumer="payments", parse=parse_payment, store=store)(paying(provider))
    sent = [payment(number) for number in range(2)]
    await send(emulator, QUEUE, sent)
    worker = RunningWorker(
        emulator,
        consumer.decide_message,
        queue_name=QUEUE,
        options=options(DelayedRetries(retries=2, delay_seconds=0.5)),
    )

    async def both_dead() -> bool:
        return len(await peeked(emulator, dead=True)) == len(sent)

    await poll(both_dead, within=60, what="both payments dead-lettered")
    stats = await worker.stopped()
    dead = await peeked(emulator, dead=True)

    assert provider.charged == Counter()
    assert stats.received == 3 * len(sent)  # the original and its two copies
    by_original = {str(original_message_id(message)): message for message in dead}
    assert sorted(by_original) == sorted(str(message.message_id) for message in sent)
    for original in sent:
        letter = by_original[str(original.message_id)]
        assert letter.dead_letter_reason == "RetriesExhausted"
        description = letter.dead_letter_error_description or ""
        assert re.fullmatch(
            r"(transient|unexpected)_failure after 2 delayed retries and \d+ attempt\(s\) in "
            r"the last delivery: ConnectionError: payment provider unreachable",
            description,
        ), description
        # The copy kept what the producer sent.
        assert b"".join(letter.body) == b"".join(original.body)
        assert letter.content_type == "application/json"
        assert letter.subject == "PaymentRequested"
        assert letter.correlation_id == original.correlation_id
        assert letter.application_properties is not None
        assert letter.application_properties[b"tenant"] in (b"contoso", "contoso")
        assert letter.message_id != original.message_id


@pytest.mark.slow
async def test_a_copy_on_a_subscription_does_not_reach_a_sibling_subscriptions_effect(
    emulator: RunningEmulator, store: CosmosStore
) -> None:
    billing_provider = Provider()
    billing = exactly_once(consumer="billing", parse=parse_payment, store=store)(
        paying(billing_provider)
    )
    audit_runs: Counter[str] = Counter()

    async def audit_effect(payment: dict[str, Any], effects: Effects) -> Outcome:
        audit_runs[effects.key] += 1
        return await effects.inbox(payment["customer"], [{"id": f"audit-{effects.key}"}])

    audit = exactly_once(consumer="audit", parse=parse_payment, store=store)(audit_effect)

    sent = [payment(number) for number in range(3)]
    await send(emulator, TOPIC, sent)

    def worker_on(subscription: str, handle: Any) -> RunningWorker:
        delayed = options(DelayedRetries(retries=3, delay_seconds=0.5))
        return RunningWorker(
            emulator, handle, topic_name=TOPIC, subscription_name=subscription, options=delayed
        )

    # Each original's deliveries to billing, by the MessageId they came under (a copy's is its
    # own): the provider stays down until each has come back as a copy at least once (a
    # failure the in-place backoff outlasts schedules none).
    billing_deliveries: dict[str, set[str]] = {str(message.message_id): set() for message in sent}

    async def billing_handle(message: ServiceBusReceivedMessage) -> Decision:
        billing_deliveries[str(original_message_id(message))].add(str(message.message_id))
        return await billing.decide_message(message)

    billing_worker = worker_on(BILLING, billing_handle)

    async def each_came_back_as_a_copy() -> bool:
        return all(len(ids) >= 2 for ids in billing_deliveries.values())

    await poll(each_came_back_as_a_copy, within=30, what="billing's copy of each payment")
    billing_provider.down = False
    audit_worker = worker_on(AUDIT, audit.decide_message)

    async def all_settled() -> bool:
        return (
            len(billing_provider.charged) == len(sent)
            and not await peeked(emulator, subscription=BILLING)
            and not await peeked(emulator, subscription=AUDIT)
        )

    await poll(all_settled, within=60, what="billing charging and audit draining")
    audit_stats = await audit_worker.stopped()
    await billing_worker.stopped()

    # Audit received each original and each of billing's copies, but ran its effect for the
    # originals only: the copies were billing's, completed as not its own.
    copies = sum(len(ids) - 1 for ids in billing_deliveries.values())
    assert copies >= len(sent)
    assert audit_stats.received == len(sent) + copies == audit_stats.settled
    assert sorted(audit_runs.values()) == [1] * len(sent)
    assert sorted(billing_provider.charged.values()) == [1] * len(sent)
    # The subscription with the filter rule never received billing's copies.
    archived = await peeked(emulator, subscription=ARCHIVE)
    assert sorted(str(message.message_id) for message in archived) == sorted(
        str(message.message_id) for message in sent
    )
    for name in (BILLING, AUDIT, ARCHIVE):
        assert await peeked(emulator, subscription=name, dead=True) == []


@pytest.mark.slow
async def test_a_completion_that_fails_after_the_copy_was_scheduled_is_still_one_effect(
    emulator: RunningEmulator, store: CosmosStore
) -> None:
    provider = Provider()
    consumer = exactly_once(
        consumer="payments",
        parse=parse_payment,
        store=store,
        options=ConsumerOptions(delayed_retries=DelayedRetries(retries=3, delay_seconds=1.0)),
    )(paying(provider))
    [sent] = [payment(1)]
    await send(emulator, REDELIVERED, [sent])
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        scheduler = CopyScheduler(client, REDELIVERED)
        first = client.get_queue_receiver(REDELIVERED)
        await first.__aenter__()
        [message] = await first.receive_messages(max_message_count=1, max_wait_time=10)

        # The link drops while the provider fails: the copy is scheduled on its own link,
        # then completing the original on the dropped one fails.
        async def link_drops() -> None:
            provider.before_failing = None
            await first.close()

        provider.before_failing = link_drops
        with pytest.raises((ServiceBusError, ValueError)):
            await consumer.with_receiver(message, first, scheduler=scheduler)
        assert sum(provider.failed.values()) == 1
        provider.down = False

        # Both come back: the original (its lock released with the link) and the copy.
        outcomes: list[str] = []
        async with client.get_queue_receiver(REDELIVERED) as second:
            deadline = time.monotonic() + 30
            while len(outcomes) < 2 and time.monotonic() < deadline:
                for received in await second.receive_messages(max_message_count=2, max_wait_time=1):
                    decision = await consumer.with_receiver(received, second, scheduler=scheduler)
                    outcomes.append(str(decision.outcome))
        await scheduler.close()

    assert outcomes == ["processed", "duplicate"]
    assert list(provider.charged.values()) == [1]
    assert await peeked(emulator, queue=REDELIVERED) == []
    assert await peeked(emulator, queue=REDELIVERED, dead=True) == []


async def test_forged_retry_properties_are_dead_lettered_on_the_first_delivery_and_never_run(
    emulator: RunningEmulator, store: CosmosStore
) -> None:
    provider = Provider()
    provider.down = False
    consumer = exactly_once(consumer="payments", parse=parse_payment, store=store)(paying(provider))
    cases = core_hostile_retry_properties()
    sent: list[ServiceBusMessage] = []
    for name, properties in cases:
        message = payment(len(sent))
        message.message_id = unique(name)
        message.application_properties = dict(properties)
        sent.append(message)
    await send(emulator, QUEUE, sent)
    worker = RunningWorker(
        emulator,
        consumer.decide_message,
        queue_name=QUEUE,
        options=options(DelayedRetries(retries=3, delay_seconds=1.0)),
    )

    async def all_dead() -> bool:
        return len(await peeked(emulator, dead=True)) == len(cases)

    await poll(all_dead, within=60, what="every forged message dead-lettered")
    stats = await worker.stopped()
    dead = await peeked(emulator, dead=True)

    assert stats.received == len(cases)  # each on its first delivery, none retried later
    assert provider.charged == Counter() and provider.failed == Counter()
    assert {letter.dead_letter_reason for letter in dead} == {"InvalidRetryProperties"}
    assert all("ExactlyOnce" in (letter.dead_letter_error_description or "") for letter in dead)
    assert sorted(str(letter.message_id) for letter in dead) == sorted(
        str(message.message_id) for message in sent
    )


async def test_a_forged_original_message_id_is_judged_as_that_message_and_gains_nothing(
    emulator: RunningEmulator, store: CosmosStore
) -> None:
    """What a sender gains by naming another message as its original: what sending under that
    MessageId gives, a duplicate of it (and a mismatch with another body), never a second
    effect."""
    provider = Provider()
    provider.down = False
    consumer = exactly_once(consumer="payments", parse=parse_payment, store=store)(paying(provider))
    genuine = payment(1)
    forged_same, forged_other = payment(1), payment(2)
    for forged in (forged_same, forged_other):
        forged.application_properties = {
            "ExactlyOnceOriginalMessageId": genuine.message_id,
            "ExactlyOnceRetry": 3,  # its last: failing now would dead-letter only itself
        }
    await send(emulator, QUEUE, [genuine])
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_receiver(QUEUE) as receiver:
            [first] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            decided = [await consumer.with_receiver(first, receiver)]
        await send(emulator, QUEUE, [forged_same, forged_other])
        async with client.get_queue_receiver(QUEUE) as receiver:
            while len(decided) < 3:
                for message in await receiver.receive_messages(
                    max_message_count=2, max_wait_time=5
                ):
                    decided.append(await consumer.with_receiver(message, receiver))

    assert [str(decision.outcome) for decision in decided] == ["processed", "duplicate", "mismatch"]
    assert list(provider.charged.values()) == [1]


async def test_a_delayed_retry_is_a_completed_delivery_on_its_span(
    emulator: RunningEmulator, store: CosmosStore
) -> None:
    """The span of a delivery retried later says what was settled: the delivery completed
    (its copy scheduled), not the abandon its last attempt decided, and why it was not
    processed (error.type, the outcome)."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    provider = Provider()
    consumer = exactly_once(
        consumer="payments",
        parse=parse_payment,
        store=store,
        options=ConsumerOptions(
            telemetry=Telemetry(tracer_provider=tracer_provider),
            delayed_retries=DelayedRetries(retries=3, delay_seconds=60.0),
        ),
    )(paying(provider))
    await send(emulator, QUEUE, [payment(1)])
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        scheduler = CopyScheduler(client, QUEUE)
        async with client.get_queue_receiver(QUEUE) as receiver:
            [message] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            decision = await consumer.with_receiver(message, receiver, scheduler=scheduler)
        await scheduler.close()

    assert decision.settlement == Settlement.RETRY_LATER
    [span] = spans.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["exactly_once.settlement"] == "retry_later"
    assert attributes["messaging.servicebus.disposition_status"] == "complete"
    assert attributes["error.type"] == "transient_failure"
