"""The poison corpus through the exactly_once core (tests/poison_corpus.py, its core section).

Messages travel through our Service Bus emulator and the real SDK, and are settled through the
SDK receiver: each poison message is dead-lettered with its reason on its first delivery (the
parser never sees a body the core bounds), a valid message with a hostile MessageId is
processed once and its resend is a duplicate. The `Idempotency-Key` dependency answers every
hostile header shape with a 400, never a guess; its request hash takes every body or refuses
it by size first. A stored record with a field missing or mistyped is the core's
`CorruptRecordError`, and the consumer dead-letters its message with that reason.

No timings are asserted: `scripts/bench_core_poison.py` prints what each case costs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from azure.cosmos.aio import ContainerProxy
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.amqp import AmqpAnnotatedMessage
from core_support import QUEUE, unique
from fastapi.responses import JSONResponse
from idempotency_app import app_for
from poison_corpus import (
    CORE_MAX_BODY_BYTES,
    CORE_NO_ID,
    CORE_NOT_DATA,
    CORE_TOO_LARGE,
    MISSING,
    HeaderCase,
    PoisonCase,
    core_hostile_message_ids,
    core_parse,
    core_parseable_hostile_bodies,
    core_poison_cases,
    corrupt_record_cases,
    corrupt_response_cases,
    greeting_body,
    idempotency_key_body_cases,
    idempotency_key_header_cases,
    nested,
)
from sdk_messages import received_message

from exactly_once import (
    ConsumerOptions,
    CosmosStore,
    Decision,
    Effects,
    ExactlyOnceConsumer,
    Outcome,
    exactly_once,
)
from exactly_once._idempotency_key import IdempotencyKeys, KeyClaim
from exactly_once._orchestrator import key_partition_of, safe_id
from exactly_once._records import body_fingerprint
from exactly_once.decisions import DeadLetterReason, Settlement
from exactly_once.exceptions import CorruptRecordError
from exactly_once.store import Record, RecordStatus
from orders.domain.received import BodyKind
from servicebus_emulator import RunningEmulator

CONSUMER = "greetings"
PARTITION = "greetings"


class CountingParser:
    """`core_parse`, counting the bodies it was handed (a bound must come before it)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, body: bytes) -> dict[str, Any]:
        self.bodies.append(body)
        return core_parse(body)


async def store_greeting(greeting: dict[str, Any], effects: Effects) -> Outcome:
    """The effect: one document in the inbox's batch (so the MessageId names a record)."""
    document = {"id": uuid.uuid4().hex, "text": greeting["text"]}
    return await effects.inbox(PARTITION, [document])


def consumer_over(store: CosmosStore, parse: CountingParser) -> ExactlyOnceConsumer[Any]:
    return exactly_once(
        consumer=CONSUMER,
        parse=parse,
        store=store,
        options=ConsumerOptions(max_body_bytes=CORE_MAX_BODY_BYTES),
    )(store_greeting)


def sdk_message(case: PoisonCase) -> ServiceBusMessage | AmqpAnnotatedMessage:
    # The two message types annotate their application properties differently.
    properties: dict[Any, Any] = {"case": case.name}
    if case.body_kind is BodyKind.DATA:
        return ServiceBusMessage(
            case.body, message_id=case.message_id, application_properties=properties
        )
    body = (
        {"value_body": case.value}
        if case.body_kind is BodyKind.VALUE
        else {"sequence_body": case.value}
    )
    return AmqpAnnotatedMessage(
        **body,
        properties={"message_id": case.message_id},
        application_properties=properties,
    )


async def drain(
    emulator: RunningEmulator, consumer: ExactlyOnceConsumer[Any]
) -> list[tuple[ServiceBusReceivedMessage, Decision]]:
    """Receive until the queue is empty, deciding and settling each delivery."""
    seen: list[tuple[ServiceBusReceivedMessage, Decision]] = []
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE, max_wait_time=2) as receiver,
    ):
        while batch := await receiver.receive_messages(max_message_count=20, max_wait_time=2):
            for message in batch:
                seen.append((message, await consumer.with_receiver(message, receiver)))
    return seen


async def send(
    emulator: RunningEmulator, *messages: ServiceBusMessage | AmqpAnnotatedMessage
) -> None:
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_sender(QUEUE) as sender,
    ):
        for message in messages:  # one by one: together they exceed a batch's 256 KB
            await sender.send_messages(message)


