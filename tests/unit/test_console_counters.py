"""What the console counts and how it reads untrusted text: decision journals (lines and the
files that grow under it), sequence numbers, and its settings."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactly_once.decisions import Outcome, Settlement
from exactly_once.retries import Retry
from orders.adapters.decision_journals import JournalFolder, consumer_of
from orders.domain.dead_letters import MAX_SEQUENCE_NUMBER, parse_sequence_number
from orders.domain.decision_counters import (
    BUCKET_SECONDS,
    COUNTERS,
    KIND_COUNTERS,
    MAX_BACKING_OFF,
    MAX_BUCKETS,
    MAX_CONSUMERS,
    MAX_LINE_BYTES,
    DecisionCounters,
    counted_as,
    kind_counter,
    parse_journal_line,
)
from orders.domain.order_outcomes import OrderOutcome
from orders.entrypoints.console_pages import COUNTER_LABELS, COUNTER_MEANINGS
from orders.entrypoints.worker import decision_journal
from orders.settings import Settings, SettingsError


def line(outcome: str, settlement: str, at: float) -> bytes:
    return json.dumps({"outcome": outcome, "settlement": settlement, "at": at}).encode()


@pytest.mark.parametrize(
    ("outcome", "settlement", "names"),
    [
        ("processed", "complete", ["decisions", "processed"]),
        ("duplicate", "complete", ["decisions", "duplicates"]),
        ("mismatch", "dead_letter", ["decisions", "mismatches", "dead_lettered"]),
        ("rejected", "dead_letter", ["decisions", "rejected", "dead_lettered"]),
        ("transient_failure", "abandon", ["decisions", "transient_failure", "abandoned"]),
        ("skipped_cancelled", "complete", ["decisions", "skipped_cancelled"]),
        ("nothing_to_refund", "complete", ["decisions", "nothing_to_refund"]),
        ("from_a_newer_worker", "complete", ["decisions", "unknown_outcome"]),
    ],
)
def test_each_outcome_counts_where_an_operator_expects(
    outcome: str, settlement: str, names: list[str]
) -> None:
    assert counted_as({"outcome": outcome, "settlement": settlement}) == names


def test_every_decision_kind_has_a_counter_of_its_own_with_a_label_and_a_meaning() -> None:
    outcomes = (*Outcome, *OrderOutcome)
    kinds = {kind_counter(outcome.value) for outcome in outcomes}
    assert len(kinds) == len(outcomes) and kinds <= set(KIND_COUNTERS)
    assert list(COUNTER_LABELS) == list(COUNTERS) == list(COUNTER_MEANINGS)


async def test_each_consumers_counters_equal_its_decision_log(tmp_path: Path) -> None:
    """Every kind each consumer decided, counted once: the counts add up to the log."""
    journals: dict[str, list[Outcome | OrderOutcome]] = {
        "worker-1": [Outcome.PROCESSED, Outcome.DUPLICATE, Outcome.MISMATCH, Outcome.REJECTED],
        "billing-1": [Outcome.PROCESSED, OrderOutcome.SKIPPED_CANCELLED,
                      OrderOutcome.NOTHING_TO_REFUND, OrderOutcome.REFUNDED,
                      Outcome.TRANSIENT_FAILURE, OrderOutcome.REFUNDED],
        "shipping-1": [Outcome.PROCESSED, OrderOutcome.SKIPPED_CANCELLED, OrderOutcome.IGNORED],
        "status-1": [Outcome.PROCESSED, Outcome.STALE, OrderOutcome.ILLEGAL_TRANSITION],
    }  # fmt: skip
    settled: dict[Outcome | OrderOutcome, Settlement] = {
        Outcome.MISMATCH: Settlement.DEAD_LETTER, Outcome.REJECTED: Settlement.DEAD_LETTER,
        OrderOutcome.ILLEGAL_TRANSITION: Settlement.DEAD_LETTER,
        Outcome.TRANSIENT_FAILURE: Settlement.ABANDON}  # fmt: skip
    for name, outcomes in journals.items():
        (tmp_path / f"{name}.decisions.jsonl").write_bytes(
            b"".join(
                line(outcome, settled.get(outcome, Settlement.COMPLETE), 1.0) + b"\n"
                for outcome in outcomes
            )
        )

    counters = await JournalFolder(tmp_path).counters()

    for name, outcomes in journals.items():
        counts = counters.by_consumer[consumer_of(Path(f"{name}.decisions.jsonl"))]
        logged = Counter(kind_counter(outcome.value) for outcome in outcomes)
        assert {kind: counts[kind] for kind in KIND_COUNTERS if counts[kind]} == logged
        assert counts["decisions"] == len(outcomes) == sum(counts[k] for k in KIND_COUNTERS)
    assert counters.by_consumer["billing"]["abandoned"] == 1
    assert counters.totals["dead_lettered"] == 3


def test_buckets_hold_the_recent_past_and_totals_everything() -> None:
    counters = DecisionCounters()
    for index in range(MAX_BUCKETS + 10):
        counters.add_line(line("processed", "complete", index * BUCKET_SECONDS))

    now = (MAX_BUCKETS + 9) * BUCKET_SECONDS
    view = counters.to_json(now)

    assert view["totals"]["processed"] == MAX_BUCKETS + 10
    assert len(counters.buckets) == MAX_BUCKETS
    assert len(view["series"]) == MAX_BUCKETS
    assert view["series"][-1] == {
        "at": now, **dict.fromkeys(COUNTERS, 0), "decisions": 1, "processed": 1
    }  # fmt: skip


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[1, 2]",
        b"not json",
        b'{"outcome": "processed", "at": "later"}',
        b'{"outcome": "processed", "at": NaN}',
        b'{"outcome": "processed", "at": -1}',
        b'{"outcome": "processed"}',
        b"[" * 2000 + b"]" * 2000,  # deep nesting within the size bound
        b'{"outcome": "processed", "at": 1, "pad": "' + b"x" * MAX_LINE_BYTES + b'"}',
        b"\xff\xfe",
    ],
)
def test_a_bad_journal_line_is_skipped_and_counted_as_skipped(raw: bytes) -> None:
    counters = DecisionCounters()
    counters.add_line(raw)
    assert counters.skipped_lines == 1
    assert sum(counters.totals.values()) == 0


@given(st.binary(max_size=300))
def test_parsing_any_bytes_never_raises(raw: bytes) -> None:
    entry = parse_journal_line(raw)
    assert entry is None or isinstance(entry, dict)


async def test_the_folder_is_read_as_it_grows_across_files_and_partial_lines(
    tmp_path: Path,
) -> None:
    first = tmp_path / "worker-1.decisions.jsonl"
    second = tmp_path / "worker-2.decisions.jsonl"
    (tmp_path / "other.log").write_text("not a journal\n")
    first.write_bytes(
        line("processed", "complete", 1) + b"\n" + line("duplicate", "complete", 2)[:10]
    )
    feed = JournalFolder(tmp_path)

    before = dict((await feed.counters()).totals)
    with first.open("ab") as journal:
        journal.write(line("duplicate", "complete", 2)[10:] + b"\n")
    second.write_bytes(line("mismatch", "dead_letter", 3) + b"\n")
    after = (await feed.counters()).totals

    zero = dict.fromkeys(COUNTERS, 0)
    assert before == zero | {"decisions": 1, "processed": 1}
    assert after == zero | {
        "decisions": 3, "processed": 1, "duplicates": 1, "mismatches": 1, "dead_lettered": 1
    }  # fmt: skip


async def test_an_endless_line_is_dropped_and_reading_goes_on(tmp_path: Path) -> None:
    journal = tmp_path / "worker-1.decisions.jsonl"
    journal.write_bytes(b"x" * (MAX_LINE_BYTES + 10))
    feed = JournalFolder(tmp_path)
    assert (await feed.counters()).skipped_lines == 1
    with journal.open("ab") as out:
        out.write(b"\n" + line("processed", "complete", 1) + b"\n")
    counters = await feed.counters()
    assert counters.totals["processed"] == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        (str(MAX_SEQUENCE_NUMBER), MAX_SEQUENCE_NUMBER),
        (str(MAX_SEQUENCE_NUMBER + 1), None),
        ("0", None),
        ("-3", None),
        ("+3", None),
        ("3 ", None),
        ("٣", None),
        ("1_000", None),
        ("9" * 10_000, None),
    ],
)
def test_sequence_numbers_from_text(text: str, expected: int | None) -> None:
    assert parse_sequence_number(text) == expected


@given(st.text(max_size=30))
def test_a_parsed_sequence_number_is_always_in_range(text: str) -> None:
    value = parse_sequence_number(text)
    assert value is None or (1 <= value <= MAX_SEQUENCE_NUMBER and str(value) == text.lstrip("0"))


def test_console_settings_default_off_and_parse() -> None:
    plain = Settings.from_env({"COSMOS_ENDPOINT": "https://cosmos.test"})
    configured = Settings.from_env(
        {
            "COSMOS_ENDPOINT": "https://cosmos.test",
            "ORDERS_CONSOLE_ENABLED": "TRUE",
            "ORDERS_CONSOLE_SUBSCRIPTIONS": "order-events/billing, order-events/shipping",
            "ORDERS_DUPLICATE_WINDOW_SECONDS": "5",
            "ORDERS_DECISIONS_DIR": "/tmp/journals",
        }
    )

    assert (plain.console_enabled, plain.console_subscriptions) == (False, ())
    assert plain.duplicate_window_seconds == 600 and plain.decisions_folder is None
    assert configured.console_enabled
    assert configured.console_subscriptions == (
        ("order-events", "billing"),
        ("order-events", "shipping"),
    )
    assert configured.duplicate_window_seconds == 5
    assert configured.decisions_folder == "/tmp/journals"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ORDERS_CONSOLE_SUBSCRIPTIONS", "no-slash"),
        ("ORDERS_CONSOLE_SUBSCRIPTIONS", "topic/"),
        ("ORDERS_CONSOLE_SUBSCRIPTIONS", "a/b/c"),
        ("ORDERS_DUPLICATE_WINDOW_SECONDS", "-5"),
        ("ORDERS_DUPLICATE_WINDOW_SECONDS", "ten"),
        ("ORDERS_DUPLICATE_WINDOW_SECONDS", "²"),
        ("ORDERS_DUPLICATE_WINDOW_SECONDS", "1" * 12),
    ],
)
def test_malformed_console_settings_fail_at_start(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({"COSMOS_ENDPOINT": "https://cosmos.test", name: value})


def test_counters_are_kept_per_consumer_with_stale_status_updates() -> None:
    counters = DecisionCounters()
    line = b'{"outcome": "%s", "settlement": "complete", "at": 1.0}'
    counters.add_line(line % b"processed", consumer_of(Path("worker-1.decisions.jsonl")))
    counters.add_line(line % b"processed", consumer_of(Path("billing-2.decisions.jsonl")))
    counters.add_line(line % b"stale", consumer_of(Path("status-1.decisions.jsonl")))

    view = counters.to_json(10.0)

    assert view["totals"]["processed"] == 2 and view["totals"]["stale"] == 1
    assert {name: counts["processed"] for name, counts in view["byConsumer"].items()} == {
        "billing": 1,
        "orders": 1,
        "status": 0,
    }
    assert view["byConsumer"]["status"]["stale"] == 1


def test_untrusted_journal_names_add_a_bounded_number_of_consumers() -> None:
    counters = DecisionCounters()
    for index in range(100):
        counters.add_line(b'{"outcome": "processed", "at": 1.0}', f"consumer{index}")
    assert len(counters.by_consumer) <= MAX_CONSUMERS + 1
    assert counters.totals["processed"] == 100


def backoff_line(
    message_id: object, retry_at: object, at: float = 1.0, attempt: object = 1
) -> bytes:
    backoff = {
        "message_id": message_id,
        "attempt": attempt,
        "outcome": "transient_failure",
        "retry_at": retry_at,
    }
    return json.dumps({"backoff": backoff, "at": 1.0}).encode()


async def test_a_workers_backoffs_reach_the_console_through_its_journal(tmp_path: Path) -> None:
    with decision_journal(tmp_path / "billing-1.decisions.jsonl") as journal:
        assert journal is not None
        journal.retry(Retry("o-1", 2, 30.0, "transient_failure", "Cosmos DB answered 503"))
        journal.retry(Retry("o-2", 1, 0.0, "in_progress_elsewhere", None))

    counters = await JournalFolder(tmp_path).counters()
    [waiting] = counters.waiting_out_a_backoff(time.time())

    assert (waiting.consumer, waiting.message_id, waiting.attempt) == ("billing", "o-1", 2)
    assert counters.backoffs == 2 and counters.totals == dict.fromkeys(counters.totals, 0)


def test_only_the_latest_wait_of_a_message_counts_and_a_past_one_is_not_shown() -> None:
    counters = DecisionCounters()
    for entry in (
        backoff_line("o-1", 100.0),
        backoff_line("o-1", 140.0, attempt=2),
        backoff_line("o-2", 90.0),
    ):
        counters.add_line(entry, "orders")

    view = counters.to_json(now=95.0)

    assert view["backoffs"] == 3
    assert view["backingOff"] == [
        {
            "consumer": "orders",
            "messageId": "o-1",
            "attempt": 2,
            "outcome": "transient_failure",
            "retryInSeconds": 45.0,
        }
    ]


@pytest.mark.parametrize(
    "bad",
    [
        backoff_line(7, 100.0),
        backoff_line("o-1", "soon"),
        backoff_line("o-1", 100.0, attempt=0),
        backoff_line("o-1", 100.0, attempt=True),
        json.dumps({"backoff": "o-1", "at": 1.0}).encode(),
    ],
)
def test_a_malformed_backoff_line_is_skipped(bad: bytes) -> None:
    counters = DecisionCounters()
    counters.add_line(bad)
    assert counters.skipped_lines == 1 and counters.backing_off == {}


def test_untrusted_backoff_lines_are_remembered_in_a_bounded_number() -> None:
    counters = DecisionCounters()
    for number in range(MAX_BACKING_OFF + 50):
        counters.add_line(backoff_line(f"o-{number}", 1000.0 + number))

    assert len(counters.backing_off) == MAX_BACKING_OFF
    # The soonest retries made room: the latest waits are the ones kept.
    assert min(known.retry_at for known in counters.backing_off.values()) == 1050.0
