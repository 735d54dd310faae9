"""A queue's dead-letter sub-queue for operators: browse, resubmit, purge (Entra ID or keys,
whatever the process's Service Bus client uses)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import Any, cast

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from orders.adapters.process_clients import given_or_own
from orders.adapters.servicebus import message_body_bytes
from orders.adapters.servicebus_peek import PeekReceivers, receiver_for
from orders.domain.dead_letters import (
    DeadLetter,
    DeadLetterOutcome,
    DeadLetterPlan,
    Selection,
    plan_for,
    resubmitted_properties,
)
from orders.exceptions import ResubmitUnsupportedError
from orders.service.subscribers import Source
from orders.settings import Settings

PAGE = 100
# A command looks at (peeks) at most this many dead letters, the oldest, and acts on those it
# selects among them, holding the locks of those before the last one meanwhile.
MAX_PER_COMMAND = 1000
# How long a receive waits for dead letters a peek showed are there (they are at rest: the
# broker delivers them as soon as the link has credit; this bounds a slow broker).
RECEIVE_WAIT_SECONDS = 2.0


def _text(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def to_dead_letter(message: ServiceBusReceivedMessage) -> DeadLetter:
    properties = {
        str(_text(key)): _text(value)
        for key, value in (message.application_properties or {}).items()
    }
    return DeadLetter(
        sequence_number=message.sequence_number or 0,
        message_id=str(message.message_id) if message.message_id is not None else None,
        reason=message.dead_letter_reason,
        description=message.dead_letter_error_description,
        delivery_count=message.delivery_count or 0,
        enqueued_at=message.enqueued_time_utc,
        body=message_body_bytes(message),
        application_properties=properties,
    )


def resubmitted_copy(
    dead: DeadLetter, message: ServiceBusReceivedMessage, *, by: str, now: datetime
) -> ServiceBusMessage:
    """The dead letter as its producer sent it: body, MessageId and every property a producer
    sets (a session queue refuses a copy without its SessionId; a reply needs ReplyTo), its
    own TimeToLive, and the application properties without the broker's dead-letter ones,
    plus who resubmitted it and when. The SDK reads AMQP strings and binaries alike as bytes,
    so the copy sends those values as the text `to_dead_letter` made of them (what producers
    send: strings)."""
    properties = resubmitted_properties(dead, by=by, at=now)
    return ServiceBusMessage(
        dead.body,
        message_id=dead.message_id,
        session_id=message.session_id,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
        to=message.to,
        partition_key=message.partition_key,
        time_to_live=message.time_to_live,
        content_type=message.content_type,
        subject=message.subject,
        correlation_id=message.correlation_id,
        application_properties=cast(dict[str | bytes, Any], properties),
    )


class ServiceBusDeadLetters:
    """The dead-letter sub-queue of a queue, or of a topic's subscription."""

    def __init__(
        self, client: ServiceBusClient, source: Source, peeks: PeekReceivers | None = None
    ) -> None:
        self._client = client
        self._source = source
        self._peeks = peeks or PeekReceivers(client)

    def _dead_letter_receiver(self) -> ServiceBusReceiver:
        return receiver_for(self._client, self._source, ServiceBusSubQueue.DEAD_LETTER)

    async def browse(self, limit: int, from_sequence: int = 1) -> list[DeadLetter]:
        """Peek (no lock, nothing removed), oldest first."""
        found: list[DeadLetter] = []
        next_sequence = from_sequence
        while len(found) < limit:
            page = await self._peeks.peek(
                self._source,
                ServiceBusSubQueue.DEAD_LETTER,
                max_message_count=min(PAGE, limit - len(found)),
                from_sequence=next_sequence,
            )
            if not page:
                break
            found.extend(to_dead_letter(message) for message in page)
            next_sequence = found[-1].sequence_number + 1
        return found

    async def resubmit(
        self,
        selection: Selection,
        refusal: Callable[[DeadLetter], str | None],
        *,
        by: str,
        now: datetime,
        to_topic: bool = False,
    ) -> DeadLetterOutcome:
        """Send a whole copy of each selected dead letter back (see `resubmitted_copy`), then
        remove it from the dead-letter queue.

        A queue's copy goes to the queue. A subscription's copy can only go to its topic, which
        delivers it to every subscription (Service Bus cannot address one): only with
        `to_topic`, when every subscriber drops a MessageId it already handled (ours do, by
        their inbox). Without it, `ResubmitUnsupportedError`.
        """
        if self._source.queue is not None:
            target = self._client.get_queue_sender(self._source.queue)
        elif to_topic:
            assert self._source.topic is not None
            target = self._client.get_topic_sender(self._source.topic)
        else:
            raise ResubmitUnsupportedError(
                f"{self._source}: a copy sent to the topic reaches every subscription; "
                "re-publish the event at its source (same MessageId) instead, or resubmit "
                "to the topic when every subscriber drops a MessageId it already handled"
            )
        async with target as sender:

            async def send_copy(dead: DeadLetter, message: ServiceBusReceivedMessage) -> str | None:
                try:
                    copy = resubmitted_copy(dead, message, by=by, now=now)
                except ValueError as exc:  # the SDK refuses some producers' properties to send
                    return f"its properties cannot be sent again: {exc}"
                await sender.send_messages(copy)
                return None

            return await self._take(selection, refusal, send_copy)

    async def purge(self, selection: Selection) -> DeadLetterOutcome:
        async def nothing(dead: DeadLetter, message: ServiceBusReceivedMessage) -> str | None:
            return None

        return await self._take(selection, lambda dead: None, nothing)

    async def plan(
        self, selection: Selection, refusal: Callable[[DeadLetter], str | None]
    ) -> DeadLetterPlan:
        """What a command with `selection` would do now (a peek: nothing is locked)."""
        return plan_for(selection, await self.browse(MAX_PER_COMMAND), refusal)

    async def _take(
        self,
        selection: Selection,
        refusal: Callable[[DeadLetter], str | None],
        act: Callable[[DeadLetter, ServiceBusReceivedMessage], Awaitable[str | None]],
    ) -> DeadLetterOutcome:
        """Lock dead letters in order, no further than the plan's last target (a peek first
        says which); act on the targets, then remove them. The others received on the way
        (not selected, or refused) stay locked until the end, so no page sees them twice, then
        are abandoned (`passed_over`): they stay in the dead-letter queue, their delivery count
        one higher. Dead letters after the last target are never received."""
        plan = await self.plan(selection, refusal)
        outcome = DeadLetterOutcome(refused=dict(plan.refused))
        kept: list[ServiceBusReceivedMessage] = []
        received = 0
        async with self._dead_letter_receiver() as receiver:
            try:
                while received < plan.reach and not plan.targets <= {
                    *outcome.done,
                    *outcome.refused,
                }:
                    held = {message.sequence_number for message in kept}
                    if await _holds_everything(receiver, held):
                        break
                    page = await receiver.receive_messages(
                        max_message_count=min(PAGE, plan.reach - received),
                        max_wait_time=RECEIVE_WAIT_SECONDS,
                    )
                    if not page:
                        break
                    received += len(page)
                    for message in page:
                        dead = to_dead_letter(message)
                        if dead.sequence_number in plan.targets:
                            refused = refusal(dead)
                            if refused is None:
                                refused = await act(dead, message)
                            if refused is None:
                                await receiver.complete_message(message)
                                outcome.done.append(dead.sequence_number)
                                continue
                            outcome.refused[dead.sequence_number] = refused
                        kept.append(message)
            finally:
                for message in kept:
                    await receiver.abandon_message(message)
                    outcome.passed_over.append(message.sequence_number or 0)
        return outcome


