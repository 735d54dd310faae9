"""Backing off in place (`exactly_once._backoff`), on a fake clock: the default budget outlasts
a 60 s store outage within one delivery, whatever the jitter draws and however long the SDK's
own retries make each failed attempt; a longer outage costs one delivery per budget; transient
decisions wait, an unexpected failure gets a few immediate retries, each wait is logged (as a
wait, not an abandon), counted and announced, and a stop ends it.
tests/core/test_recoverability.py runs the mechanism against a real outage."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import pytest
from fakes import FakeMessageActions
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sdk_messages import received_message

from exactly_once import (
    Backoff,
    ConsumerOptions,
    Decision,
    Effects,
    ExactlyOnceConsumer,
    Outcome,
    TransientStoreError,
    exactly_once,
)
from exactly_once._backoff import is_retried
from exactly_once.decisions import Decision as AppDecision
from exactly_once.decisions import Outcome as AppOutcome
from exactly_once.decisions import Settlement as AppSettlement
from exactly_once.retries import Retrier, Retry
from exactly_once.servicebus import MessageActionsSettler
from exactly_once.telemetry import Telemetry
from exactly_once.worker import WorkerOptions

ROOT = Path(__file__).resolve().parents[2]


def smallest_max_delivery_count() -> int:
    """The fewest deliveries any entity of the project's own Service Bus config allows."""
    config = json.loads((ROOT / "emulators/servicebus/config.json").read_text(encoding="utf-8"))
    [namespace] = config["UserConfig"]["Namespaces"]
    entities = [*namespace["Queues"]] + [
        subscription for topic in namespace["Topics"] for subscription in topic["Subscriptions"]
    ]
    return min(int(entity["Properties"]["MaxDeliveryCount"]) for entity in entities)


# The project's own MaxDeliveryCount (the Bicep's default is the same; tests/infra keeps them so).
MAX_DELIVERY_COUNT = smallest_max_delivery_count()
TRANSIENT = Decision.abandon(Outcome.TRANSIENT_FAILURE, "Cosmos DB answered 503")


