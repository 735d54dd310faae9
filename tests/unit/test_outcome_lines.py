"""What an operator reads (issue 43): one outcome line per delivery, its final decision, naming
the consumer and the key as the consumer defines it (a CloudEvent's source and id) beside the
MessageId; an attempt that backs off logs a wait at INFO, never an abandon that did not happen.

The effects here touch no store (none is needed to decide), so the consumer runs without one."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
from fakes import FakeIdempotencyStore, FakeMessageActions
from sdk_messages import received_message

from exactly_once import (
    Backoff,
    ConsumerOptions,
    Effects,
    ExactlyOnceConsumer,
    Outcome,
    cloud_event_key,
    exactly_once,
)
from exactly_once._attempts import current_delivery, one_delivery
from exactly_once._claims import Claims
from exactly_once.store import Record, RecordStatus

EVENT = json.dumps(
    {"specversion": "1.0", "source": "/stock", "id": "e-42", "type": "reserved", "data": {}}
).encode()


class DownFor:
    """An effect whose downstream is unreachable for its first `failures` calls."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self, event: bytes, effects: Effects) -> Outcome:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("the warehouse is unreachable")
        return Outcome.PROCESSED


def stock_consumer(effect: DownFor) -> ExactlyOnceConsumer[bytes]:
    return exactly_once(
        consumer="stock",
        parse=bytes,
        options=ConsumerOptions(
            key=cloud_event_key,
            backoff=Backoff(first_delay_seconds=0.01, max_delay_seconds=0.02, budget_seconds=1.0),
        ),
    )(effect)


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == logger]


async def test_a_delivery_that_backs_off_logs_its_waits_and_one_outcome_line_with_its_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    effect, actions = DownFor(failures=2), FakeMessageActions()

    with caplog.at_level(logging.INFO, logger="exactly_once"):
        decision = await stock_consumer(effect).with_message_actions(
            received_message("m-1", data=EVENT), actions
        )

    assert decision.outcome is Outcome.PROCESSED and effect.calls == 3
    [outcome] = lines(caplog, "exactly_once.outcomes")
    assert outcome.levelno == logging.INFO
    assert outcome.getMessage().startswith(
        'consumer=stock key="[\\"/stock\\",\\"e-42\\"]" message_id=m-1 outcome=processed '
        "settlement=complete attempts=3 duration_ms="
    )
    waits = lines(caplog, "exactly_once.backoff")
    assert [record.levelno for record in waits] == [logging.INFO, logging.INFO]
    assert all(
        record.getMessage().startswith("backing off, deciding again in ")
        and 'consumer=stock key="[\\"/stock\\",\\"e-42\\"]" message_id=m-1' in record.getMessage()
        and "outcome=transient_failure" in record.getMessage()
        for record in waits
    )
    assert not [r for r in caplog.records if "settlement=abandon" in r.getMessage()]


async def test_only_a_delivery_that_gives_up_logs_an_abandon(
    caplog: pytest.LogCaptureFixture,
) -> None:
    effect, actions = DownFor(failures=1_000), FakeMessageActions()

    with caplog.at_level(logging.INFO, logger="exactly_once"):
        decision = await stock_consumer(effect).with_message_actions(
            received_message("m-2", data=EVENT), actions
        )

    assert decision.outcome is Outcome.TRANSIENT_FAILURE
    assert [name for name, _, _ in actions.calls] == ["abandon"]
    [outcome] = lines(caplog, "exactly_once.outcomes")
    assert outcome.levelno == logging.WARNING
    assert f"settlement=abandon attempts={effect.calls} " in outcome.getMessage()
    assert len(lines(caplog, "exactly_once.backoff")) == effect.calls - 1


async def test_a_decision_outside_a_retrier_logs_its_line_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="exactly_once.outcomes"):
        decision = await stock_consumer(DownFor(failures=0)).decide(EVENT, "m-3")

    assert decision.key == '["/stock","e-42"]'
    [outcome] = caplog.records
    assert " message_id=m-3 outcome=processed settlement=complete duration_ms=" in (
        outcome.getMessage()
    )
    assert "attempts=" not in outcome.getMessage()


class Clock:
    """The fake store's database time, moved on by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_takeover_line_names_the_consumer_and_the_key_of_the_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The record id is a hash an operator cannot search for; the delivery's consumer and key
    (a CloudEvent's source and id) are what the line leads with."""
    clock = Clock()
    store = FakeIdempotencyStore(database_clock=clock)
    wanted = Record("rec-1", "rec-1", "hash", RecordStatus.IN_PROGRESS, owner="a", lease_seconds=5)
    await Claims(store, owner="a", lease_seconds=5).own(wanted)
    clock.now += 60  # the first owner's lease ended

    with caplog.at_level(logging.WARNING, logger="exactly_once"), one_delivery() as delivery:
        delivery.consumer, delivery.message_id, delivery.key = "stock", "m-9", '["/stock","e-9"]'
        taken = await Claims(store, owner="b").own(replace(wanted, owner="b"))

    assert taken.owner == "b"
    [line] = [record for record in caplog.records if "took over" in record.getMessage()]
    assert line.getMessage() == (
        "took over a claim whose owner's lease ended: "
        'consumer=stock key="[\\"/stock\\",\\"e-9\\"]" message_id=m-9 record=rec-1 from=a '
        "attempt=2"
    )


async def test_the_consumer_names_the_key_it_found_on_the_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the takeover line reads: the key, set on the open delivery once it is known."""
    seen: list[tuple[str | None, str | None]] = []

    async def effect(event: bytes, effects: Effects) -> Outcome:
        delivery = current_delivery()
        assert delivery is not None
        seen.append((delivery.consumer, delivery.key))
        return Outcome.PROCESSED

    consumer = exactly_once(
        consumer="stock",
        parse=bytes,
        options=ConsumerOptions(key=cloud_event_key),
    )(effect)
    await consumer.with_message_actions(received_message("m-4", data=EVENT), FakeMessageActions())

    assert seen == [("stock", '["/stock","e-42"]')]
