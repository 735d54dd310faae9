"""Keys and hashes of a consumer (issue 36, item 1), against our Service Bus and Cosmos DB
emulators through the real SDKs:

- the default key is the MessageId and its records keep their ids;
- a business key (`from_message`) and a CloudEvent's source + id (`cloud_event_key`, structured
  and binary mode) make a resend under a new MessageId a duplicate, and a reuse with another
  payload a mismatch; a message without its key is dead-lettered on its first delivery;
- `key_prefix` keeps a renamed consumer's keys; without it the keys are the consumer's own;
- a payload projection decides what a mismatch compares;
- the key's home is derived from the key, not from the MessageId.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import pytest
from azure.cosmos.aio import ContainerProxy
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from core_support import QUEUE, unique
from pydantic import BaseModel

from exactly_once import (
    ConsumerOptions,
    CosmosStore,
    DeadLetterReason,
    Decision,
    Delivered,
    Effects,
    ExactlyOnceConsumer,
    LocalCache,
    Outcome,
    Rejected,
    cloud_event_key,
    exactly_once,
    from_message,
)
from exactly_once._orchestrator import KEY_TYPE, key_partition_of
from exactly_once.decisions import Settlement
from exactly_once.store import JsonInput, JsonMapping
from servicebus_emulator import RunningEmulator


class Invoice(BaseModel):
    invoice_id: str
    customer_id: str
    amount_cents: int
    sent_at: datetime


def parse_invoice(body: bytes) -> Invoice:
    return Invoice.model_validate_json(body)


def invoice_body(
    invoice_id: str, customer_id: str, amount_cents: int = 1200, **extra: Any
) -> bytes:
    sent_at = extra.pop("sent_at", datetime(2026, 12, 4, 18, 0, tzinfo=UTC))
    body = {
        "invoice_id": invoice_id,
        "customer_id": customer_id,
        "amount_cents": amount_cents,
        "sent_at": sent_at.isoformat(),
    }
    return json.dumps(body).encode()


async def write_invoice(invoice: Invoice, effects: Effects) -> Outcome:
    """The effect of every invoice consumer here: one document in the customer's partition."""
    document: JsonMapping = {"id": f"invoice-{invoice.invoice_id}", "cents": invoice.amount_cents}
    return await effects.inbox(invoice.customer_id, [document])


def invoices(
    store: CosmosStore, consumer: str = "invoicing", **options: Any
) -> ExactlyOnceConsumer[Invoice]:
    consumer_of: Callable[[Any], ExactlyOnceConsumer[Invoice]] = exactly_once(
        consumer=consumer, parse=parse_invoice, store=store, options=ConsumerOptions(**options)
    )
    return consumer_of(write_invoice)


async def documents_in(container: ContainerProxy, partition: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    async for item in container.query_items("SELECT * FROM c", partition_key=partition):
        found[item["id"]] = item
    return found


async def delivered(
    emulator: RunningEmulator, consumer: ExactlyOnceConsumer[Any], *messages: ServiceBusMessage
) -> list[Decision]:
    """Send `messages`, receive them through the SDK and settle each with `with_receiver`, in
    the order sent; the decisions, in that order."""
    async with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        async with client.get_queue_sender(QUEUE) as sender:
            await sender.send_messages(list(messages))
        async with client.get_queue_receiver(QUEUE) as receiver:
            received: list[ServiceBusReceivedMessage] = []
            while len(received) < len(messages):
                batch = await receiver.receive_messages(max_message_count=10, max_wait_time=5)
                assert batch, f"received {len(received)} of {len(messages)} messages"
                received += batch
            assert [m.message_id for m in received] == [m.message_id for m in messages]
            return [await consumer.with_receiver(message, receiver) for message in received]


async def dead_letters(emulator: RunningEmulator) -> dict[str, str | None]:
    """MessageId -> reason of every dead letter (each message here was received once, so a
    dead letter was dead-lettered on its first delivery)."""
    async with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver,
    ):
        letters = await receiver.peek_messages(max_message_count=50)
    return {str(letter.message_id): letter.dead_letter_reason for letter in letters}


def outcomes(decisions: list[Decision]) -> list[StrEnum]:
    return [decision.outcome for decision in decisions]


# --- the default: the MessageId ------------------------------------------------------------------


