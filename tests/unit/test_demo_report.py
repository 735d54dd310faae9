"""The demo's HTML report: the verify table, outcomes over time, and every value escaped."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from rich.console import Console

from orders.cli import report_table
from orders.entrypoints.demo_report import outcome_series, render_report
from orders.service.verify import VerifyReport

VERIFY = {
    "ok": True,
    "sent": 12,
    "unique_orders": 10,
    "orders_in_store": 10,
    "conflicts_in_window": {"sent": 1, "dropped_by_broker": 1, "dead_lettered": 0},
    "sends_by_kind": {"original": 10, "poison": 2},
    "violations": [],
}


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_decisions_are_counted_per_second_and_outcome() -> None:
    decisions: list[dict[str, Any]] = [
        {"outcome": "processed", "at": 100.2},
        {"outcome": "processed", "at": 100.9},
        {"outcome": "duplicate", "at": 102.5},
        {"outcome": "processed"},  # no time: not charted
    ]

    assert outcome_series(decisions) == {"processed": [2, 0, 0], "duplicate": [0, 0, 1]}


def test_the_report_shows_the_verdict_the_tables_and_a_chart_and_escapes_values() -> None:
    hostile = {**VERIFY, "ok": False, "violations": ["order <script>alert(1)</script> missing"]}
    decisions = [{"outcome": "processed", "at": 1.0}, {"outcome": "rejected", "at": 2.0}]

    page = render_report(hostile, decisions, seconds=14.2)
    parsed = Collector()
    parsed.feed(page)
    text = " ".join(parsed.text)

    assert "orders demo: FAILED" in text and "12 messages for 10 orders in 14 s" in text
    assert parsed.tags.count("polyline") == 2 and "svg" in parsed.tags
    assert "script" not in parsed.tags  # the violation text was escaped, not run
    assert "<script>alert(1)</script>" in text
    assert "dropped_by_broker" in text and "processed: 1" in text


def test_the_report_shows_each_fan_out_consumers_effects() -> None:
    fanout = {
        "billing": {"expected": 10, "effects": 10, "doubled": 0, "missing": 0, "ok": True},
        "shipping": {"expected": 10, "effects": 9, "doubled": 0, "missing": 1, "ok": False},
    }
    parsed = Collector()
    parsed.feed(render_report({**VERIFY, "fanout": fanout}, [], seconds=1.0))
    text = " ".join(parsed.text)

    assert "billing" in text and "shipping" in text
    assert "missing" in text and "effects" in text

    without = Collector()
    without.feed(render_report(VERIFY, [], seconds=1.0))
    assert "not audited in this run" in " ".join(without.text)


def test_the_report_shows_the_status_audit_when_the_run_sent_updates() -> None:
    statuses = {"sent": 30, "applied": 20, "stale": 9, "final_state_mismatches": 0, "ok": True}
    parsed = Collector()
    parsed.feed(render_report({**VERIFY, "status_updates": statuses}, [], seconds=1.0))
    text = " ".join(parsed.text)
    assert "final_state_mismatches" in text and "stale" in text

    without = Collector()
    without.feed(render_report(VERIFY, [], seconds=1.0))
    assert "none sent in this run" in " ".join(without.text)


def test_the_report_shows_the_saga_invariants_a_broken_one_included() -> None:
    invariants = {"cancelled_and_shipped": 0, "shipped_without_charge": 1}
    parsed = Collector()
    parsed.feed(render_report({**VERIFY, "ok": False, "invariants": invariants}, [], 1.0))
    text = " ".join(parsed.text)

    assert "shipped_without_charge" in text and "cancelled_and_shipped" in text
    assert "The saga's invariants (each must be 0)" in text

    without = Collector()
    without.feed(render_report(VERIFY, [], seconds=1.0))
    assert "not audited in this run (the saga needs" in " ".join(without.text)


def rows_of(page: str) -> list[list[str]]:
    """Each table row's cells, as text."""
    return [
        [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", page)
    ]


FANOUT = {
    "billing": {"expected": 270, "effects": 280, "doubled": 0, "missing": 0,
                "stuck_in_progress": 0, "ok": True},
}  # fmt: skip
STATUSES = {"sent": 30, "distinct_updates": 25, "applied": 20, "stale": 3, "illegal_sent": 2,
            "illegal_dead_lettered": 2, "final_state_mismatches": 0, "ok": True}  # fmt: skip


def test_each_figure_of_the_html_report_says_what_it_counts() -> None:
    report = {**VERIFY, "run_id": "r-1", "fanout": FANOUT, "status_updates": STATUSES}
    rows = rows_of(render_report(report, [], seconds=1.0))

    # every row of the verify, conflicts, consumer and status tables has its meaning beside it
    assert all(cells[2] for cells in rows if len(cells) == 3)
    figures = {cells[0]: cells[2] for cells in rows if len(cells) == 3}
    assert "cancelled ones included" in figures["effects"]
    assert "exactly one" in figures["expected"]
    assert {"doubled", "missing", "stuck_in_progress", "applied", "stale", "sent"} <= set(figures)


def test_each_figure_of_the_text_report_says_what_it_counts() -> None:
    report = VerifyReport(
        ok=True, run_id="r-1", sent=12, unique_orders=10, orders_in_store=10, duplicate_orders=0,
        missing_orders=0, dead_lettered=2, expected_dead_letters=2, unexpected_dead_letters=0,
        stored_first_payload=10, stored_conflicting_payload=0, rejections_recorded=2,
        conflicts_in_window={"sent": 1, "dropped_by_broker": 1, "dead_lettered": 0},
        sends_by_kind={"original": 10}, fanout=FANOUT, status_updates=STATUSES,
        invariants={"cancelled_and_shipped": 0},
    )  # fmt: skip
    table = report_table(report)
    console = Console(width=250, record=True)
    console.print(table)
    text = console.export_text()

    checks, meanings = table.columns[0]._cells, table.columns[2]._cells
    assert len(checks) == len(meanings) and all(meanings)
    billing = next(line for line in text.splitlines() if "billing: effects / expected" in line)
    assert "280 / 270" in billing and "cancelled ones included" in billing