async def _holds_everything(receiver: ServiceBusReceiver, held: set[int | None]) -> bool:
    """Whether the dead-letter queue holds nothing but the dead letters `held` (locked by this
    command): a peek answers at once, where an empty receive would wait RECEIVE_WAIT_SECONDS
    for nothing. A peek sees locked messages too, so one locked by someone else only costs
    that wait (the receive then finds nothing), as before. A peek asks for one message more
    than `held` (a page at most): the bodies it transfers are few more than those held."""
    next_sequence = 1
    while page := await receiver.peek_messages(
        max_message_count=min(PAGE, len(held) + 1), sequence_number=next_sequence
    ):
        if any(message.sequence_number not in held for message in page):
            return False
        next_sequence = (page[-1].sequence_number or 0) + 1
    return True


@asynccontextmanager
async def dead_letter_tools(
    settings: Settings, source: Source | None = None
) -> AsyncIterator[ServiceBusDeadLetters]:
    """What `orders dlq` works with: Service Bus alone, so it works while Cosmos DB is down.
    `source` defaults to the orders queue."""
    settings.require_servicebus()
    async with AsyncExitStack() as stack:
        servicebus = given_or_own(stack, settings, None).servicebus()
        yield ServiceBusDeadLetters(servicebus, source or Source(queue=settings.orders_queue))