async def test_the_default_key_is_the_message_id_and_its_records_keep_their_ids(
    store: CosmosStore, container: ContainerProxy
) -> None:
    consumer, message_id, customer = invoices(store), unique("m"), unique("customer")
    body = invoice_body(unique("invoice"), customer)

    first = await consumer.decide(body, message_id)
    again = await consumer.decide(body, message_id)
    other_id = await consumer.decide(body, unique("m"))

    assert outcomes([first, again]) == [Outcome.PROCESSED, Outcome.DUPLICATE]
    # Another MessageId is another message: its document exists, so an effect conflict.
    assert other_id.dead_letter_reason == DeadLetterReason.EFFECT_DOCUMENT_EXISTS
    home = await documents_in(container, key_partition_of("invoicing", message_id))
    key_record = home[f"inbox:invoicing:{message_id}"]
    assert (key_record["type"], key_record["messageId"]) == (KEY_TYPE, message_id)
    assert "key" not in key_record


# --- a business key -------------------------------------------------------------------------


async def test_a_business_key_makes_a_resend_under_a_new_message_id_a_duplicate(
    store: CosmosStore, container: ContainerProxy, servicebus: RunningEmulator
) -> None:
    """The producer resends the invoice under a new MessageId (a retry after a timeout, past
    the broker's duplicate-detection window); the invoice id names its records."""
    consumer = invoices(store, key=from_message(lambda invoice: invoice.invoice_id))
    invoice_id, customer = unique("invoice"), unique("customer")
    first, resend, reuse = unique("m"), unique("m"), unique("m")

    decisions = await delivered(
        servicebus,
        consumer,
        ServiceBusMessage(invoice_body(invoice_id, customer), message_id=first),
        ServiceBusMessage(invoice_body(invoice_id, customer), message_id=resend),
        ServiceBusMessage(invoice_body(invoice_id, customer, 99), message_id=reuse),
    )

    assert outcomes(decisions) == [Outcome.PROCESSED, Outcome.DUPLICATE, Outcome.MISMATCH]
    # Each decision names the key it was made under, and the payload's hash, for the logs.
    assert [decision.key for decision in decisions] == [invoice_id] * 3
    hashes = [decision.request_hash for decision in decisions]
    assert hashes[0] == hashes[1] != hashes[2] and None not in hashes
    assert await dead_letters(servicebus) == {reuse: "RequestHashMismatch"}
    written = await documents_in(container, customer)
    assert written[f"invoice-{invoice_id}"]["cents"] == 1200
    # The key's home is derived from the key, and its record names the first delivery.
    home = await documents_in(container, key_partition_of("invoicing", invoice_id))
    key_record = home[f"inbox:invoicing:{invoice_id}"]
    assert (key_record["key"], key_record["messageId"]) == (invoice_id, first)


async def test_the_keys_home_follows_the_key_not_the_message_id(
    store: CosmosStore, container: ContainerProxy
) -> None:
    """`key_partition` is given the key: a reuse of the invoice id under a new MessageId,
    naming another customer, is judged in the same home and is a mismatch."""
    consumer = invoices(
        store,
        key=from_message(lambda invoice: invoice.invoice_id),
        key_partition=lambda key: f"invoice-home-{key}",
    )
    invoice_id = unique("invoice")

    first = await consumer.decide(invoice_body(invoice_id, unique("customer")), unique("m"))
    moved = await consumer.decide(invoice_body(invoice_id, unique("customer"), 7), unique("m"))

    assert outcomes([first, moved]) == [Outcome.PROCESSED, Outcome.MISMATCH]
    home = await documents_in(container, f"invoice-home-{invoice_id}")
    assert set(home) == {f"inbox:invoicing:{invoice_id}"}


async def test_a_key_function_may_reject_and_a_bug_in_it_loses_nothing(
    store: CosmosStore,
) -> None:
    def untrimmed_or_a_bug(delivered: Delivered[Invoice]) -> str | None:
        if delivered.message.invoice_id.strip() != delivered.message.invoice_id:
            raise Rejected("the invoice id has spaces around it", reason="InvoiceIdNotTrimmed")
        raise KeyError("a bug in the key function")

    consumer = invoices(store, key=untrimmed_or_a_bug)

    rejected = await consumer.decide(invoice_body(" i-1 ", "c"), unique("m"))
    buggy = await consumer.decide(invoice_body("i-1", "c"), unique("m"))

    assert (rejected.settlement, rejected.dead_letter_reason) == (
        Settlement.DEAD_LETTER,
        "InvoiceIdNotTrimmed",
    )
    # A bug is not the message's fault: it waits (abandoned) for the fix, never dead-lettered.
    assert (buggy.outcome, buggy.settlement) == (Outcome.UNEXPECTED_FAILURE, Settlement.ABANDON)