def case_name(message: ServiceBusReceivedMessage) -> str:
    """The corpus case a message was sent as (its "case" application property)."""
    name = (message.application_properties or {}).get(b"case")
    return name.decode() if isinstance(name, bytes) else str(name)


async def dead_lettered(emulator: RunningEmulator) -> dict[str, str | None]:
    """Case name (an application property) -> dead-letter reason, for the whole DLQ."""
    found: dict[str, str | None] = {}
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver,
    ):
        # A peek may return fewer than asked for; it continues where the last one ended.
        while peeked := await receiver.peek_messages(max_message_count=50):
            for message in peeked:
                found[case_name(message)] = message.dead_letter_reason
    return found


# --- messages ---------------------------------------------------------------------------------


async def test_every_core_poison_message_is_dead_lettered_with_its_reason_on_first_delivery(
    store: CosmosStore, servicebus: RunningEmulator
) -> None:
    # A message without a MessageId cannot be sent: the SDK and the emulator give it one (the
    # test after this one delivers it as the Functions binding would).
    cases = [case for case in core_poison_cases(unique("p")) if case.message_id is not None]
    parse = CountingParser()
    consumer = consumer_over(store, parse)
    valid = PoisonCase("valid-after-the-poison", "", greeting_body(), unique("valid"))

    await send(servicebus, *(sdk_message(case) for case in [*cases, valid]))
    seen = await drain(servicebus, consumer)

    # Each message delivered once: a dead letter at once, never an abandon loop.
    decisions = {case_name(message): decision for message, decision in seen}
    assert len(seen) == len(decisions) == len(cases) + 1
    assert await dead_lettered(servicebus) == {case.name: case.reason for case in cases}
    for case in cases:
        assert decisions[case.name].outcome is Outcome.REJECTED, case.name
        assert 0 < len(decisions[case.name].dead_letter_description or "") <= 1024, case.name
    # The consumer stays up: the valid message after the poison is processed.
    assert decisions[valid.name] == Decision.complete(Outcome.PROCESSED)
    # The bounds come before the parser: it never saw a body too large, nor one not data.
    bounded = [case for case in cases if case.reason in (CORE_TOO_LARGE, CORE_NOT_DATA)]
    assert {case.reason for case in bounded} == {CORE_TOO_LARGE, CORE_NOT_DATA}
    assert max(len(body) for body in parse.bodies) <= CORE_MAX_BODY_BYTES
    assert len(parse.bodies) == len(cases) - len(bounded) + 1


CORE_CASES = core_poison_cases("fn")


@pytest.mark.parametrize("case", CORE_CASES, ids=[case.name for case in CORE_CASES])
async def test_every_core_poison_message_is_rejected_as_the_functions_binding_delivers_it(
    store: CosmosStore, case: PoisonCase
) -> None:
    """The SDK's own `ServiceBusReceivedMessage`, built as the SDK-type binding builds it
    (data, value or sequence body; a MessageId or none), through `decide_message`."""
    parse = CountingParser()
    consumer = consumer_over(store, parse)
    if case.body_kind is BodyKind.VALUE:
        message = received_message(case.message_id, value=case.value)
    elif case.body_kind is BodyKind.SEQUENCE:
        message = received_message(case.message_id, sequence=case.value)
    else:
        message = received_message(case.message_id, data=case.body)

    decision = await consumer.decide_message(message)

    assert (decision.outcome, decision.dead_letter_reason) == (Outcome.REJECTED, case.reason)
    if case.reason in (CORE_TOO_LARGE, CORE_NOT_DATA, CORE_NO_ID):
        assert parse.bodies == []


@pytest.mark.slow
async def test_a_valid_message_with_a_hostile_message_id_is_processed_once(
    store: CosmosStore, servicebus: RunningEmulator, container: ContainerProxy
) -> None:
    """Ids Cosmos DB refuses (or that forge log lines) name the records hashed, so the message
    is processed, and its resend is a duplicate, not a store error on every delivery."""
    ids = core_hostile_message_ids(unique("h"))
    consumer = consumer_over(store, CountingParser())
    messages = [
        ServiceBusMessage(
            greeting_body(), message_id=message_id, application_properties={"case": name}
        )
        for name, message_id in ids
    ]

    await send(servicebus, *messages)
    first = await drain(servicebus, consumer)
    await send(servicebus, *messages)
    again = await drain(servicebus, consumer)

    assert sorted(decision.outcome for _, decision in first) == [Outcome.PROCESSED] * len(ids)
    assert sorted(decision.outcome for _, decision in again) == [Outcome.DUPLICATE] * len(ids)
    stored_ids = {
        item["id"]
        async for item in container.query_items(
            "SELECT c.id FROM c WHERE c.type = 'exactlyOnceInbox'", partition_key=PARTITION
        )
    }
    assert stored_ids == {safe_id(f"inbox:{CONSUMER}:{message_id}") for _, message_id in ids}
    assert all(record_id.startswith("inbox:") and len(record_id) <= 255 for record_id in stored_ids)


