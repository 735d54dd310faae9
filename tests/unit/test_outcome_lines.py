"""What an operator reads (issue 43): one outcome line per delivery, its final decision, naming
the consumer and the key as the consumer defines it (a CloudEvent's source and id) beside the
MessageId; an attempt that backs off logs a wait at INFO, never an abandon that did not happen.

The effects here touch no store (none is needed to decide), so the consumer runs without one."""

from __future__ import annotations

import json
import logging

import pytest
from fakes import FakeMessageActions
from sdk_messages import received_message

from exactly_once import (
    Backoff,
    Effects,
    ExactlyOnceConsumer,
    Outcome,
    cloud_event_key,
    exactly_once,
)

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
        store=None,  # type: ignore[arg-type]
        key=cloud_event_key,
        backoff=Backoff(first_delay_seconds=0.01, max_delay_seconds=0.02, budget_seconds=1.0),
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