async def test_an_empty_business_key_is_dead_lettered_on_the_first_delivery(
    store: CosmosStore, servicebus: RunningEmulator
) -> None:
    consumer = invoices(store, key=from_message(lambda invoice: invoice.invoice_id))
    message_id = unique("m")

    (decision,) = await delivered(
        servicebus, consumer, ServiceBusMessage(invoice_body("", "c"), message_id=message_id)
    )

    assert decision.outcome is Outcome.REJECTED
    assert await dead_letters(servicebus) == {message_id: "MissingIdempotencyKey"}


# --- key_prefix ---------------------------------------------------------------------------------


async def test_a_fixed_key_prefix_keeps_a_renamed_consumers_keys(store: CosmosStore) -> None:
    body, message_id = invoice_body(unique("invoice"), unique("customer")), unique("m")
    before = invoices(store, "invoicing-v1", key_prefix="invoices")
    renamed = invoices(store, "invoicing-v2", key_prefix="invoices")

    assert (await before.decide(body, message_id)).outcome is Outcome.PROCESSED
    assert (await renamed.decide(body, message_id)).outcome is Outcome.DUPLICATE


async def test_without_a_prefix_keys_are_scoped_by_the_consumer(
    store: CosmosStore, container: ContainerProxy
) -> None:
    """Two consumers of one message each judge their own key (their documents differ here, so
    each writes its own)."""
    message_id, customer = unique("m"), unique("customer")
    body = invoice_body(unique("invoice"), customer)

    async def audit(invoice: Invoice, effects: Effects) -> Outcome:
        document: JsonMapping = {"id": f"audit-{invoice.invoice_id}"}
        return await effects.inbox(invoice.customer_id, [document])

    auditing = exactly_once(consumer="auditing", parse=parse_invoice, store=store)(audit)

    assert (await invoices(store).decide(body, message_id)).outcome is Outcome.PROCESSED
    assert (await auditing.decide(body, message_id)).outcome is Outcome.PROCESSED
    with pytest.raises(ValueError, match="key_prefix"):
        invoices(store, key_prefix="")


# --- CloudEvents ----------------------------------------------------------------------------


def parse_event_data(body: bytes) -> dict[str, Any]:
    """The event's data, from a structured event's envelope or from a binary event's body."""
    event = json.loads(body)
    if not isinstance(event, dict):
        raise ValueError("an event's data is a JSON object here")
    data = event.get("data", {}) if "specversion" in event else event
    return dict(data)


def event_data(data: dict[str, Any]) -> JsonInput:
    return data


def signups(store: CosmosStore) -> ExactlyOnceConsumer[dict[str, Any]]:
    async def welcome(data: dict[str, Any], effects: Effects) -> Outcome:
        document: JsonMapping = {"id": f"welcome-{effects.key_partition}", "user": data["user"]}
        return await effects.inbox(effects.key_partition, [document])

    # The data is what must match: one event sent in either mode is the same payload.
    return exactly_once(
        consumer="signups",
        parse=parse_event_data,
        store=store,
        options=ConsumerOptions(key=cloud_event_key, payload=event_data),
    )(welcome)


def structured(source: str, event_id: str | None, user: str, message_id: str) -> ServiceBusMessage:
    event: dict[str, Any] = {"specversion": "1.0", "type": "user.signup", "source": source}
    if event_id is not None:
        event["id"] = event_id
    event["data"] = {"user": user}
    return ServiceBusMessage(
        json.dumps(event),
        message_id=message_id,
        content_type="application/cloudevents+json; charset=utf-8",
    )


def binary(source: str, event_id: str | None, user: str, message_id: str) -> ServiceBusMessage:
    properties: dict[str | bytes, Any] = {
        "cloudEvents:specversion": "1.0",
        "cloudEvents:type": "user.signup",
        "cloudEvents:source": source,
    }
    if event_id is not None:
        properties["cloudEvents:id"] = event_id
    return ServiceBusMessage(
        json.dumps({"user": user}),
        message_id=message_id,
        content_type="application/json",
        application_properties=properties,
    )


@pytest.mark.parametrize("mode", [structured, binary], ids=["structured", "binary"])
async def test_a_cloud_events_source_and_id_are_its_key(
    store: CosmosStore,
    servicebus: RunningEmulator,
    mode: Callable[[str, str | None, str, str], ServiceBusMessage],
) -> None:
    source, event_id, user = f"/signup/{unique('region')}", unique("event"), unique("user")
    without_id = unique("m")

    decisions = await delivered(
        servicebus,
        signups(store),
        mode(source, event_id, user, unique("m")),
        mode(source, event_id, user, unique("m")),  # the same event, another MessageId
        mode(f"{source}/other", event_id, unique("user"), unique("m")),  # another source
        mode(source, event_id, unique("user"), unique("m")),  # the id reused: another payload
        mode(source, None, user, without_id),
    )

    assert outcomes(decisions) == [
        Outcome.PROCESSED,
        Outcome.DUPLICATE,
        Outcome.PROCESSED,
        Outcome.MISMATCH,
        Outcome.REJECTED,
    ]
    letters = await dead_letters(servicebus)
    assert letters[without_id] == "MissingIdempotencyKey"


