"""Delayed retries: when backing off in place has not fixed a failure, the message comes back
later as a scheduled copy, a bounded number of times, and only then is it dead-lettered.

Why: a delivery that spent its in-place budget (`exactly_once._backoff`) and is abandoned comes
back at once, so a downstream that is down for ten minutes spends MaxDeliveryCount deliveries
in a few budgets and the message is dead-lettered (`MaxDeliveryCountExceeded`) although nothing
was wrong with it. NServiceBus and MassTransit answer with delayed retries (on Service Bus, a
scheduled copy); so does this module. `DelayedRetries()` brings a message back 1, 2 and 3
minutes later (6 minutes, plus four in-place budgets of up to 2 minutes each) and then
dead-letters it, reason `RetriesExhausted`, with what failed and how often.

What is retried later: a decision that still abandons once the in-place budget is spent, with
the outcome `transient_failure`, `in_progress_elsewhere` or `unexpected_failure`. An abandon
of an outcome of your own is left an abandon, and so is one made while the worker stops.

The copy is one message with its original (one effect): it carries the original MessageId and
its retry number in application properties, and the consumer reads the original MessageId
back (for `message_id_key`, `Delivered.message_id`, the records). The copy's own MessageId is
new and deterministic (`copy_message_id`): a resend of the same copy may be dropped by the
broker's duplicate detection (one copy remains) or kept (its records make it a duplicate), so
correctness depends on neither. Body, content type, subject, correlation id, session id, reply
to and the application properties are kept.

Scheduling the copy and completing the original are not atomic: when the completion fails
after the copy was scheduled, both come back, and the records make the second a duplicate
(`tests/core/test_delayed_retries.py`). Where the copy cannot be scheduled (no scheduler, a
failed schedule, a body that is not AMQP data), the message is abandoned, as without delayed
retries, so it is never lost.

A topic's subscription: a copy is scheduled on the topic, which gives it to every
subscription. It names the subscription it is for (`ExactlyOnceSubscription`); a consumer
that knows its own subscription completes a copy addressed to another as `not_ours` without
running its effect. A SQL filter on each subscription
(`ExactlyOnceSubscription IS NULL OR ExactlyOnceSubscription = '<name>'`, the orders app's
Bicep and emulator config) keeps the copy from the others in the first place.

A hostile sender: the three properties are the sender's bytes like the MessageId, and they
gain it nothing it could not do with its own message otherwise. An original MessageId names
the records the message is judged under, which choosing that MessageId does too; a retry count
brings its own message's dead letter sooner; a subscription name keeps its own message from
the other subscriptions, which not sending it does too; a MessageId equal to some copy's makes
duplicate detection drop one of the two, which sending the victim's MessageId first does too.
Each value is bounded and checked (a MessageId of at most 128 characters, a retry number from
1 to `MAX_RETRIES`, a subscription name of at most 50 characters): a message whose properties
are malformed is dead-lettered on its first delivery, reason `InvalidRetryProperties`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.amqp import AmqpMessageBodyType
from azure.servicebus.exceptions import ServiceBusError

from exactly_once._attempts import current_delivery
from exactly_once._logs import log_value
from exactly_once.decisions import (
    DeadLetterReason,
    Decision,
    Outcome,
    Settleable,
    Settlement,
    described,
    naming,
    truncate,
)
from exactly_once.telemetry import Destination

__all__ = [
    "ORIGINAL_MESSAGE_ID_PROPERTY",
    "RETRY_PROPERTY",
    "SUBSCRIPTION_PROPERTY",
    "CopyScheduler",
    "DelayedRetries",
    "Redelivery",
    "later",
    "not_ours",
    "original_message_id",
    "received_redelivery",
    "redelivery_of",
    "subscription_filter",
]

logger = logging.getLogger("exactly_once.delayed_retries")

ORIGINAL_MESSAGE_ID_PROPERTY = "ExactlyOnceOriginalMessageId"
"""The application property of a copy that names the MessageId it was copied from."""
RETRY_PROPERTY = "ExactlyOnceRetry"
"""The application property of a copy that holds its delayed retry's number (1 for the first)."""
SUBSCRIPTION_PROPERTY = "ExactlyOnceSubscription"
"""The application property of a copy scheduled on a topic: the one subscription it is for.
Plain identifiers, so a subscription's SQL filter names them without brackets."""

