"""The Service Bus glue's one error frame: every outcome an effect can have becomes one
`Decision`, one span and one count; and a decision settles through Functions' message actions
as it does through the SDK receiver (tests/core/test_guide.py, on the emulator)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

import pytest
from fakes import FakeMessageActions
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from exactly_once import (
    ConsumerOptions,
    CosmosStore,
    Decision,
    Effects,
    InProgressElsewhereError,
    Outcome,
    PayloadMismatchError,
    Refused,
    Rejected,
    TransientStoreError,
    exactly_once,
)
from exactly_once.decisions import Settlement, decision_for_error, settle
from exactly_once.exceptions import PreviouslyFailedError, StoreError, StoreRefusedError
from exactly_once.servicebus import MessageActionsSettler
from exactly_once.store import DocumentExistsError, Record, RecordChangedError, RecordStatus
from exactly_once.telemetry import Telemetry

EXISTING = Record(
    key="k", partition="p", request_hash="h", status=RecordStatus.IN_PROGRESS, owner="other"
)
REFUSED_EARLIER = Record(
    key="k",
    partition="p",
    request_hash="h",
    status=RecordStatus.FAILED,
    owner="other",
    result={"reason": "PaymentRefused", "description": "declined"},
)

# What the effect does -> (outcome, settlement, dead-letter reason)
CASES: dict[str, tuple[Any, tuple[Outcome, Settlement, str | None]]] = {
    "processed": (Outcome.PROCESSED, (Outcome.PROCESSED, Settlement.COMPLETE, None)),
    "duplicate": (Outcome.DUPLICATE, (Outcome.DUPLICATE, Settlement.COMPLETE, None)),
    "stale": (Outcome.STALE, (Outcome.STALE, Settlement.COMPLETE, None)),
    "mismatch": (
        PayloadMismatchError("k", "h1", "h2"),
        (Outcome.MISMATCH, Settlement.DEAD_LETTER, "RequestHashMismatch"),
    ),
    "refused": (
        Refused("declined", reason="PaymentRefused"),
        (Outcome.REFUSED, Settlement.DEAD_LETTER, "PaymentRefused"),
    ),
    "refused earlier": (
        PreviouslyFailedError(REFUSED_EARLIER),
        (Outcome.REFUSED, Settlement.DEAD_LETTER, "PaymentRefused"),
    ),
    "effect conflict": (
        DocumentExistsError("doc", 1),
        (Outcome.EFFECT_CONFLICT, Settlement.DEAD_LETTER, "EffectDocumentExists"),
    ),
    "store refused": (
        StoreRefusedError("Cosmos DB answered 400: the id contains '/'"),
        (Outcome.STORE_REFUSED, Settlement.DEAD_LETTER, "StoreRefused"),
    ),
    "the deployment refused": (
        StoreError("Cosmos DB answered 403: the role does not allow it"),
        (Outcome.UNEXPECTED_FAILURE, Settlement.ABANDON, None),
    ),
    "in progress elsewhere": (
        InProgressElsewhereError(EXISTING, 3.0),
        (Outcome.IN_PROGRESS_ELSEWHERE, Settlement.ABANDON, None),
    ),
    "transient": (
        TransientStoreError("429"),
        (Outcome.TRANSIENT_FAILURE, Settlement.ABANDON, None),
    ),
    "moved under us": (
        RecordChangedError("moved"),
        (Outcome.TRANSIENT_FAILURE, Settlement.ABANDON, None),
    ),
    "bug": (KeyError("oops"), (Outcome.UNEXPECTED_FAILURE, Settlement.ABANDON, None)),
    "a failure returned as an outcome": (
        Outcome.MISMATCH,
        (Outcome.UNEXPECTED_FAILURE, Settlement.ABANDON, None),
    ),
    "own decision": (
        Decision.dead_letter(Outcome.REJECTED, "Mine", "my own reason"),
        (Outcome.REJECTED, Settlement.DEAD_LETTER, "Mine"),
    ),
}


def parse_case(body: bytes) -> str:
    case = json.loads(body)["case"]
    if case == "unparseable":
        raise Rejected("not for us", reason="NotForUs")
    return str(case)


async def run_case(case: str, effects: Effects) -> Outcome | Decision:
    behaviour = CASES[case][0]
    if isinstance(behaviour, Exception):
        raise behaviour
    assert isinstance(behaviour, Outcome | Decision)
    return behaviour


@pytest.fixture
def telemetry() -> tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter]:
    reader, exporter = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return (
        Telemetry(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[reader]),
        ),
        reader,
        exporter,
    )


def counts(reader: InMemoryMetricReader) -> dict[tuple[str, str, str], int]:
    found: dict[tuple[str, str, str], int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "exactly_once.messages":
                    continue  # the conventions' metrics: tests/core/test_messaging_telemetry.py
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)
                    attributes = point.attributes or {}
                    key = (
                        str(attributes["exactly_once.consumer"]),
                        str(attributes["exactly_once.outcome"]),
                        str(attributes["exactly_once.settlement"]),
                    )
                    found[key] = int(point.value)
    return found


async def test_every_outcome_is_one_decision_one_span_and_one_count(
    store: CosmosStore,
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
) -> None:
    instruments, reader, exporter = telemetry
    consumer = exactly_once(
        consumer="cases",
        parse=parse_case,
        store=store,
        options=ConsumerOptions(telemetry=instruments),
    )(run_case)

    for number, (case, (_, (outcome, settlement, reason))) in enumerate(CASES.items()):
        body = json.dumps({"case": case}).encode()
        decision = await consumer.decide(body, f"message-{number}")
        assert (decision.outcome, decision.settlement, decision.dead_letter_reason) == (
            outcome,
            settlement,
            reason,
        ), case
        assert (decision.error is not None) == (settlement is Settlement.ABANDON), case

    expected: dict[tuple[str, str, str], int] = {}
    for _, (outcome, settlement, _) in CASES.values():
        key = ("cases", outcome.value, settlement.value)
        expected[key] = expected.get(key, 0) + 1
    assert counts(reader) == expected
    spans = exporter.get_finished_spans()
    assert len(spans) == len(CASES)
    assert [span.attributes["exactly_once.outcome"] for span in spans if span.attributes] == [
        outcome.value for _, (outcome, _, _) in CASES.values()
    ]
    # `decide` is given no destination: the conventions' span name is the operation alone.
    assert {span.name for span in spans} == {"process"}
    assert {span.attributes["exactly_once.consumer"] for span in spans if span.attributes} == {
        "cases"
    }


async def test_a_message_that_cannot_be_parsed_or_named_is_dead_lettered(
    store: CosmosStore,
) -> None:
    consumer = exactly_once(consumer="cases", parse=parse_case, store=store)(run_case)

    refused = await consumer.decide(json.dumps({"case": "unparseable"}).encode(), "m-1")
    broken = await consumer.decide(b"\xff not json", "m-2")
    nameless = await consumer.decide(json.dumps({"case": "processed"}).encode(), None)

    assert (refused.outcome, refused.dead_letter_reason) == (Outcome.REJECTED, "NotForUs")
    assert (broken.outcome, broken.dead_letter_reason) == (Outcome.REJECTED, "InvalidMessage")
    assert (nameless.outcome, nameless.dead_letter_reason) == (
        Outcome.REJECTED,
        "MissingMessageId",
    )


async def test_each_settlement_goes_to_the_message_actions_with_its_reason() -> None:
    # Functions' message actions talk gRPC to the host, which cannot run here: the fake records
    # the calls with the keywords the binding takes.
    actions, message = FakeMessageActions(), object()
    settler = MessageActionsSettler(actions, message)  # type: ignore[arg-type]

    await settle(Decision.complete(), settler)
    await settle(Decision.duplicate(), settler)
    await settle(Decision.abandon(Outcome.TRANSIENT_FAILURE, "429"), settler)
    await settle(Decision.dead_letter(Outcome.MISMATCH, "RequestHashMismatch", "x" * 2000), settler)

    assert [(name, sent is message) for name, sent, _ in actions.calls] == [
        ("complete", True),
        ("complete", True),
        ("abandon", True),
        ("deadletter", True),
    ]
    dead_letter = actions.calls[-1][2]
    assert dead_letter["deadletter_reason"] == "RequestHashMismatch"
    assert len(dead_letter["deadletter_error_description"]) == 1024  # within the broker's limit


def test_the_error_frame_is_one_function_an_app_can_call() -> None:
    for case, (behaviour, (outcome, settlement, reason)) in CASES.items():
        if not isinstance(behaviour, Exception):
            continue
        decision = decision_for_error(behaviour, consumer="cases", message_id="m")
        assert (decision.outcome, decision.settlement, decision.dead_letter_reason) == (
            outcome,
            settlement,
            reason,
        ), case


class Shipping(StrEnum):
    """An application's own outcome, for what only it decides."""

    SKIPPED_CANCELLED = "skipped_cancelled"


async def test_an_applications_own_outcome_is_a_decision_settled_like_any() -> None:
    actions, message = FakeMessageActions(), object()
    skipped = Decision.complete(Shipping.SKIPPED_CANCELLED).about("order-1", "hash-1")

    await settle(skipped, MessageActionsSettler(actions, message))  # type: ignore[arg-type]

    assert (skipped.outcome, skipped.key, skipped.request_hash) == (
        "skipped_cancelled",
        "order-1",
        "hash-1",
    )
    assert [call[0] for call in actions.calls] == ["complete"]
    # Naming the message is not part of the decision: alike but for it, they compare equal.
    assert skipped == Decision.complete(Shipping.SKIPPED_CANCELLED).about("order-2")
    assert skipped != Decision.complete(Outcome.PROCESSED).about("order-1", "hash-1")
