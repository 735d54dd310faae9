"""The operations console's HTML, built as escaped strings: no template engine, no build step.

Every value that comes from a message, a document or a request goes through `text()` (HTML
escaping, quotes included) before it is placed in the page, attributes and URLs alike.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from orders.domain.dead_letters import (
    DELIVERY_COUNT_CAPTION,
    DeadLetter,
    DeadLetterOutcome,
    printable,
)
from orders.domain.decision_counters import DecisionCounters
from orders.service.console import (
    LINE_DOCUMENT_TYPE,
    ORDER_DOCUMENT_TYPE,
    TimelineStep,
    current_status,
    order_timeline,
    origin_of,
)
from orders.service.ports import EntityCounts
from orders.service.subscribers import Source

PREFIX = "/console"
NAVIGATION = (
    (f"{PREFIX}", "Queues"),
    (f"{PREFIX}/orders", "Order lookup"),
    (f"{PREFIX}/counters", "Counters"),
)
# The first document types shown for an order; any other type follows, by name.
DOCUMENT_ORDER = (ORDER_DOCUMENT_TYPE, LINE_DOCUMENT_TYPE)
MAX_VALUE_CHARS = 2000
# Cosmos DB's own bookkeeping, the same on every document: noise to an operator.
HIDDEN_FIELDS = frozenset({"_rid", "_self", "_attachments"})


def text(value: object) -> str:
    return html.escape(str(value), quote=True)


def url(path: str, **query: object) -> str:
    return text(f"{path}?{urlencode(query)}" if query else path)


def layout(title: str, body: str, *, current: str = "", script: bool = False) -> str:
    current_mark = ' aria-current="page"'
    links = "".join(
        f'<li><a href="{text(href)}"{current_mark if href == current else ""}>'
        f"{text(label)}</a></li>"
        for href, label in NAVIGATION
    )
    scripts = f'<script src="{PREFIX}/assets/console.js" defer></script>' if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)} · Orders console</title>"
        f'<link rel="stylesheet" href="{PREFIX}/assets/console.css">{scripts}</head><body>'
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header><p class="brand">Orders console</p><nav aria-label="Console"><ul>{links}'
        "</ul></nav></header>"
        f'<main id="main" tabindex="-1"><h1>{text(title)}</h1>{body}</main></body></html>'
    )


def error_page(status: int, title: str, detail: str) -> str:
    return layout(
        title,
        f'<p role="alert">{text(detail)}</p><p>HTTP status {status}. '
        f'<a href="{PREFIX}">Back to the queues</a></p>',
    )


def _count(value: int, counts: EntityCounts) -> str:
    return f"{value}+" if counts.capped(value) else str(value)


def overview_page(all_counts: Iterable[EntityCounts]) -> str:
    rows = "".join(
        f'<tr><th scope="row">{text(counts.source)}</th>'
        f"<td>{'queue' if counts.source.queue else 'subscription'}</td>"
        f"<td>{_count(counts.active, counts)}</td><td>{_count(counts.scheduled, counts)}</td>"
        f"<td>{_count(counts.dead_lettered, counts)}</td>"
        f'<td><a href="{url(f"{PREFIX}/dead-letters", source=str(counts.source))}">'
        f"Dead letters of {text(counts.source)}</a></td></tr>"
        for counts in all_counts
    )
    return layout(
        "Queues and subscriptions",
        "<table><caption>Messages by entity (counted by peeking; an entity with more than "
        'the limit shows the limit and +)</caption><thead><tr><th scope="col">Entity</th>'
        '<th scope="col">Kind</th><th scope="col">Active</th><th scope="col">Scheduled</th>'
        '<th scope="col">Dead-lettered</th><th scope="col">Inspect</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>",
        current=PREFIX,
    )


# The columns of a dead letter; the classes size them so the table fits the screen (1280 px),
# wrapping long untrusted text instead of widening the page.
DEAD_LETTER_HEADINGS = (
    '<th scope="col" class="reason">Reason</th><th scope="col">Description</th>'
    f'<th scope="col" class="narrow" title="{text(DELIVERY_COUNT_CAPTION)}">Deliveries</th>'
    '<th scope="col" class="time">Enqueued</th><th scope="col" class="id">MessageId</th>'
    '<th scope="col">Body</th>'
)


def _dead_letter_cells(dead: DeadLetter) -> str:
    enqueued = dead.enqueued_at.isoformat(timespec="seconds") if dead.enqueued_at else ""
    return (
        f"<td>{text(dead.reason or '')}</td><td>{text((dead.description or '')[:300])}</td>"
        f"<td>{dead.delivery_count}</td><td>{text(enqueued)}</td>"
        f"<td><code>{text(printable(dead.message_id or ''))}</code></td>"
        f'<td class="body"><code>{text(dead.preview)}</code></td>'
    )


def _action_link(action: str, source: Source, sequence: int | str, label: str) -> str:
    href = url(
        f"{PREFIX}/dead-letters/confirm", source=str(source), action=action, sequence=sequence
    )
    return f'<a class="button" href="{href}">{text(label)}</a>'


def dead_letters_page(source: Source, dead_letters: list[DeadLetter], limit: int) -> str:
    resubmit = source.queue is not None

    def actions(dead: DeadLetter) -> str:
        sequence = dead.sequence_number
        links = [_action_link("purge", source, sequence, f"Purge {sequence}")]
        if resubmit:
            links.insert(0, _action_link("resubmit", source, sequence, f"Resubmit {sequence}"))
        return f'<td class="actions">{" ".join(links)}</td>'

    # Actions next to the sequence number: on screen and early in the focus order.
    rows = "".join(
        f'<tr><th scope="row">{dead.sequence_number}</th>{actions(dead)}'
        f"{_dead_letter_cells(dead)}</tr>"
        for dead in dead_letters
    )
    if not dead_letters:
        listing = f'<p id="empty" role="status">No dead letters in {text(source)}.</p>'
    else:
        listing = (
            f'<p role="status">{len(dead_letters)} dead letter(s), oldest first'
            f"{f' (the first {limit})' if len(dead_letters) >= limit else ''}.</p>"
            '<table id="dead-letters" class="listing"><thead><tr>'
            '<th scope="col" class="narrow">Sequence</th>'
            f'<th scope="col" class="actions">Actions</th>{DEAD_LETTER_HEADINGS}</tr></thead>'
            f"<tbody>{rows}</tbody></table>"
            f"<p>{_action_link('purge', source, 'all', 'Purge all dead letters')}</p>"
        )
    note = (
        ""
        if resubmit
        else "<p>Resubmit is not offered for a subscription: a copy sent to the topic would "
        "reach every subscription. Re-publish the event at its source (same MessageId).</p>"
    )
    return layout(f"Dead letters of {source}", listing + note, current=PREFIX)


def confirm_page(
    action: str,
    source: Source,
    sequence: int | None,
    dead: DeadLetter | None,
    csrf_token: str = "",
    passed_over: tuple[int, ...] = (),
) -> str:
    what = f"dead letter {sequence}" if sequence is not None else f"every dead letter of {source}"
    details = warning = ""
    if passed_over:
        warning = (
            f'<p id="passed-over" role="alert">{len(passed_over)} other dead letter(s) lie before '
            f"it: {text(', '.join(str(number) for number in passed_over))}. Service Bus reaches "
            "a dead letter only by locking every one before it, so these will be locked and "
            "given back: each one's delivery count goes up by 1, nothing else changes.</p>"
        )
    if dead is not None:
        details = (
            f'<table class="listing"><thead><tr>{DEAD_LETTER_HEADINGS}</tr></thead>'
            f"<tbody><tr>{_dead_letter_cells(dead)}</tr></tbody></table>"
        )
    if action == "resubmit":
        consequence = (
            "A copy goes back to the queue with the same MessageId (the consumer still "
            "recognises it), recording when and by whom; the dead letter is removed."
        )
        extra = (
            '<p><input type="checkbox" id="force" name="force" value="yes">'
            '<label for="force">Force: resubmit a RequestHashMismatch too (only when the '
            "stored order was removed on purpose)</label></p>"
        )
    else:
        consequence = "Purged dead letters are gone for good."
        extra = ""
    verb = action.capitalize()
    chosen = "all" if sequence is None else sequence
    form = (
        f'<form method="post" action="{PREFIX}/dead-letters/{text(action)}">'
        f'<input type="hidden" name="source" value="{text(source)}">'
        f'<input type="hidden" name="sequence" value="{text(chosen)}">'
        f'<input type="hidden" name="csrf" value="{text(csrf_token)}">'
        f'{extra}<p><button type="submit" name="confirm" value="yes">{verb} {text(what)}</button> '
        f'<a href="{url(f"{PREFIX}/dead-letters", source=str(source))}">Cancel</a></p></form>'
    )
    return layout(
        f"{verb} {what}?",
        f"{details}<p>{text(consequence)}</p>{warning}{form}",
        current=PREFIX,
    )


def outcome_page(action: str, source: Source, outcome: DeadLetterOutcome) -> str:
    past = {"resubmit": "Resubmitted", "purge": "Purged"}[action]
    done = ", ".join(str(sequence) for sequence in sorted(outcome.done)) or "none"
    kept = "".join(
        f"<li>Kept {sequence}: {text(why)}</li>"
        for sequence, why in sorted(outcome.refused.items())
    )
    body = f'<p role="status" id="outcome">{past}: {text(done)}.</p>'
    if outcome.passed_over:
        numbers = ", ".join(str(sequence) for sequence in sorted(outcome.passed_over))
        body += (
            f'<p id="passed-over">Passed over: {text(numbers)} (locked and given back: '
            "delivery count +1).</p>"
        )
    if kept:
        body += f'<ul id="refused" role="alert">{kept}</ul>'
        if any("--force" in why for why in outcome.refused.values()):
            body += "<p>Here, --force is the Force checkbox of the confirmation page.</p>"
    body += (
        f'<p><a href="{url(f"{PREFIX}/dead-letters", source=str(source))}">'
        f"Back to the dead letters of {text(source)}</a></p>"
    )
    return layout(f"{action.capitalize()} in {source}: outcome", body, current=PREFIX)


def _document_type(document: dict[str, Any]) -> str:
    kind = document.get("type", document.get("kind"))
    return kind if isinstance(kind, str) and kind else "(no type)"


def _type_rank(kind: str) -> tuple[int, str]:
    return (
        (DOCUMENT_ORDER.index(kind), "") if kind in DOCUMENT_ORDER else (len(DOCUMENT_ORDER), kind)
    )


def _value(value: object) -> str:
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text(shown if len(shown) <= MAX_VALUE_CHARS else shown[:MAX_VALUE_CHARS] + "...")


def _document_table(document: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr><th scope="row">{text(key)}</th><td><code>{_value(value)}</code></td></tr>'
        for key, value in document.items()
        if key not in HIDDEN_FIELDS
    )
    caption = f"{_document_type(document)} {document.get('id', '')}"
    return (
        f'<table class="document"><caption>{text(caption)}</caption><tbody>{rows}</tbody></table>'
    )


# The order page while the documents' store is down (its reads failed as transient).
DOCUMENTS_UNAVAILABLE = (
    "Cosmos DB is unavailable: the order's documents cannot be read now. The dead-letter "
    "pages need only Service Bus and still work."
)


def order_page(
    order_id: str,
    documents: list[dict[str, Any]] | None,
    error: str = "",
    *,
    history: list[dict[str, object]] | str = "",
) -> str:
    """The lookup form; with `documents`, the order's timeline (its `history`, the list GET
    shows, or why it cannot be read) and, folded away below, every document of the order
    grouped by type."""
    form = (
        f'<form method="get" action="{PREFIX}/orders" role="search">'
        '<label for="orderId">Order id</label> '
        f'<input id="orderId" name="orderId" value="{text(order_id)}" required '
        'maxlength="400" autocomplete="off"> <button type="submit">Look up</button></form>'
    )
    if error:
        return layout("Order lookup", form + f'<p role="alert" id="error">{text(error)}</p>',
                      current=f"{PREFIX}/orders")  # fmt: skip
    if documents is None:
        return layout("Order lookup", form, current=f"{PREFIX}/orders")
    if not documents:
        found = f'<p role="status" id="found">No documents for order {text(order_id)}.</p>'
    else:
        found = (
            f'<p role="status" id="found">Order {text(order_id)}: '
            f"{text(_origins_summary(documents))}.</p>"
            + _timeline(documents, history)
            + _raw_documents(documents)
        )
    return layout(f"Order {order_id}", form + found, current=f"{PREFIX}/orders")


def _origins_summary(documents: list[dict[str, Any]]) -> str:
    """ "3 documents from the orders container, 1 from the payment service"."""
    counts = Counter(origin_of(document) for document in documents)
    parts = [f"{count} from the {origin}" for origin, count in sorted(counts.items())]
    parts[0] = f"{len(documents)} document(s): {parts[0]}"
    return ", ".join(parts)


def _time(at: str | None) -> str:
    return f'<time datetime="{text(at)}">{text(at)}</time>' if at else "time not recorded"


def _timeline(documents: list[dict[str, Any]], history: list[dict[str, object]] | str) -> str:
    """The order's history, the list GET shows, each change with the documents that say so;
    then the steps the services recorded whose status update is not applied yet. The summary
    an operator reads first (no store bookkeeping, no raw fields)."""
    status = current_status(documents)
    current = (
        f"Current status: <strong>{text(status[0])}</strong> (version {status[1]}, from the "
        "status document; the order document keeps the status it was created with)."
        if status
        else "No status update yet: the order is as it was placed."
    )
    if isinstance(history, list) and history:
        last = history[-1]
        current = (
            f"Current status: <strong>{text(last.get('status'))}</strong> (version "
            f"{text(last.get('version'))}, the last change of the history GET shows)."
        )
    unreadable = (
        f'<p role="alert" id="history-unreadable">The history cannot be read as GET reads it '
        f"({text(history)}); the steps below are only what the documents say.</p>"
        if isinstance(history, str) and history
        else ""
    )

    def heading(step: TimelineStep) -> str:
        if step.version is None:
            return (
                f'<li data-step="{text(step.status)}" data-pending="yes">'
                f"<strong>{text(step.status)}</strong> {_time(step.at)} (recorded by a service; "
                "its status update is not applied yet)"
            )
        return (
            f'<li data-step="{text(step.status)}" data-version="{step.version}">'
            f"<strong>{text(step.status)}</strong> version {step.version}, {_time(step.at)}"
        )

    steps = "".join(
        heading(step)
        + "<ul>"
        + "".join(
            f"<li>{text(evidence.document)} ({text(evidence.origin)}): {text(evidence.said)}"
            f"{', ' + _time(evidence.at) if evidence.at else ''}</li>"
            for evidence in step.evidence
        )
        + "</ul></li>"
        for step in order_timeline(documents, history if isinstance(history, list) else None)
    )
    listing = f'<ol class="timeline" id="timeline">{steps}</ol>' if steps else ""
    return (
        '<section aria-labelledby="timeline-heading"><h2 id="timeline-heading">Timeline</h2>'
        f'<p id="current-status">{current}</p>{unreadable}{listing}</section>'
    )


def _raw_documents(documents: list[dict[str, Any]]) -> str:
    groups: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        groups.setdefault(_document_type(document), []).append(document)
    sections = "".join(
        f'<section aria-labelledby="type-{index}"><h3 id="type-{index}">{text(kind)} '
        f"({len(groups[kind])})</h3>"
        + "".join(_document_table(document) for document in groups[kind])
        + "</section>"
        for index, kind in enumerate(sorted(groups, key=_type_rank))
    )
    return (
        f'<details id="raw"><summary>Raw documents ({len(documents)}), by type, as stored'
        f"</summary>{sections}</details>"
    )


# Every counter the journals feed (`decision_counters.COUNTERS`, a test holds them equal), in
# that order: the label of its column and what it counts, for the legend.
COUNTER_LABELS = {
    "decisions": "Decisions",
    "processed": "Processed",
    "duplicates": "Duplicates",
    "stale": "Stale",
    "rejected": "Rejected",
    "mismatches": "Mismatches",
    "refused": "Refused downstream",
    "effect_conflict": "Effect conflicts",
    "corrupt_record": "Corrupt records",
    "store_refused": "Refused by the store",
    "in_progress_elsewhere": "In progress elsewhere",
    "transient_failure": "Transient failures",
    "unexpected_failure": "Unexpected failures",
    "not_ours": "Another subscription's retry",
    "ignored": "Ignored",
    "awaiting_charge": "Awaiting the charge",
    "skipped_cancelled": "Skipped: cancelled",
    "skipped_payment_failed": "Skipped: payment failed",
    "nothing_to_refund": "Cancel: nothing to refund",
    "refunded": "Cancel: refunded",
    "illegal_transition": "Illegal transitions",
    "unknown_outcome": "Unknown outcome",
    "dead_lettered": "Dead-lettered",
    "abandoned": "Abandoned",
}
COUNTER_MEANINGS = {
    "decisions": "every message a consumer decided on: the sum of the kinds that follow",
    "processed": "an effect written (an order stored, a charge, a shipment, a status applied, "
    "a cancel's status applied)",
    "duplicates": "a redelivery or duplicate recognised: no second write",
    "stale": "a status update older than the stored version: the status is not changed",
    "rejected": "a malformed message or one that breaks the contract: dead-lettered",
    "mismatches": "a reused orderId with another payload: dead-lettered",
    "refused": "the payment service refused for good: dead-lettered",
    "effect_conflict": "an effect stored without the record that guards it: dead-lettered",
    "corrupt_record": "a stored record that cannot be read: dead-lettered",
    "store_refused": "a write the store refused for good (a 400, a 413): dead-lettered at once",
    "in_progress_elsewhere": "another delivery holds the record's lease: abandoned, retried",
    "transient_failure": "a store or service unavailable: abandoned, the broker redelivers",
    "unexpected_failure": "a bug or an unknown error: abandoned and logged",
    "not_ours": "a delayed retry another subscription's consumer scheduled on the topic: "
    "completed without an effect",
    "ignored": "an event this consumer has nothing to do for (shipping: a cancel)",
    "awaiting_charge": "shipping found no recorded charge yet: abandoned, offered again",
    "skipped_cancelled": "an event for an order cancelled before its effect: no charge, "
    "no shipment",
    "skipped_payment_failed": "an order whose charge was refused for good: never shipped",
    "nothing_to_refund": "a cancel of an order billing never charged",
    "refunded": "a cancel of a charged order: the charge paid back",
    "illegal_transition": "a status update that cannot follow the stored one: dead-lettered",
    "unknown_outcome": "an outcome this console does not know (a newer worker's)",
    "dead_lettered": "of the above, those dead-lettered",
    "abandoned": "of the above, those abandoned for the broker to redeliver",
}
# The chart draws the common kinds; the table shows every counter.
CHARTED = ("processed", "duplicates", "stale", "mismatches", "dead_lettered")


def backing_off_table(counters: DecisionCounters, now: float) -> str:
    """The messages waiting out a backoff as this page is served (the journals' `backoff`
    lines): held by a worker, their lock renewed, until they are decided again."""
    rows = "".join(
        f"<tr><td>{text(known.consumer)}</td><td><code>{text(printable(known.message_id))}"
        f"</code></td><td>{known.attempt}</td><td>{text(known.outcome)}</td>"
        f"<td>{max(known.retry_at - now, 0.0):.1f} s</td></tr>"
        for known in counters.waiting_out_a_backoff(now)
    )
    empty = '<tr><td colspan="5">None right now.</td></tr>'
    return (
        '<h2 id="backoff-heading">Waiting out a backoff</h2>'
        '<table id="backing-off" aria-labelledby="backoff-heading"><caption>Messages a worker '
        "holds after a transient failure (the store or a downstream unavailable), its lock "
        "renewed, until it decides them again; given back to the broker only when the backoff "
        f"budget is spent. {counters.backoffs} wait(s) since the journals began; reload to "
        'refresh.</caption><thead><tr><th scope="col">Consumer</th><th scope="col">'
        'MessageId</th><th scope="col">After attempt</th><th scope="col">Outcome</th>'
        f'<th scope="col">Decided again in</th></tr></thead><tbody>{rows or empty}</tbody>'
        "</table>"
    )


def counters_page(counters: DecisionCounters | None, now: float) -> str:
    if counters is None:
        return layout(
            "Counters",
            '<p role="status">No decision journals here. Locally, `orders up` (or '
            "ORDERS_DECISIONS_DIR pointing at the workers' `--decisions` files) feeds this "
            "page; in Azure the counters are the orders.* metrics in Application Insights and "
            "the workbook.</p>",
            current=f"{PREFIX}/counters",
        )
    totals = "".join(
        f'<div><dt>{text(COUNTER_LABELS[name])}</dt><dd id="count-{name}" '
        f'class="series-{name}">-</dd></div>'
        for name in CHARTED
    )
    # One row per counter and a column per consumer: every decision kind fits a small screen.
    rows = "".join(
        f'<tr data-counter="{name}"><th scope="row">{text(label)}</th>'
        '<td class="loading">Loading...</td></tr>'
        for name, label in COUNTER_LABELS.items()
    )
    legend = "".join(
        f'<li><span class="swatch series-{name}" aria-hidden="true"></span>'
        f"<strong>{text(COUNTER_LABELS[name])}</strong>: {text(meaning)}</li>"
        for name, meaning in COUNTER_MEANINGS.items()
    )
    return layout(
        "Counters",
        '<table id="by-consumer"><caption>Decisions per consumer, since the journals began '
        "(orders: the orders queue's workers; every other: a registered consumer, on its "
        "order-events subscription or the status queue). Each decision counts once under its "
        "kind, so the kinds add up to Decisions</caption>"
        '<thead><tr><th scope="col">Decision</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
        '<h2 id="all-heading">All consumers together</h2>'
        f'<dl class="totals" aria-labelledby="all-heading">{totals}</dl>'
        '<figure><svg id="chart" role="img" viewBox="0 0 660 240" width="660" height="240" '
        'aria-labelledby="chart-caption"></svg><figcaption id="chart-caption">Decisions per '
        "5 seconds over the last 5 minutes, all consumers, from the workers' decision "
        f'journals</figcaption><ul class="legend" id="legend">{legend}</ul></figure>'
        '<p id="updated">Loading...</p>'
        f"{backing_off_table(counters, now)}"
        f"<noscript><p>The counters need JavaScript; the data is at "
        f'<a href="{PREFIX}/api/counters">{PREFIX}/api/counters</a>.</p></noscript>',
        current=f"{PREFIX}/counters",
        script=True,
    )
