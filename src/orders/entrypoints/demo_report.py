"""The demo's HTML report: the verify table and the consumers' outcomes over time.

One self-contained file (inline SVG, no scripts), so it opens anywhere and can be attached to a
ticket. Every value is escaped: message ids and reasons come from the run's messages.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping
from typing import Any

from orders.domain.decision_counters import kind_counter
from orders.entrypoints.console_pages import COUNTER_MEANINGS
from orders.service.verify_meanings import (
    CHECK_MEANINGS,
    CONFLICT_MEANINGS,
    CONSUMER_MEANINGS,
    STATUS_MEANINGS,
    effect_meaning,
)

COLOURS = {
    "processed": "#2e7d32",
    "duplicate": "#1565c0",
    "mismatch": "#c62828",
    "rejected": "#ef6c00",
    "transient_failure": "#6a1b9a",
    "unexpected_failure": "#000000",
}
WIDTH, HEIGHT, MARGIN = 720, 240, 40


def outcome_meaning(outcome: str) -> str:
    """What a decision of this outcome means, as the console's counters page says it."""
    return COUNTER_MEANINGS[kind_counter(outcome)]


def outcome_series(decisions: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Decisions per outcome per second since the first one."""
    stamped = [d for d in decisions if isinstance(d.get("at"), int | float)]
    if not stamped:
        return {}
    start = min(d["at"] for d in stamped)
    seconds = int(max(d["at"] for d in stamped) - start) + 1
    series: dict[str, list[int]] = {}
    for decision in stamped:
        counts = series.setdefault(str(decision["outcome"]), [0] * seconds)
        counts[int(decision["at"] - start)] += 1
    return series


def chart(series: dict[str, list[int]]) -> str:
    if not series:
        return "<p>No decisions were recorded.</p>"
    length = max(len(counts) for counts in series.values())
    peak = max(max(counts) for counts in series.values()) or 1
    x_step = (WIDTH - 2 * MARGIN) / max(length - 1, 1)

    def point(index: int, value: int) -> str:
        x = MARGIN + index * x_step
        y = HEIGHT - MARGIN - value * (HEIGHT - 2 * MARGIN) / peak
        return f"{x:.1f},{y:.1f}"

    lines = []
    legend = []
    for row, (outcome, counts) in enumerate(sorted(series.items())):
        colour = COLOURS.get(outcome, "#757575")
        points = " ".join(point(i, v) for i, v in enumerate(counts))
        label = html.escape(outcome)
        lines.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}">'
            f"<title>{label}</title></polyline>"
        )
        legend.append(
            f'<text x="{WIDTH - MARGIN - 150}" y="{MARGIN + 16 * row}" fill="{colour}">'
            f"{label}: {sum(counts)}</text>"
        )
    axes = (
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" '
        f'y2="{HEIGHT - MARGIN}" stroke="#999"/>'
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#999"/>'
        f'<text x="{MARGIN}" y="{HEIGHT - 10}">0 s</text>'
        f'<text x="{WIDTH - MARGIN - 20}" y="{HEIGHT - 10}">{length} s</text>'
        f'<text x="4" y="{MARGIN}">{peak}/s</text>'
    )
    return (
        f'<svg role="img" aria-label="Decisions per second by outcome" width="{WIDTH}" '
        f'height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" '
        f'font-size="12">{axes}{"".join(lines)}{"".join(legend)}</svg>'
    )


def table(rows: list[tuple[str, Any]], meanings: Mapping[str, str] | None = None) -> str:
    """Rows of name and value; with `meanings`, what each figure counts beside it."""

    def meaning(name: str) -> str:
        return f"<td>{html.escape(meanings.get(name, ''))}</td>" if meanings is not None else ""

    body = "".join(
        f"<tr><th scope='row'>{html.escape(str(name))}</th><td>{html.escape(str(value))}</td>"
        f"{meaning(str(name))}</tr>"
        for name, value in rows
    )
    return f"<table>{body}</table>"


def render_report(verify: dict[str, Any], decisions: list[dict[str, Any]], seconds: float) -> str:
    scalars = [(k, v) for k, v in verify.items() if isinstance(v, str | int | float | bool)]
    in_window = verify.get("conflicts_in_window", {})
    kinds = sorted(verify.get("sends_by_kind", {}).items())
    outcomes = sorted(Counter(str(d.get("outcome")) for d in decisions).items())
    violations = "".join(f"<li>{html.escape(str(v))}</li>" for v in verify.get("violations", []))
    verdict = "OK" if verify.get("ok") else "FAILED"
    sent = html.escape(str(verify.get("sent")))
    orders = html.escape(str(verify.get("unique_orders")))
    status_updates = verify.get("status_updates")
    statuses = (
        table(sorted(status_updates.items()), STATUS_MEANINGS)
        if status_updates
        else "<p>none sent in this run</p>"
    )
    invariants = verify.get("invariants")
    saga = (
        table(sorted(invariants.items()))
        if invariants
        else "<p>not audited in this run (the saga needs billing and shipping)</p>"
    )
    fanout = "".join(
        f"<h3>{html.escape(str(consumer))}</h3>"
        + table(
            sorted(found.items()),
            {**CONSUMER_MEANINGS, "effects": effect_meaning(str(consumer))},
        )
        for consumer, found in sorted(verify.get("fanout", {}).items())
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>orders demo: {verdict}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:60em}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:.2em .6em;text-align:left}}</style></head>
<body>
<h1>orders demo: {verdict}</h1>
<p>{sent} messages for {orders} orders in {seconds:.0f} s.</p>
<h2>Consumer outcomes over time</h2>
{chart(outcome_series(decisions))}
<h2>Verify</h2>
{table(scalars, CHECK_MEANINGS)}
<h2>Conflicts inside the broker's window</h2>
{table(sorted(in_window.items()), CONFLICT_MEANINGS)}
<h2>Sends by kind</h2>
{table(kinds)}
<h2>Consumer outcomes</h2>
{table(outcomes, {outcome: outcome_meaning(outcome) for outcome, _ in outcomes})}
<h2>After the order: each consumer's effects</h2>
{fanout or "<p>not audited in this run</p>"}
<h2>The saga's invariants (each must be 0)</h2>
{saga}
<h2>Status updates (versions, reordered and duplicated)</h2>
{statuses}
<h2>Violations</h2>
<ul>{violations or "<li>none</li>"}</ul>
</body></html>
"""