async def test_one_event_in_either_mode_is_one_key(
    store: CosmosStore, servicebus: RunningEmulator
) -> None:
    """A relay that re-sends a structured event in binary mode sends the same event: its key
    and its data are the same, so it is a duplicate."""
    source, event_id, user = "/signup", unique("event"), unique("user")

    decisions = await delivered(
        servicebus,
        signups(store),
        structured(source, event_id, user, unique("m")),
        binary(source, event_id, user, unique("m")),
    )

    assert outcomes(decisions) == [Outcome.PROCESSED, Outcome.DUPLICATE]


# --- the payload projection -----------------------------------------------------------------


def without_sent_at(invoice: Invoice) -> JsonInput:
    return invoice.model_dump(mode="json", exclude={"sent_at"})


async def test_a_projection_decides_what_a_mismatch_compares(store: CosmosStore) -> None:
    later = datetime(2026, 12, 4, 18, 0, tzinfo=UTC) + timedelta(minutes=5)

    async def sent_three_times(consumer: ExactlyOnceConsumer[Invoice]) -> list[Decision]:
        """The invoice, the same resent 5 minutes later, and then with another amount."""
        invoice_id, customer, message_id = unique("invoice"), unique("customer"), unique("m")
        first = invoice_body(invoice_id, customer)
        resent_later = invoice_body(invoice_id, customer, sent_at=later)
        changed = invoice_body(invoice_id, customer, 1300, sent_at=later)
        return [await consumer.decide(body, message_id) for body in (first, resent_later, changed)]

    projected = await sent_three_times(invoices(store, payload=without_sent_at))
    hashed_whole = await sent_three_times(invoices(store))

    # The timestamp is outside the projection: a duplicate; the amount inside it: a mismatch.
    assert outcomes(projected) == [Outcome.PROCESSED, Outcome.DUPLICATE, Outcome.MISMATCH]
    assert projected[2].dead_letter_reason == "RequestHashMismatch"
    # The default hashes the whole body: the resend is a mismatch there.
    assert outcomes(hashed_whole) == [Outcome.PROCESSED, Outcome.MISMATCH, Outcome.MISMATCH]


async def test_a_projection_that_is_not_json_is_a_bug_not_a_dead_letter(
    store: CosmosStore,
) -> None:
    def with_a_datetime(invoice: Invoice) -> JsonInput:
        return {"sent_at": invoice.sent_at}  # type: ignore[dict-item]

    consumer = invoices(store, payload=with_a_datetime)

    decision = await consumer.decide(invoice_body(unique("invoice"), "c"), unique("m"))

    assert (decision.outcome, decision.settlement) == (
        Outcome.UNEXPECTED_FAILURE,
        Settlement.ABANDON,
    )
    assert "datetime is not JSON" in (decision.error or "")


# --- the cache and an effect that keeps no key ----------------------------------------------


async def test_a_cached_repeat_of_a_versioned_update_is_a_duplicate_not_stale(
    store: CosmosStore,
) -> None:
    """`apply_version` keeps no key: the store calls a repeat `stale`; the cache, which knows
    the key completed, calls it `duplicate`. Both complete the message and write nothing."""

    async def set_amount(invoice: Invoice, effects: Effects) -> Outcome:
        return await effects.apply_version(
            invoice.customer_id, f"total-{invoice.invoice_id}", 1, lambda _: {"cents": 1}
        )

    def consumer(cache: LocalCache | None) -> ExactlyOnceConsumer[Invoice]:
        return exactly_once(
            consumer="totals",
            parse=parse_invoice,
            store=store,
            options=ConsumerOptions(cache=cache),
        )(set_amount)

    cached, uncached = consumer(LocalCache(ttl_seconds=60)), consumer(None)
    body, message_id = invoice_body(unique("invoice"), unique("customer")), unique("m")

    first = await cached.decide(body, message_id)
    from_the_cache = await cached.decide(body, message_id)
    from_the_store = await uncached.decide(body, message_id)

    assert outcomes([first, from_the_cache, from_the_store]) == [
        Outcome.PROCESSED,
        Outcome.DUPLICATE,
        Outcome.STALE,
    ]
    assert {d.settlement for d in (from_the_cache, from_the_store)} == {Settlement.COMPLETE}