MAX_RETRIES = 100
"""The most delayed retries a policy may ask for, and the highest retry number a copy may carry."""
MAX_MESSAGE_ID_CHARS = 128  # Service Bus's limit on a MessageId
MAX_SUBSCRIPTION_CHARS = 50  # Service Bus's limit on a subscription's name

# The outcomes worth a delayed retry (values: an application's outcome types share them).
DELAYED_OUTCOMES = frozenset(
    {
        Outcome.TRANSIENT_FAILURE.value,
        Outcome.IN_PROGRESS_ELSEWHERE.value,
        Outcome.UNEXPECTED_FAILURE.value,
    }
)


@dataclass(frozen=True)
class DelayedRetries:
    """How often, and how much later, a message whose in-place budget is spent comes back.

    Retry n (1 for the first) is delivered `n * delay_seconds` after the delivery before it
    gave up; after `retries` of them the message is dead-lettered (`RetriesExhausted`).
    `retries=0` turns delayed retries off: the message is abandoned, as before."""

    retries: int = 3
    delay_seconds: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"delayed retries must be between 0 and {MAX_RETRIES}")
        if not self.delay_seconds > 0:
            raise ValueError("a delayed retry's delay_seconds must be positive")

    def delay(self, retry: int) -> float:
        """The delay before retry number `retry` (1 for the first)."""
        return retry * self.delay_seconds


@dataclass(frozen=True)
class Redelivery:
    """What a received message says of its delayed retries: the MessageId its records are
    named by (the original's, for a copy), its retry number (0 for an original), and the one
    subscription it is for (a copy scheduled on a topic)."""

    message_id: str | None
    retry: int = 0
    subscription: str | None = None

    def is_for(self, subscription: str | None) -> bool:
        """Whether a consumer on `subscription` (None: a queue, or not known) should take it."""
        return (
            self.subscription is None or subscription is None or self.subscription == subscription
        )


def redelivery_of(
    properties: Mapping[str, object], message_id: str | None
) -> Redelivery | Decision:
    """The delayed-retry view of a message with these application properties (names as text)
    and this MessageId; a dead-letter `Decision` when its delayed-retry properties are
    malformed. Total: any value of any type gives one or the other."""
    found = [
        properties.get(name)
        for name in (ORIGINAL_MESSAGE_ID_PROPERTY, RETRY_PROPERTY, SUBSCRIPTION_PROPERTY)
    ]
    if found == [None, None, None]:
        return Redelivery(message_id)
    original = _bounded_text(found[0], MAX_MESSAGE_ID_CHARS)
    retry = found[1]
    subscription = _bounded_text(found[2], MAX_SUBSCRIPTION_CHARS)
    problems = []
    if original is None:
        problems.append(f"{ORIGINAL_MESSAGE_ID_PROPERTY} must be 1 to 128 characters of text")
    if isinstance(retry, bool) or not isinstance(retry, int) or not 1 <= retry <= MAX_RETRIES:
        problems.append(f"{RETRY_PROPERTY} must be a whole number from 1 to {MAX_RETRIES}")
    if found[2] is not None and subscription is None:
        problems.append(f"{SUBSCRIPTION_PROPERTY} must be 1 to 50 characters of text")
    if original is None or not isinstance(retry, int) or problems:
        return Decision.dead_letter(
            Outcome.REJECTED,
            DeadLetterReason.INVALID_RETRY_PROPERTIES,
            "the message's delayed-retry properties are malformed: " + "; ".join(problems),
        )
    return Redelivery(original, retry, subscription)


