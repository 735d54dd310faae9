"""The poison corpus through the Functions trigger: each case dead-lettered on its first
delivery with its reason, valid orders around it stored, and the rejection filed for GET.

The message is the SDK's own `ServiceBusReceivedMessage`, built as the SDK-type binding builds
it (data, value or sequence body); settlement goes to a fake of the host's message actions.
"""

from __future__ import annotations

import uuid

import pytest
from azure.servicebus import ServiceBusReceivedMessage
from fakes import FakeMessageActions, FakeOrderStore
from poison_corpus import PoisonCase, poison_cases, valid_order_body
from sdk_messages import received_message

import function_app
from orders.adapters.cosmos_layout import REJECTION_DOCUMENT_TYPE
from orders.domain.ids import is_entity_id
from orders.domain.received import BodyKind
from orders.service.registry import ORDERS

RUN = f"fn{uuid.uuid4().hex[:6]}"
CASES = poison_cases(RUN)


def sdk_message(case: PoisonCase) -> ServiceBusReceivedMessage:
    if case.body_kind is BodyKind.VALUE:
        return received_message(case.message_id, value=case.value)
    if case.body_kind is BodyKind.SEQUENCE:
        return received_message(case.message_id, sequence=case.value)
    return received_message(case.message_id, data=case.body)


def test_the_corpus_is_at_least_forty_kinds() -> None:
    assert len({case.name for case in CASES}) == len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_poison_is_dead_lettered_at_once_and_the_next_order_is_stored(
    function_store: FakeOrderStore, case: PoisonCase
) -> None:
    actions = FakeMessageActions()
    valid_id = f"{RUN}-ok-{uuid.uuid4().hex[:6]}"

    process_order = function_app.consumer_triggers[ORDERS]
    await process_order(received_message=sdk_message(case), message_actions=actions)
    valid = PoisonCase("valid", "", valid_order_body(valid_id), valid_id)
    await process_order(received_message=sdk_message(valid), message_actions=actions)

    [(name, _, kwargs), (next_name, _, _)] = actions.calls
    assert name == "deadletter"
    assert kwargs["deadletter_reason"] == case.reason
    assert 0 < len(kwargs["deadletter_error_description"]) <= 1024
    assert next_name == "complete" and valid_id in function_store.order_ids()
    # Filed where GET looks: under the MessageId when it is a usable id (or the body's orderId).
    rejections = [
        document
        for partition in function_store.partitions.values()
        for document in partition.values()
        if document["type"] == REJECTION_DOCUMENT_TYPE
    ]
    if is_entity_id(case.message_id) or case.reason == "MessageIdMismatch":
        [rejection] = rejections
        assert rejection["reason"] == case.reason
        assert rejection["messageId"] == case.message_id
    else:
        assert rejections == []
