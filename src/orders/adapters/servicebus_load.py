"""Service Bus side of the load tool and the verifier: sending plans, peeking the DLQ."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from opentelemetry import trace

from orders.adapters.servicebus import message_body_bytes
from orders.domain.dead_letters import DeadLetteredMessage
from orders.domain.load_plan import PlannedSend, PlannedStatus
from orders.domain.ownership import OWNER_PROPERTY
from orders.tracing import current_trace_id, current_trace_properties

PEEK_PAGE = 250
# A schedule request is one management message, held to the broker's message size (256 KB on
# Standard and on the emulators): what it adds around the messages, each measured as a batch
# measures it. Calibrated on the SDK's own request: about 75 bytes per entry (its map, its
# "message-id", "session-id" and "message" keys, the scheduled-time annotation) plus the ids,
# and a few hundred for the request's properties; twice that here, to stay clear of the limit.
SCHEDULE_ENTRY_OVERHEAD = 160
SCHEDULE_REQUEST_OVERHEAD = 2048
# A batch is sent as one message whose envelope carries the first message's id, which the SDK
# (7.15) leaves out of the batch's size: a batch filled to the link's limit is refused by a
# broker that counts every byte (ours does, as Service Bus counts the message it receives).
BATCH_ENVELOPE_MARGIN = 1024
_tracer = trace.get_tracer("orders.load")


def to_message(send: PlannedSend, owner_scope: str | None = None) -> ServiceBusMessage:
    """The planned send as a producer's message; `owner_scope` names who may cancel it through
    the API (the load's cancels run in that scope)."""
    properties: dict[str | bytes, Any] = {"loadKind": send.kind.value}
    if owner_scope is not None:
        properties[OWNER_PROPERTY] = owner_scope
    properties.update(current_trace_properties())
    return ServiceBusMessage(
        send.body,
        message_id=send.message_id,
        content_type="application/json",
        subject="OrderPlaced",
        correlation_id=current_trace_id(),
        application_properties=properties,
    )


def to_status_message(update: PlannedStatus, *, sessions: bool) -> ServiceBusMessage:
    return ServiceBusMessage(
        update.body,
        message_id=update.message_id,
        content_type="application/json",
        subject="OrderStatusChanged",
        correlation_id=update.order_id,
        session_id=update.order_id if sessions else None,
        application_properties={"loadKind": update.kind.value},
    )


class ServiceBusLoadSender:
    """`LoadSender` over the orders queue's sender (batched sends; scheduled sends for bursts)
    and the status queue's (SessionId = orderId on a session queue). Orders carry
    `owner_scope` as their owner when it is given."""

    def __init__(
        self,
        client: ServiceBusClient,
        queue: str,
        status_queue: str | None = None,
        *,
        status_sessions: bool = False,
        owner_scope: str | None = None,
    ) -> None:
        self._owner_scope = owner_scope
        self._sender: ServiceBusSender = client.get_queue_sender(queue)
        self._status_sender = client.get_queue_sender(status_queue) if status_queue else None
        self._status_sessions = status_sessions

    async def __aenter__(self) -> ServiceBusLoadSender:
        await self._sender.__aenter__()
        if self._status_sender is not None:
            await self._status_sender.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._status_sender is not None:
            await self._status_sender.__aexit__(exc_type, exc, traceback)
        await self._sender.__aexit__(exc_type, exc, traceback)

    async def send_status(self, updates: Sequence[PlannedStatus]) -> None:
        if self._status_sender is None:
            raise RuntimeError("this load sender has no status queue")
        messages = [to_status_message(u, sessions=self._status_sessions) for u in updates]
        await send_in_batches(self._status_sender, messages)

    async def send(self, sends: Sequence[PlannedSend]) -> None:
        # One producer span per batch: its context travels on each message it sends.
        with _tracer.start_as_current_span("orders.load.send", kind=trace.SpanKind.PRODUCER):
            await send_in_batches(
                self._sender, [to_message(send, self._owner_scope) for send in sends]
            )

    async def schedule(self, sends: Sequence[PlannedSend], at: datetime) -> None:
        messages = [to_message(s, self._owner_scope) for s in sends]
        async for chunk in schedule_chunks(self._sender, messages):
            await self._sender.schedule_messages(chunk, at)


async def new_batch(sender: ServiceBusSender) -> ServiceBusMessageBatch:
    """An empty batch that fits the link's message size with its envelope."""
    limit = (await sender.create_message_batch()).max_size_in_bytes
    return await sender.create_message_batch(max_size_in_bytes=limit - BATCH_ENVELOPE_MARGIN)


async def send_in_batches(sender: ServiceBusSender, messages: Sequence[ServiceBusMessage]) -> None:
    """Send `messages` in as few requests as the link's message size allows."""
    batch = await new_batch(sender)
    for message in messages:
        try:
            batch.add_message(message)
        except ValueError:  # batch full (MessageSizeExceededError): ship it, start another
            await sender.send_messages(batch)
            batch = await new_batch(sender)
            batch.add_message(message)
    if len(batch):
        await sender.send_messages(batch)


async def schedule_chunks(
    sender: ServiceBusSender, messages: Sequence[ServiceBusMessage]
) -> AsyncIterator[list[ServiceBusMessage]]:
    """`messages` in runs whose schedule request fits the link's message size: every message is
    measured as a batch encodes it, plus what the request adds around it."""
    batch = await sender.create_message_batch()
    budget = batch.max_size_in_bytes - SCHEDULE_REQUEST_OVERHEAD
    chunk: list[ServiceBusMessage] = []
    used = 0
    for message in messages:
        before = batch.size_in_bytes
        try:
            batch.add_message(message)
        except ValueError:  # the measuring batch is full: measure on a fresh one
            batch = await sender.create_message_batch()
            before = batch.size_in_bytes
            batch.add_message(message)  # a message too big for any request raises here
        size = (
            batch.size_in_bytes
            - before
            + SCHEDULE_ENTRY_OVERHEAD
            + len(message.message_id or "")
            + len(message.session_id or "")
        )
        if chunk and used + size > budget:
            yield chunk
            chunk, used = [], 0
        chunk.append(message)
        used += size
    if chunk:
        yield chunk


async def peek_dead_letters(client: ServiceBusClient, queue: str) -> list[DeadLetteredMessage]:
    """Browse the whole dead-letter queue without locking or removing anything."""
    found: list[DeadLetteredMessage] = []
    receiver = client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
    async with receiver:
        next_sequence = 1
        while True:
            page = await receiver.peek_messages(
                max_message_count=PEEK_PAGE, sequence_number=next_sequence
            )
            if not page:
                return found
            for message in page:
                found.append(
                    DeadLetteredMessage(
                        message_id=message.message_id,
                        reason=message.dead_letter_reason,
                        description=message.dead_letter_error_description,
                        body=message_body_bytes(message),
                    )
                )
            last = page[-1].sequence_number
            if last is None:
                return found
            next_sequence = last + 1


async def count_active_messages(client: ServiceBusClient, queue: str, limit: int = 1) -> int:
    """How many messages (up to `limit`) still wait in the queue, locked or not."""
    receiver = client.get_queue_receiver(queue)
    async with receiver:
        return len(await receiver.peek_messages(max_message_count=limit, sequence_number=1))
