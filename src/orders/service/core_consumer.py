"""A consumer written with the core's front door, `@exactly_once`, run by the app's hosts.

The core's `ExactlyOnceConsumer` decides on a message's body and MessageId; the app's hosts hand
every consumer a `ReceivedOrderMessage` and settle the core's `Decision` it returns.
`CoreConsumer` hands the one to the other (docs/new-consumer.md builds a consumer this way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from exactly_once import ExactlyOnceConsumer, Rejected
from exactly_once.decisions import DeadLetterReason, Decision, Outcome
from orders.domain.messages import MessageRejected
from orders.domain.received import BodyKind, ReceivedOrderMessage

Parsed = TypeVar("Parsed")


def core_parser(parse: Callable[[bytes], Parsed]) -> Callable[[bytes], Parsed]:
    """The app's parser (raising `MessageRejected`) as the core's (raising `Rejected`), so a
    dead letter names the app's reason, as the app's own consumers' do."""

    def parsed(body: bytes) -> Parsed:
        try:
            return parse(body)
        except MessageRejected as rejection:
            raise Rejected(rejection.description, reason=rejection.reason.value) from rejection

    return parsed


class CoreConsumer:
    """A `MessageHandler` over a consumer the core's `@exactly_once` made."""

    def __init__(self, consumer: ExactlyOnceConsumer[Any]) -> None:
        self.consumer = consumer

    async def handle(self, message: ReceivedOrderMessage) -> Decision:
        if message.body_kind is not BodyKind.DATA:
            # As the core decides on a received message: no delivery makes a value bytes.
            return Decision.dead_letter(
                Outcome.REJECTED,
                DeadLetterReason.UNSUPPORTED_BODY_TYPE,
                f"the body is an AMQP {message.body_kind.value} section; send it as data",
            )
        return await self.consumer.decide(message.body, message.message_id)
