"""A queue's dead-letter sub-queue for operators: browse, resubmit, purge (Entra ID or keys,
whatever the process's Service Bus client uses)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver

from orders.adapters.servicebus import message_body_bytes
from orders.domain.dead_letters import (
    DeadLetter,
    DeadLetterOutcome,
    Selection,
    resubmitted_properties,
)
from orders.exceptions import ResubmitUnsupportedError
from orders.service.worker_options import Source

PAGE = 100
# A command acts on at most this many dead letters, and holds their locks meanwhile.
MAX_PER_COMMAND = 1000
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


class ServiceBusDeadLetters:
    """The dead-letter sub-queue of a queue, or of a topic's subscription."""

    def __init__(self, client: ServiceBusClient, source: Source) -> None:
        self._client = client
        self._source = source

    def _dead_letter_receiver(self) -> ServiceBusReceiver:
        dead_letters = ServiceBusSubQueue.DEAD_LETTER
        if self._source.queue is not None:
            return self._client.get_queue_receiver(self._source.queue, sub_queue=dead_letters)
        assert self._source.topic is not None and self._source.subscription is not None
        return self._client.get_subscription_receiver(
            self._source.topic, self._source.subscription, sub_queue=dead_letters
        )

    async def browse(self, limit: int, from_sequence: int = 1) -> list[DeadLetter]:
        """Peek (no lock, nothing removed), oldest first."""
        found: list[DeadLetter] = []
        async with self._dead_letter_receiver() as receiver:
            next_sequence = from_sequence
            while len(found) < limit:
                page = await receiver.peek_messages(
                    max_message_count=min(PAGE, limit - len(found)), sequence_number=next_sequence
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
    ) -> DeadLetterOutcome:
        """Send a copy of each selected dead letter to the queue (same MessageId, body and
        properties, plus who and when), then remove it from the dead-letter queue.

        Not for a subscription: a copy sent to the topic would reach every subscription, and
        Service Bus cannot address one. Re-publish the event at its source instead (same
        MessageId, so the other subscribers' dedup absorbs it).
        """
        if self._source.queue is None:
            raise ResubmitUnsupportedError(
                f"{self._source}: a copy sent to the topic reaches every subscription; "
                "re-publish the event at its source (same MessageId) instead"
            )
        async with self._client.get_queue_sender(self._source.queue) as sender:

            async def send_copy(dead: DeadLetter, message: ServiceBusReceivedMessage) -> None:
                copy = ServiceBusMessage(
                    dead.body,
                    message_id=dead.message_id,
                    correlation_id=message.correlation_id,
                    subject=message.subject,
                    content_type=message.content_type,
                    application_properties=cast(
                        dict[str | bytes, Any], resubmitted_properties(dead, by=by, at=now)
                    ),
                )
                await sender.send_messages(copy)

            return await self._take(selection, refusal, send_copy)

    async def purge(self, selection: Selection) -> DeadLetterOutcome:
        async def nothing(dead: DeadLetter, message: ServiceBusReceivedMessage) -> None:
            return None

        return await self._take(selection, lambda dead: None, nothing)

    async def _take(
        self,
        selection: Selection,
        refusal: Callable[[DeadLetter], str | None],
        act: Callable[[DeadLetter, ServiceBusReceivedMessage], Any],
    ) -> DeadLetterOutcome:
        """Lock dead letters one page at a time; act on the selected, then remove them. What is
        not selected (or refused) stays locked until the end, so no page sees it twice, then is
        abandoned: it stays in the dead-letter queue, its delivery count one higher."""
        outcome = DeadLetterOutcome()
        kept: list[ServiceBusReceivedMessage] = []
        async with self._dead_letter_receiver() as receiver:
            try:
                while len(outcome.done) + len(kept) < MAX_PER_COMMAND and not selection.all_handled(
                    outcome.done, outcome.refused
                ):
                    page = await receiver.receive_messages(
                        max_message_count=PAGE, max_wait_time=RECEIVE_WAIT_SECONDS
                    )
                    if not page:
                        break
                    for message in page:
                        dead = to_dead_letter(message)
                        refused = refusal(dead) if selection.matches(dead) else None
                        if not selection.matches(dead) or refused is not None:
                            if refused is not None:
                                outcome.refused[dead.sequence_number] = refused
                            kept.append(message)
                            continue
                        await act(dead, message)
                        await receiver.complete_message(message)
                        outcome.done.append(dead.sequence_number)
            finally:
                for message in kept:
                    await receiver.abandon_message(message)
        return outcome