@pytest.mark.parametrize(
    ("name", "body"), [pytest.param(*case, id=case[0]) for case in core_parseable_hostile_bodies()]
)
async def test_a_body_the_parser_accepts_has_a_request_hash_however_hostile(
    store: CosmosStore, name: str, body: bytes
) -> None:
    """The request hash decodes the body again; it raised on a lone surrogate, which ended as
    an unexpected failure (abandoned) on every delivery."""
    consumer = consumer_over(store, CountingParser())
    message_id = unique(name)

    first = await consumer.decide(body, message_id)
    again = await consumer.decide(body, message_id)

    assert (first.outcome, again.outcome) == (Outcome.PROCESSED, Outcome.DUPLICATE)


@pytest.mark.parametrize("message_id", ["", "m" * 100_000, "m\nforged", "\ud800"])
async def test_message_ids_the_broker_cannot_carry_are_handled_when_decide_is_called_directly(
    store: CosmosStore, message_id: str
) -> None:
    """`decide` is public: a host of one's own may pass any id (Service Bus caps it at 128)."""
    consumer = consumer_over(store, CountingParser())

    decision = await consumer.decide(greeting_body(), message_id)

    if message_id:
        assert decision.outcome is Outcome.PROCESSED
    else:
        assert decision.dead_letter_reason == DeadLetterReason.MISSING_MESSAGE_ID


async def test_an_unexpected_failure_logs_a_hostile_message_id_on_one_line(
    store: CosmosStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(greeting: dict[str, Any], effects: Effects) -> Outcome:
        raise KeyError("a bug")

    consumer = exactly_once(consumer=CONSUMER, parse=core_parse, store=store)(broken)
    forged = "m-1\nERROR greetings: forged line"

    with caplog.at_level(logging.ERROR, logger="exactly_once"):
        decision = await consumer.decide(greeting_body(), forged)

    assert decision.settlement is Settlement.ABANDON
    [record] = caplog.records
    assert "\n" not in record.getMessage()
    assert json.dumps(forged) in record.getMessage()


def test_deep_nesting_is_hashed_as_bytes_not_decoded() -> None:
    """The hash's decoder stops at its depth bound at once (the bytes are hashed instead); the
    consumer's size bound comes before it (above). What it costs: scripts/bench_core_poison.py."""
    deep = nested(100_000).encode()

    assert body_fingerprint(deep) == hashlib.sha256(deep).hexdigest()


# --- the Idempotency-Key dependency -----------------------------------------------------------

BODY_BOUND = 256 * 1024


class Endpoint:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, claim: KeyClaim) -> JSONResponse:
        if claim.replay is not None:
            return claim.replay
        self.runs += 1
        return await claim.complete(201, {"run": self.runs})