def _bounded_text(value: object, limit: int) -> str | None:
    """`value` as text of 1 to `limit` characters, else None. The SDK hands an AMQP string
    property over as UTF-8 bytes; bytes that are not UTF-8 are no text."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def subscription_filter(subscription: str) -> str:
    """The SQL filter that lets `subscription` receive every message except a delayed retry's
    copy addressed to another subscription of its topic: give it in place of the default rule
    (Bicep: the subscription's `$Default` rule; our emulator's config: its only rule)."""
    quoted = subscription.replace("'", "''")
    return f"{SUBSCRIPTION_PROPERTY} IS NULL OR {SUBSCRIPTION_PROPERTY} = '{quoted}'"


def copy_message_id(original: str, retry: int) -> str:
    """A copy's MessageId: deterministic from the original and the retry number (a resend of
    the same copy has the same one), distinct from every MessageId a producer picks by chance,
    and within Service Bus's 128 characters whatever the original's length."""
    digest = hashlib.sha256(f"{retry}\n{original}".encode()).hexdigest()[:40]
    return f"retry-{retry}-{digest}"


def later(
    decision: Settleable,
    redelivery: Redelivery,
    policy: DelayedRetries | None,
    *,
    attempts: int,
) -> Settleable:
    """What becomes of `decision`, the last of a delivery whose in-place budget is spent: a
    delayed retry while the policy has one left, a dead letter (`RetriesExhausted`) when
    it has none, and `decision` itself when it is not a failure worth a delayed retry or the
    policy is off. `attempts` counts the decisions this delivery made."""
    outcome = str(getattr(decision, "outcome", ""))
    if (
        policy is None
        or policy.retries == 0
        or str(decision.settlement) != Settlement.ABANDON.value
        or outcome not in DELAYED_OUTCOMES
    ):
        return decision
    error = str(getattr(decision, "error", None) or "")
    key = getattr(decision, "key", None)
    request_hash = getattr(decision, "request_hash", None)
    about = _naming(redelivery.message_id, key)
    if redelivery.retry < policy.retries:
        retry = redelivery.retry + 1
        delay = policy.delay(retry)
        logger.warning(
            "%s: %s after %d attempt(s), delayed retry %d of %d in %g s: %s",
            about,
            outcome,
            attempts,
            retry,
            policy.retries,
            delay,
            log_value(truncate(error, 300)),
        )
        return Decision.retry_later(
            Outcome(outcome), error, retry=retry, delay_seconds=delay
        ).about(key, request_hash)
    description = (
        f"{outcome} after {redelivery.retry} delayed retries and {attempts} attempt(s) in the "
        f"last delivery: {error}"
    )
    logger.warning("%s: %s, dead-lettering it", about, log_value(truncate(description, 300)))
    return Decision.dead_letter(
        Outcome(outcome), DeadLetterReason.RETRIES_EXHAUSTED, description
    ).about(key, request_hash)


def _naming(message_id: str | None, key: object) -> str:
    """The consumer and the key of the delivery deciding (`decisions.naming`) when a `Retrier`
    opened one for a consumer that said its name; else the MessageId and the key."""
    delivery = current_delivery()
    key_text = key if isinstance(key, str) else None
    if delivery is not None and delivery.consumer is not None:
        return naming(delivery.consumer, message_id, key_text)
    about = f"message {log_value(message_id or '')}"
    if key_text is not None and key_text != message_id:
        about += f" key={log_value(key_text)}"
    return about


def not_ours() -> Decision:
    """The decision on a delayed retry addressed to another subscription of the topic."""
    return Decision.complete(Outcome.NOT_OURS)


def received_redelivery(message: ServiceBusReceivedMessage) -> Redelivery | Decision:
    """`redelivery_of` a received message."""
    return redelivery_of(application_properties(message), _message_id(message))


def original_message_id(message: ServiceBusReceivedMessage) -> str | None:
    """The MessageId a received message's records are named by: the original's for a delayed
    retry's copy, else its own (also when its delayed-retry properties are malformed: the
    worker and the consumer dead-letter those before any handler sees them). A handler of your
    own under `run_worker` reads it in place of `message.message_id`."""
    found = received_redelivery(message)
    return found.message_id if isinstance(found, Redelivery) else _message_id(message)


def _message_id(message: ServiceBusReceivedMessage) -> str | None:
    return str(message.message_id) if message.message_id is not None else None


def application_properties(message: ServiceBusReceivedMessage) -> dict[str, object]:
    """A received message's application properties, their names as text (the SDK may hand
    AMQP symbols over as bytes)."""
    found: Mapping[Any, Any] = message.application_properties or {}
    return {
        name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name): value
        for name, value in found.items()
    }


def _as_sent(value: object) -> object:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def copy_of(
    message: ServiceBusReceivedMessage, *, retry: int, subscription: str | None
) -> ServiceBusMessage | None:
    """The copy to schedule as delayed retry `retry`; None for a body that is not AMQP data
    (the core never decides on one) or a message without a MessageId."""
    redelivery = received_redelivery(message)
    if message.body_type is not AmqpMessageBodyType.DATA or not isinstance(redelivery, Redelivery):
        return None
    original = redelivery.message_id
    if original is None:
        return None
    # The SDK hands AMQP strings over as bytes: sent back as bytes they would be binary, and a
    # subscription's filter on the copy (`currency = 'EUR'`) would no longer match it. Text
    # goes back as text, so the copy meets the entity's rules as its original did.
    properties: dict[str | bytes, object] = {
        name: _as_sent(value)
        for name, value in application_properties(message).items()
        if name not in (ORIGINAL_MESSAGE_ID_PROPERTY, RETRY_PROPERTY, SUBSCRIPTION_PROPERTY)
    }
    properties[ORIGINAL_MESSAGE_ID_PROPERTY] = original
    properties[RETRY_PROPERTY] = retry
    if subscription is not None:
        properties[SUBSCRIPTION_PROPERTY] = subscription
    body = b"".join(bytes(chunk) for chunk in message.body)
    return ServiceBusMessage(
        body,
        message_id=copy_message_id(original, retry),
        application_properties=properties,  # type: ignore[arg-type]
        session_id=message.session_id,
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        subject=message.subject,
        to=message.to,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
        partition_key=message.partition_key,
        time_to_live=message.time_to_live,
    )


class CopyScheduler:
    """Schedules delayed retries' copies on the entity a consumer receives from: the queue,
    or the topic of its subscription (the copy then names the subscription). One per process
    and entity, built over the process's `ServiceBusClient`; close it with the client.

    `run_worker` builds its own. In Functions, build one at import beside your other clients
    and pass it to `with_message_actions(..., scheduler=...)`."""

    def __init__(self, client: ServiceBusClient, entity_path: str) -> None:
        destination = Destination.of_entity(entity_path)
        self.entity_path = entity_path
        self.subscription = destination.subscription
        """The subscription the consumer receives from (None on a queue)."""
        self._sender: ServiceBusSender = (
            client.get_topic_sender(destination.name)
            if destination.subscription is not None
            else client.get_queue_sender(destination.name)
        )
        # The SDK's sender opens its link on first use, and two tasks opening it at once break
        # it: one schedule at a time (a round trip each; delayed retries are not the hot path).
        self._one_at_a_time = asyncio.Lock()

    async def schedule_copy(
        self, message: ServiceBusReceivedMessage, *, retry: int, delay_seconds: float
    ) -> bool:
        """Schedule `message`'s copy as delayed retry `retry`, `delay_seconds` from now; False
        (logged) when it could not be, so the caller abandons instead."""
        copy = copy_of(message, retry=retry, subscription=self.subscription)
        if copy is None:
            logger.warning(
                "message %s cannot be copied for a delayed retry; abandoning it",
                log_value(message.message_id),
            )
            return False
        at = datetime.now(UTC) + timedelta(seconds=delay_seconds)
        try:
            async with self._one_at_a_time:
                await self._sender.schedule_messages(copy, at)
        except (ServiceBusError, ValueError, TypeError) as exc:
            # Nothing was scheduled (or nothing we can tell of): abandoning keeps the message.
            logger.warning(
                "scheduling delayed retry %d of message %s on %s failed; abandoning it: %s",
                retry,
                log_value(message.message_id),
                self.entity_path,
                log_value(described(exc)),
            )
            return False
        return True

    async def close(self) -> None:
        """Close the sender (the client closes its own connection)."""
        await self._sender.close()
