"""Received messages built as the Functions SDK-type binding builds them, without a broker.

`azure.servicebus._pyamqp` is the SDK's private AMQP layer (checked with azure-servicebus
7.15): if an SDK upgrade moves it, this one helper is what changes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus._pyamqp.message import Header, Message, Properties


def received_message(
    message_id: str | None,
    *,
    data: bytes | None = None,
    value: Any = None,
    sequence: list[Any] | None = None,
    delivery_count: int | None = 0,
    correlation_id: str | None = None,
    enqueued_time: datetime | None = None,
) -> ServiceBusReceivedMessage:
    """One body section: `data` bytes, else an AMQP `sequence`, else an AMQP `value`.
    `delivery_count=None` leaves the AMQP header out, as the Functions Service Bus extension
    1.0.0b2 does (it decodes the message from the lock-token marker on)."""
    body: dict[str, Any] = {"value": value}
    if data is not None:
        body = {"data": [data]}
    elif sequence is not None:
        body = {"sequence": sequence}
    amqp_message = Message(
        properties=Properties(message_id=message_id, correlation_id=correlation_id),
        header=None if delivery_count is None else Header(delivery_count=delivery_count),
        message_annotations={
            b"x-opt-sequence-number": 7,
            # The broker's time it took the message in, as AMQP timestamps are: ms since 1970.
            **(
                {b"x-opt-enqueued-time": int(enqueued_time.timestamp() * 1000)}
                if enqueued_time is not None
                else {}
            ),
        },
        **body,
    )
    return ServiceBusReceivedMessage(amqp_message, receiver=None)