@pytest.fixture
async def http(store: CosmosStore) -> AsyncIterator[tuple[httpx.AsyncClient, Endpoint]]:
    endpoint = Endpoint()
    keys = IdempotencyKeys(store, scope="things", max_body_bytes=BODY_BOUND)
    transport = httpx.ASGITransport(app=app_for(keys, endpoint), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client, endpoint


HEADER_CASES = idempotency_key_header_cases()


@pytest.mark.parametrize("case", HEADER_CASES, ids=[case.name for case in HEADER_CASES])
async def test_every_hostile_idempotency_key_header_is_refused_before_the_endpoint_runs(
    http: tuple[httpx.AsyncClient, Endpoint], case: HeaderCase
) -> None:
    client, endpoint = http

    refused = await client.post("/things", content=b"{}", headers=case.headers)
    after = await client.post("/things", content=b"{}", headers={"Idempotency-Key": unique("k")})

    assert refused.status_code == case.status
    assert "Idempotency-Key" in refused.json()["detail"]
    assert endpoint.runs == 1  # only the request after it ran: the app stays up
    assert after.status_code == 201


BODY_CASES = idempotency_key_body_cases(BODY_BOUND)


@pytest.mark.parametrize(
    ("name", "body", "status"), [pytest.param(*case, id=case[0]) for case in BODY_CASES]
)
async def test_every_hostile_body_is_hashed_the_same_on_a_retry_or_refused_by_size(
    http: tuple[httpx.AsyncClient, Endpoint], name: str, body: bytes, status: int
) -> None:
    client, endpoint = http
    key = {"Idempotency-Key": unique(name)}

    first = await client.post("/things", content=body, headers=key)
    retried = await client.post("/things", content=body, headers=key)

    assert (first.status_code, retried.status_code) == (status, status)
    if status == 201:
        assert first.json() == retried.json() == {"run": 1}  # the retry is a replay
        assert endpoint.runs == 1
    else:
        assert str(BODY_BOUND) in first.json()["detail"]
        assert endpoint.runs == 0


# --- stored records read back -----------------------------------------------------------------


async def corrupt(container: ContainerProxy, record: Record, field: str, value: object) -> None:
    """Rewrite the stored record's `field`, as another writer (or an operator) might."""
    stored = await container.read_item(item=record.key, partition_key=record.partition)
    document = {key: item for key, item in stored.items() if not key.startswith("_")}
    if value is MISSING:
        document.pop(field, None)
    else:
        document[field] = value
    await container.upsert_item(document)


CORRUPT = corrupt_record_cases()


@pytest.mark.parametrize(
    ("name", "field", "value"), [pytest.param(*case, id=case[0]) for case in CORRUPT]
)
async def test_a_corrupt_record_is_a_store_error_and_its_message_is_dead_lettered(
    store: CosmosStore, container: ContainerProxy, name: str, field: str, value: object
) -> None:
    message_id = unique(name)
    key, home = (
        safe_id(f"two-phase:{CONSUMER}:{message_id}"),
        key_partition_of(CONSUMER, message_id),
    )
    claimed = await store.claim(
        Record(
            key=key,
            partition=home,
            request_hash=body_fingerprint(greeting_body()),
            status=RecordStatus.IN_PROGRESS,
            owner="crashed",
            lease_seconds=0,
        )
    )
    await corrupt(container, claimed, field, value)
    calls: list[str] = []

    async def charge(greeting: dict[str, Any], effects: Effects) -> Outcome:
        async def call(downstream_key: str) -> str:
            calls.append(downstream_key)
            return "charged"

        return (await effects.two_phase(call)).outcome

    consumer = exactly_once(consumer=CONSUMER, parse=core_parse, store=store)(charge)

    with pytest.raises(CorruptRecordError) as read_error:
        await store.read(key, home)
    decision = await consumer.decide(greeting_body(), message_id)

    assert field in str(read_error.value) or "not an exactly-once record" in str(read_error.value)
    assert (decision.settlement, decision.dead_letter_reason) == (
        Settlement.DEAD_LETTER,
        DeadLetterReason.CORRUPT_RECORD,
    )
    assert decision.outcome is Outcome.CORRUPT_RECORD
    assert calls == []  # the downstream was never called on a record nobody can read


async def test_a_corrupt_record_under_an_idempotency_key_fails_that_request_only(
    store: CosmosStore,
    container: ContainerProxy,
    http: tuple[httpx.AsyncClient, Endpoint],
) -> None:
    client, endpoint = http
    key = unique("k")
    owner = IdempotencyKeys(store, scope="things", owner="crashed")
    claim = await owner.claim(key, "POST", "/things", b"{}")
    assert claim._owned is not None
    await corrupt(container, claim._owned, "status", "done")

    broken = await client.post("/things", content=b"{}", headers={"Idempotency-Key": key})
    after = await client.post("/things", content=b"{}", headers={"Idempotency-Key": unique("k")})

    assert broken.status_code == 500
    assert (after.status_code, endpoint.runs) == (201, 1)


RESPONSES = corrupt_response_cases()


@pytest.mark.parametrize(
    ("name", "result"), [pytest.param(*case, id=case[0]) for case in RESPONSES]
)
async def test_a_completed_key_whose_record_holds_no_response_is_a_corrupt_record(
    store: CosmosStore, container: ContainerProxy, name: str, result: object
) -> None:
    keys = IdempotencyKeys(store, scope="things")
    key = unique(name)
    first = await keys.claim(key, "POST", "/things", b"{}")
    await first.complete(201, {"run": 1})
    assert first._owned is not None
    await corrupt(container, first._owned, "result", result)

    with pytest.raises(CorruptRecordError):
        await keys.claim(key, "POST", "/things", b"{}")
