"""`exactly_once(read=...)`: a consumer that reads the whole received message and decides itself
(the orders app's consumers are such: tests/integration/test_consumers_through_the_door.py).
Messages are the SDK's own type, built as the Functions binding builds them; settlement goes to
a stand-in for the host's message actions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from azure.servicebus import ServiceBusReceivedMessage
from fakes import FakeMessageActions
from sdk_messages import received_message

from exactly_once import Backoff, ConsumerOptions, Effects, LocalCache, Rejected, exactly_once
from exactly_once.decisions import Decision, Outcome, Settlement
from exactly_once.options import DEFAULT_MAX_MESSAGE_BYTES
from exactly_once.servicebus import ExactlyOnceConsumer

ENQUEUED = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def read_whole(message: ServiceBusReceivedMessage) -> ServiceBusReceivedMessage:
    if message.correlation_id == "refuse":
        raise Rejected("the reader refuses it", reason="NotOurs")
    return message


def reader_consumer(
    seen: list[ServiceBusReceivedMessage],
) -> ExactlyOnceConsumer[ServiceBusReceivedMessage]:
    @exactly_once(consumer="reader", read=read_whole)
    async def decide(message: ServiceBusReceivedMessage, effects: Effects) -> Decision:
        seen.append(message)
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, key=f"order-{len(seen)}")

    return decide


async def test_the_reader_gets_the_whole_message_and_its_decision_is_settled_as_it_is() -> None:
    seen: list[ServiceBusReceivedMessage] = []
    consumer = reader_consumer(seen)
    actions = FakeMessageActions()

    decision = await consumer.with_message_actions(
        received_message("m-1", data=b"{}", enqueued_time=ENQUEUED, correlation_id="c-1"),
        actions,
    )

    assert [message.enqueued_time_utc for message in seen] == [ENQUEUED]
    assert decision.key == "order-1" and decision.request_hash is None  # the effect's own
    assert [name for name, _, _ in actions.calls] == ["complete"]


@pytest.mark.parametrize(
    "message",
    [
        received_message("m-2", value={"an": "AMQP value"}),  # the core's UnsupportedBodyType
        received_message("m-3", data=b" " * (DEFAULT_MAX_MESSAGE_BYTES + 1)),  # its BodyTooLarge
        received_message(None, data=b"{}"),  # its MissingMessageId
    ],
    ids=["value-body", "over-the-body-bound", "no-message-id"],
)
async def test_what_the_core_refuses_of_a_body_is_the_readers_to_judge(
    message: ServiceBusReceivedMessage,
) -> None:
    seen: list[ServiceBusReceivedMessage] = []

    decision = await reader_consumer(seen).decide_message(message)

    assert seen == [message]
    assert decision.settlement is Settlement.COMPLETE


async def test_a_reader_refusal_is_dead_lettered_with_its_reason() -> None:
    seen: list[ServiceBusReceivedMessage] = []
    actions = FakeMessageActions()

    await reader_consumer(seen).with_message_actions(
        received_message("m-4", data=b"{}", correlation_id="refuse"), actions
    )

    [(name, _, kwargs)] = actions.calls
    assert name == "deadletter" and kwargs["deadletter_reason"] == "NotOurs"
    assert seen == []


async def test_without_a_store_the_mechanisms_refuse_and_the_message_is_not_lost() -> None:
    @exactly_once(consumer="storeless", read=read_whole)
    async def decide(message: ServiceBusReceivedMessage, effects: Effects) -> Outcome:
        return await effects.inbox(partition="p", documents=[{"id": "d"}])

    decision = await decide.decide_message(received_message("m-5", data=b"{}"))

    assert decision.settlement is Settlement.ABANDON
    assert "made without store=" in (decision.error or "")


async def test_a_readers_consumer_decides_on_received_messages_only() -> None:
    with pytest.raises(TypeError, match="decide_message"):
        await reader_consumer([]).decide(b"{}", "m-6")

    async def effect(message: object, effects: Effects) -> Outcome:
        return Outcome.PROCESSED

    with pytest.raises(ValueError, match="one of parse="):
        exactly_once(consumer="both", read=read_whole, parse=bytes.decode)(effect)
    with pytest.raises(ValueError, match="one of parse="):
        exactly_once(consumer="neither")(effect)
    with pytest.raises(ValueError, match="cache= answers for a parser's consumer only"):
        exactly_once(
            consumer="cached", read=read_whole, options=ConsumerOptions(cache=LocalCache())
        )(effect)


class NotReadyYet(Exception):
    """The effect's dependencies cannot be built yet (a setting, a role, a store at start)."""


async def test_a_dependency_built_on_first_use_that_fails_for_now_backs_off_in_place() -> None:
    builds: list[int] = []

    async def dependency() -> str:
        builds.append(len(builds) + 1)
        if len(builds) < 3:
            raise NotReadyYet("the store is unreachable")
        return "ready"

    @exactly_once(
        consumer="lazy",
        read=read_whole,
        options=ConsumerOptions(
            transient=(NotReadyYet,),
            backoff=Backoff(first_delay_seconds=0.01, max_delay_seconds=0.02, budget_seconds=1.0),
        ),
    )
    async def decide(message: ServiceBusReceivedMessage, effects: Effects) -> Decision:
        await dependency()
        return Decision(Outcome.PROCESSED, Settlement.COMPLETE, key="built")

    actions = FakeMessageActions()
    decision = await decide.with_message_actions(received_message("m-7", data=b"{}"), actions)

    assert builds == [1, 2, 3]  # built again by each attempt, in the one delivery
    assert decision.key == "built"
    assert [name for name, _, _ in actions.calls] == ["complete"]