class FakeTime:
    """A clock that moves only when an attempt or a wait says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def wait(self, seconds: float, stop: asyncio.Event | None) -> bool:
        if stop is not None and stop.is_set():
            return False
        self.waits.append(seconds)
        self.now += seconds
        return True


class Outage:
    """A store down from 0 until `ends_at` (seconds): each failed attempt spends
    `attempt_seconds` (the SDK's own retries), a successful one a moment."""

    def __init__(self, time: FakeTime, ends_at: float, attempt_seconds: float) -> None:
        self.time = time
        self.ends_at = ends_at
        self.attempt_seconds = attempt_seconds
        self.attempts = 0

    async def decide(self) -> Decision:
        self.attempts += 1
        if self.time.now < self.ends_at:
            self.time.now += self.attempt_seconds
            return TRANSIENT
        self.time.now += 0.01
        return Decision.complete()


class Always:
    """Decides the same every time, counting the attempts."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.calls = 0

    async def __call__(self) -> Decision:
        self.calls += 1
        return self.decision


def retrier(time: FakeTime, draw: float, backoff: Backoff | None = None) -> Retrier:
    return Retrier(backoff, clock=time.clock, wait=time.wait, draw=lambda: draw)


async def deliveries_until_done(outage: Outage, draw: float) -> int:
    """Deliver the message again (at once, as the broker does after an abandon) until it is
    decided for good; how many deliveries that took."""
    deliveries = 0
    while True:
        deliveries += 1
        decision = await retrier(outage.time, draw).decide(outage.decide, message_id="m")
        if not is_retried(decision):
            return deliveries


@pytest.mark.parametrize("draw", [0.0, 0.999])
@pytest.mark.parametrize("attempt_seconds", [0.05, 2.0, 10.0])
async def test_the_default_budget_outlasts_a_60_s_outage_within_one_delivery(
    draw: float, attempt_seconds: float
) -> None:
    time = FakeTime()
    outage = Outage(time, ends_at=60.0, attempt_seconds=attempt_seconds)

    decision = await retrier(time, draw).decide(outage.decide, message_id="m")

    assert decision.settlement == "complete"  # no delivery spent, no dead letter possible
    assert time.now >= 60.0 and outage.attempts > 1
    assert max(time.waits) <= Backoff().max_delay_seconds


@pytest.mark.parametrize("draw", [0.0, 0.999])
async def test_a_longer_outage_costs_one_delivery_per_budget_and_ten_cover_fifteen_minutes(
    draw: float,
) -> None:
    outage = Outage(FakeTime(), ends_at=15 * 60.0, attempt_seconds=2.0)

    deliveries = await deliveries_until_done(outage, draw)

    assert deliveries <= MAX_DELIVERY_COUNT  # still not MaxDeliveryCountExceeded
    assert deliveries >= 15 * 60 / (Backoff().budget_seconds + Backoff().max_delay_seconds + 2.0)


async def test_backing_off_all_at_once_was_what_dead_lettered_valid_messages() -> None:
    # The behaviour before backing off (a budget of 0): every delivery in a 60 s outage fails
    # in about 2 s, so ten are spent within 20 s and the message would be dead-lettered.
    outage = Outage(FakeTime(), ends_at=60.0, attempt_seconds=2.0)
    no_backoff = Backoff(budget_seconds=0)
    deliveries = 0
    while deliveries < MAX_DELIVERY_COUNT:
        deliveries += 1
        decision = await retrier(outage.time, 0.5, no_backoff).decide(outage.decide, message_id="m")
        if not is_retried(decision):
            break
    assert is_retried(decision) and deliveries == MAX_DELIVERY_COUNT


async def test_when_the_budget_is_spent_the_transient_decision_is_given_back() -> None:
    time = FakeTime()
    outage = Outage(time, ends_at=float("inf"), attempt_seconds=1.0)
    backoff = Backoff(first_delay_seconds=1, max_delay_seconds=4, budget_seconds=30)
    started: list[float] = []

    async def decide() -> Decision:
        started.append(time.now)
        return await outage.decide()

    decision = await retrier(time, 0.999, backoff).decide(decide, message_id="m")

    assert decision == TRANSIENT
    assert max(started) <= backoff.budget_seconds  # no attempt starts after the budget
    assert backoff.budget_seconds - max(started) < backoff.max_delay_seconds + 1.0


@pytest.mark.parametrize(
    "decision",
    [
        Decision.dead_letter(Outcome.MISMATCH, "RequestHashMismatch", "final"),
        Decision.complete(),
    ],
)
async def test_a_final_decision_never_waits(decision: Decision) -> None:
    time, decide = FakeTime(), Always(decision)

    assert await retrier(time, 0.5).decide(decide, message_id="m") == decision
    assert decide.calls == 1 and time.waits == []


BUG = Decision.abandon(Outcome.UNEXPECTED_FAILURE, "PermissionError: 403 from a missing role")


async def test_an_unexpected_failure_gets_three_short_immediate_retries_then_is_handed_back() -> (
    None
):
    time, decide = FakeTime(), Always(BUG)

    decision = await retrier(time, 0.999).decide(decide, message_id="m")

    assert decision == BUG and decide.calls == 1 + Backoff().immediate_retries == 4
    assert time.waits == pytest.approx([0.2, 0.4, 0.8], rel=1e-3)  # short: about 1.4 s in all


async def test_an_unexpected_glitch_that_passes_is_completed_in_the_same_delivery() -> None:
    time = FakeTime()
    answers = [BUG, Decision.complete()]

    async def decide() -> Decision:
        return answers.pop(0)

    decision = await retrier(time, 0.5).decide(decide, message_id="m")

    assert decision.settlement == "complete" and len(time.waits) == 1


@pytest.mark.parametrize(
    "backoff", [Backoff(immediate_retries=0), Backoff(budget_seconds=0)], ids=["none", "no-budget"]
)
async def test_immediate_retries_can_be_turned_off(backoff: Backoff) -> None:
    time, decide = FakeTime(), Always(BUG)

    assert await retrier(time, 0.5, backoff).decide(decide, message_id="m") == BUG
    assert decide.calls == 1 and time.waits == []


def test_the_apps_transient_decisions_wait_too() -> None:
    def app(outcome: AppOutcome) -> AppDecision:
        return AppDecision(outcome, AppSettlement.ABANDON, "o-1")

    assert is_retried(app(AppOutcome.TRANSIENT_FAILURE))
    assert is_retried(app(AppOutcome.IN_PROGRESS_ELSEWHERE))
    assert not is_retried(app(AppOutcome.UNEXPECTED_FAILURE))


async def test_a_stop_ends_the_wait_and_the_message_is_given_back() -> None:
    time = FakeTime()
    stop = asyncio.Event()
    stop.set()

    async def decide() -> Decision:
        return TRANSIENT

    decision = await retrier(time, 0.5).decide(decide, message_id="m", stop=stop)

    assert decision == TRANSIENT and time.waits == []


async def test_each_wait_is_one_log_line_one_count_and_one_announcement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()
    reader = InMemoryMetricReader()
    announced: list[Retry] = []
    counting = Retrier(
        telemetry=Telemetry(meter_provider=MeterProvider(metric_readers=[reader])),
        on_retry=announced.append,
        clock=time.clock,
        wait=time.wait,
        draw=lambda: 0.999,
    )
    outage = Outage(time, ends_at=5.0, attempt_seconds=0.5)

    with caplog.at_level(logging.INFO, logger="exactly_once.backoff"):
        decision = await counting.decide(outage.decide, message_id="m\n1", source="invoices")

    assert decision.settlement == "complete"
    assert [retry.attempt for retry in announced] == list(range(1, outage.attempts))
    assert [retry.delay_seconds for retry in announced] == time.waits
    assert {(retry.message_id, retry.outcome) for retry in announced} == {
        ("m\n1", "transient_failure")
    }
    # A wait says it waits, at INFO: nothing was abandoned (the producer's id stays quoted).
    assert {record.levelno for record in caplog.records} == {logging.INFO}
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == len(announced)
    assert lines[0] == (
        'backing off, deciding again in 0.5 s: key="m\\n1" source=invoices '
        'outcome=transient_failure attempt=1 detail="Cosmos DB answered 503"'
    )
    assert all("abandon" not in line for line in lines)
    data = reader.get_metrics_data()
    assert data is not None
    [point] = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "exactly_once.backoffs"
        for point in metric.data.data_points
    ]
    assert isinstance(point, NumberDataPoint) and point.value == len(announced)
    assert dict(point.attributes or {}) == {
        "exactly_once.outcome": "transient_failure",
        "messaging.destination.name": "invoices",
    }


def test_the_delays_grow_exponentially_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff()
    lowest = [backoff.delay(retry, lambda: 0.0) for retry in range(1, 8)]
    highest = [backoff.delay(retry, lambda: 0.999999) for retry in range(1, 8)]

    assert lowest == [0.25, 0.5, 1.0, 2.0, 4.0, 7.5, 7.5]
    assert highest == pytest.approx([0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0], rel=1e-5)


def test_a_budget_the_lock_renewal_cannot_cover_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="lock-renewal horizon of 200 s"):
        WorkerOptions(max_lock_renewal_seconds=200, backoff=Backoff(budget_seconds=120))
    with pytest.raises(ValueError, match="first_delay_seconds"):
        Backoff(first_delay_seconds=0)
    assert WorkerOptions().backoff == Backoff()


def iso_seconds(duration: str) -> float:
    """host.json's `hh:mm:ss` as seconds."""
    found = re.fullmatch(r"(\d+):(\d+):(\d+(?:\.\d+)?)", duration)
    assert found is not None, duration
    hours, minutes, seconds = found.groups()
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def test_the_functions_host_renews_the_lock_for_longer_than_the_default_backoff() -> None:
    host = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
    renewal = iso_seconds(host["extensions"]["serviceBus"]["maxAutoLockRenewalDuration"])
    backoff = Backoff()

    # The last attempt starts within the budget and may take the SDK's own retries (~30 s on
    # throttling): all of it under the host's renewal.
    assert renewal >= backoff.budget_seconds + backoff.max_delay_seconds + 60
    timeout = host.get("functionTimeout")
    assert timeout is None or iso_seconds(timeout) > renewal


class FlakyEffect:
    """An effect whose store is down for its first `failures` calls."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self, message: bytes, effects: Effects) -> Outcome:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientStoreError("Cosmos DB answered 503")
        return Outcome.PROCESSED


def flaky_consumer(effect: FlakyEffect) -> ExactlyOnceConsumer[bytes]:
    short = Backoff(first_delay_seconds=0.01, max_delay_seconds=0.02, budget_seconds=1.0)
    # The effect never touches the store: none is needed to decide.
    return exactly_once(
        consumer="flaky",
        parse=bytes,
        options=ConsumerOptions(backoff=short),
    )(effect)


async def test_the_functions_call_backs_off_and_completes_in_the_same_delivery() -> None:
    effect, actions = FlakyEffect(failures=2), FakeMessageActions()
    message = received_message("m-1", data=b"{}")

    decision = await flaky_consumer(effect).with_message_actions(message, actions)

    assert decision.outcome is Outcome.PROCESSED and effect.calls == 3
    assert [name for name, _, _ in actions.calls] == ["complete"]


async def test_the_functions_call_is_one_span_on_the_destination_it_is_given() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    effect, actions = FlakyEffect(failures=2), FakeMessageActions()
    consumer = exactly_once(
        consumer="flaky",
        parse=bytes,
        options=ConsumerOptions(
            backoff=Backoff(first_delay_seconds=0.01, max_delay_seconds=0.02, budget_seconds=1.0),
            telemetry=Telemetry(tracer_provider=tracer_provider),
        ),
    )(effect)

    await consumer.with_message_actions(
        received_message("m-1", data=b"{}"), actions, destination="events/Subscriptions/audit"
    )

    # Three attempts, one delivery: one span, named by the destination, settled once.
    [span] = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "process events"
    assert attributes["messaging.destination.subscription.name"] == "audit"
    assert attributes["messaging.servicebus.disposition_status"] == "complete"
    assert [name for name, _, _ in actions.calls] == ["complete"]


async def test_a_loop_that_renews_no_lock_has_its_transient_message_abandoned_at_once() -> None:
    effect, actions = FlakyEffect(failures=2), FakeMessageActions()
    message = received_message("m-1", data=b"{}")
    settler = MessageActionsSettler(actions, message)

    decision = await flaky_consumer(effect).process(message, settler, back_off=False)

    assert decision.outcome is Outcome.TRANSIENT_FAILURE and effect.calls == 1
    assert [name for name, _, _ in actions.calls] == ["abandon"]
