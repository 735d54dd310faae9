"""A consumer written with the core's front door, `@exactly_once`, run by the app's hosts.

The core's `ExactlyOnceConsumer` decides on a message's body and MessageId; the app's hosts hand
every consumer a `ReceivedOrderMessage` and settle the app's `Decision`. `CoreConsumer` is the
one bridge between them (docs/new-consumer.md builds a consumer this way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from exactly_once import ExactlyOnceConsumer, Rejected
from exactly_once.decisions import DeadLetterReason
from exactly_once.decisions import Decision as CoreDecision
from exactly_once.decisions import Outcome as CoreOutcome
from orders.domain.messages import MessageRejected
from orders.domain.outcomes import Decision
from orders.domain.received import BodyKind, ReceivedOrderMessage
from orders.service.subscriber import from_core

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
            refused = CoreDecision.dead_letter(
                CoreOutcome.REJECTED,
                DeadLetterReason.UNSUPPORTED_BODY_TYPE,
                f"the body is an AMQP {message.body_kind.value} section; send it as data",
            )
            return from_core(refused, None, None)
        decided = await self.consumer.decide(message.body, message.message_id)
        return from_core(decided, None, None)
