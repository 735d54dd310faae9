"""The corpus of hostile events and status updates through real `orders worker --subscription`
processes: each is dead-lettered on its first delivery with its reason, by billing and shipping
alike and by the status consumer, while valid messages between them flow."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from e2e_support import poll_until, store_order, to_sdk_message
from poison_corpus import (
    PoisonCase,
    event_poison_cases,
    forged_event_cases,
    status_poison_cases,
    valid_event_document,
    valid_order_document,
    valid_status_document,
)

from orders.entrypoints.localstack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def dead_letters(stack: LocalStack, **entity: str) -> list[Any]:
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client:
        if "queue" in entity:
            receiver = client.get_queue_receiver(
                entity["queue"], sub_queue=ServiceBusSubQueue.DEAD_LETTER
            )
        else:
            receiver = client.get_subscription_receiver(
                stack.queue.events_topic,
                entity["subscription"],
                sub_queue=ServiceBusSubQueue.DEAD_LETTER,
            )
        with receiver:
            return list(receiver.peek_messages(max_message_count=200, sequence_number=1))


def reasons_by_case(letters: list[Any]) -> dict[str, str]:
    return {m.application_properties[b"poisonCase"].decode(): m.dead_letter_reason for m in letters}


def expected(cases: list[PoisonCase]) -> dict[str, str]:
    return {case.name: case.reason for case in cases}


def test_hostile_events_and_status_updates_are_dead_lettered_on_first_delivery(
    stack: LocalStack,
) -> None:
    run = f"pf{uuid.uuid4().hex[:6]}"
    events, statuses = event_poison_cases(run), status_poison_cases(run)
    # Well-formed but forged: refused after the one point read of the order.
    events += forged_event_cases(run, f"{run}-ok")
    valid_event = valid_event_document(f"{run}-ok")
    # Billing and shipping act only on events a stored order vouches for: store that order.
    store_order(stack, valid_order_document(f"{run}-ok"))
    valid_status = valid_status_document(f"{run}-ok")
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as client:
        with client.get_topic_sender(stack.queue.events_topic) as sender:
            for case in events:
                sender.send_messages(to_sdk_message(case))
            sender.send_messages(
                ServiceBusMessage(json.dumps(valid_event), message_id=valid_event["eventId"])
            )
        with client.get_queue_sender(stack.queue.status_queue) as sender:
            for case in statuses:
                sender.send_messages(to_sdk_message(case))
            sender.send_messages(
                ServiceBusMessage(json.dumps(valid_status), message_id=f"{run}-ok:status:2")
            )
    stack.start_payments()
    workers = [stack.start_subscriber(name) for name in ("billing", "shipping", "status")]

    for entity, cases in (
        ({"subscription": "billing"}, events),
        ({"subscription": "shipping"}, events),
        ({"queue": stack.queue.status_queue}, statuses),
    ):
        poll_until(
            lambda: len(dead_letters(stack, **entity)) >= len(cases),  # noqa: B023
            90,
            f"every hostile message in the dead-letter queue of {entity}",
        )
        assert reasons_by_case(dead_letters(stack, **entity)) == expected(cases)
    # Billing's and shipping's own `paid` / `shipped` for the valid order reach the status
    # consumer too: it decides those as well.
    for worker, cases in zip(workers, (events, events, statuses), strict=True):
        poll_until(
            lambda: len(worker.decisions()) >= len(cases) + 1,  # noqa: B023
            60,
            f"{worker.name} to decide every message",
        )
        decided = [(d["outcome"], d["settlement"]) for d in worker.decisions()]
        # One decision per hostile message, and nothing abandoned, redelivered or looping.
        assert decided.count(("rejected", "dead_letter")) == len(cases), worker.name
        assert ("processed", "complete") in decided, worker.name
        assert all(settlement != "abandon" for _, settlement in decided), worker.name
        assert worker.running
