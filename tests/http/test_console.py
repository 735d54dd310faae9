"""The operations console's routes over fakes of its ports: what each page shows, that every
untrusted value is escaped, that state changes need a confirmed same-site form, and that every
hostile parameter gets a plain error page (HTML) or a problem (JSON), never a 500.

The browser tests (tests/browser) run the same routes on the real stack.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fakes import (
    LAYOUT,
    FakeDeadLetterQueue,
    FakeDecisionFeed,
    FakeEntityCounter,
    FakeIdempotencyStore,
    FakeOrderReader,
    FakeOrderStore,
    RecordingPublisher,
    new_write,
)
from http_support import PROBLEM, FakeClock, assert_problem, runtime_over
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orders.bootstrap import ConsoleRuntime, HttpRuntime
from orders.domain.dead_letters import DeadLetter
from orders.entrypoints.http_api import create_app
from orders.entrypoints.http_hosts import AllowedHosts
from orders.service.console import OperationsConsole
from orders.service.ports import EntityCounts
from orders.service.subscribers import Source

QUEUE = Source(queue="orders")
SUBSCRIPTION = Source(topic="order-events", subscription="billing")
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)
HOSTILE = '"><script>alert(1)</script>'
SAME_SITE = {"Sec-Fetch-Site": "same-origin", "Origin": "http://console.test"}


def dead_letter(sequence: int, **changes: Any) -> DeadLetter:
    values: dict[str, Any] = {
        "sequence_number": sequence,
        "message_id": f"o-{sequence}",
        "reason": "InvalidJson",
        "description": "not JSON",
        "delivery_count": 1,
        "enqueued_at": LONG_AGO,
        "body": b"{oops",
    }
    return DeadLetter(**(values | changes))


@dataclass
class Console:
    client: httpx.AsyncClient
    queue: FakeDeadLetterQueue
    subscription: FakeDeadLetterQueue
    orders: FakeOrderStore
    journal: FakeDecisionFeed

    async def token(self) -> str:
        """The session's form token, as the confirmation page gives it (and its cookie)."""
        page = await self.client.get(
            "/console/dead-letters/confirm",
            params={"source": "orders", "action": "purge", "sequence": "all"},
        )
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert found is not None, page.text
        return found.group(1)

    async def post(self, action: str, form: dict[str, str], **headers: str) -> httpx.Response:
        """A confirmed form as the browser sends it: with the session's token."""
        form = {"csrf": await self.token()} | form
        return await self.client.post(
            f"/console/dead-letters/{action}", data=form, headers=SAME_SITE | headers
        )


async def console_over(
    *,
    journal: bool = True,
    trust_principal_header: bool = False,
    allowed_hosts: AllowedHosts | None = None,
    base_url: str = "http://console.test",
) -> AsyncIterator[Console]:
    queue = FakeDeadLetterQueue(QUEUE, [dead_letter(3), dead_letter(7)])
    subscription = FakeDeadLetterQueue(SUBSCRIPTION, [dead_letter(1)])
    queues = {QUEUE: queue, SUBSCRIPTION: subscription}
    orders = FakeOrderStore()
    feed = FakeDecisionFeed()
    console = OperationsConsole(
        [QUEUE, SUBSCRIPTION],
        FakeEntityCounter(queues, active={QUEUE: 5}),
        queues.__getitem__,
        FakeOrderReader(orders),
        feed if journal else None,
        layout=LAYOUT,
        duplicate_window=timedelta(minutes=10),
    )

    async def http_runtime() -> HttpRuntime:
        reader = FakeOrderReader(orders)
        return runtime_over(FakeIdempotencyStore(), RecordingPublisher(), reader, FakeClock())

    async def console_runtime() -> ConsoleRuntime:
        return ConsoleRuntime(console, trust_principal_header)

    app = create_app(http_runtime, console_factory=console_runtime, allowed_hosts=allowed_hosts)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
        yield Console(client, queue, subscription, orders, feed)


@pytest.fixture
async def console() -> AsyncIterator[Console]:
    async for value in console_over():
        yield value


def assert_html(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    return response.text


# --- Pages -----------------------------------------------------------------------------------


async def test_the_console_is_off_unless_enabled_and_never_in_the_openapi_document(
    console: Console,
) -> None:
    async def runtime() -> HttpRuntime:
        raise AssertionError("not needed")

    transport = httpx.ASGITransport(app=create_app(runtime))
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as plain:
        assert_problem(await plain.get("/console"), 404, "not-found")

    schema = (await console.client.get("/api/openapi.json")).json()
    assert [path for path in schema["paths"] if "console" in path] == []


async def test_overview_lists_each_configured_entity_with_its_counts(console: Console) -> None:
    page = assert_html(await console.client.get("/console"), 200)

    assert "<td>queue</td><td>5</td><td>0</td><td>2</td>" in page
    assert "<td>subscription</td><td>0</td><td>0</td><td>1</td>" in page
    assert 'href="/console/dead-letters?source=order-events%2FSubscriptions%2Fbilling"' in page


async def test_dead_letters_are_listed_with_every_untrusted_value_escaped(
    console: Console,
) -> None:
    console.queue.dead_letters.append(
        dead_letter(9, message_id=HOSTILE, description=HOSTILE, reason=HOSTILE,
                    body=b"<img src=x onerror=alert(1)>")
    )  # fmt: skip

    console.queue.dead_letters.append(dead_letter(10, body=b'{"a": "\x1b[31m\x00"}'))

    page = assert_html(await console.client.get("/console/dead-letters?source=orders"), 200)

    assert "<script>alert" not in page and "<img src=x" not in page
    # Quotes read as quotes; terminal escapes and NULs are shown, never passed through.
    assert "{&quot;a&quot;: &quot;\\u001b[31m\\u0000&quot;}" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count('href="/console/dead-letters/confirm?source=orders&amp;action=resubmit') == 4


async def test_counters_page_explains_its_counters_per_consumer(console: Console) -> None:
    page = assert_html(await console.client.get("/console/counters"), 200)
    assert '<table id="by-consumer">' in page and '<th scope="col">Decision</th>' in page
    assert '<tr data-counter="stale"><th scope="row">Stale</th>' in page
    assert 'id="count-stale"' in page
    # the cancels' decisions have rows of their own
    assert '<tr data-counter="nothing_to_refund"><th scope="row">Cancel: nothing to refund' in page
    assert '<ul class="legend" id="legend">' in page and "no second write" in page


async def test_the_counters_page_lists_the_messages_waiting_out_a_backoff(
    console: Console,
) -> None:
    in_a_minute = time.time() + 60
    console.journal.lines += [
        json.dumps(
            {
                "backoff": {
                    "message_id": message_id,
                    "attempt": 3,
                    "outcome": "transient_failure",
                    "retry_at": at,
                },
                "at": 1.0,
            }
        ).encode()
        # The second message's wait ended long ago: it is not waiting any more.
        for message_id, at in (("o-<b>held</b>", in_a_minute), ("o-done", 5.0))
    ]

    page = assert_html(await console.client.get("/console/counters"), 200)
    body = (await console.client.get("/console/api/counters")).json()

    table = page[page.index('<table id="backing-off"') :]
    table = table[: table.index("</table>")]
    assert "<code>o-&lt;b&gt;held&lt;/b&gt;</code></td><td>3</td><td>transient_failure" in table
    assert table.count("<tr><td>orders</td>") == 1 and "2 wait(s)" in table
    assert [(entry["messageId"], entry["attempt"]) for entry in body["backingOff"]] == [
        ("o-<b>held</b>", 3)
    ]


async def test_message_ids_and_bodies_are_shown_as_they_are(console: Console) -> None:
    console.queue.dead_letters.append(
        dead_letter(11, message_id="o-plain", body=b'{"orderId": "o-plain"}')
    )
    page = assert_html(await console.client.get("/console/dead-letters?source=orders"), 200)
    # No JSON quoting around the id, no backslashes before the body's quotes.
    assert "<code>o-plain</code>" in page and "&quot;o-plain&quot;</code>" not in page
    assert "<code>{&quot;orderId&quot;: &quot;o-plain&quot;}</code>" in page


async def test_a_subscription_offers_purge_but_not_resubmit(console: Console) -> None:
    page = assert_html(
        await console.client.get("/console/dead-letters", params={"source": str(SUBSCRIPTION)}),
        200,
    )
    assert "action=purge" in page and "action=resubmit" not in page
    refused = await console.post(
        "resubmit", {"source": str(SUBSCRIPTION), "sequence": "1", "confirm": "yes"}
    )
    assert "<h1>Not resubmitted</h1>" in assert_html(refused, 409)
    assert len(console.subscription.dead_letters) == 1


async def test_confirm_page_shows_the_dead_letter_and_a_post_form(console: Console) -> None:
    page = assert_html(
        await console.client.get(
            "/console/dead-letters/confirm",
            params={"source": "orders", "action": "purge", "sequence": "7"},
        ),
        200,
    )
    assert '<form method="post" action="/console/dead-letters/purge">' in page
    assert '<input type="hidden" name="sequence" value="7">' in page
    assert "gone for good" in page and "o-7" in page
    assert len(console.queue.dead_letters) == 2  # nothing happens before the confirmation


async def test_confirm_page_says_which_dead_letters_before_it_will_be_passed_over(
    console: Console,
) -> None:
    last = await console.client.get(
        "/console/dead-letters/confirm",
        params={"source": "orders", "action": "purge", "sequence": "7"},
    )
    first = await console.client.get(
        "/console/dead-letters/confirm",
        params={"source": "orders", "action": "purge", "sequence": "3"},
    )

    page = assert_html(last, 200)
    assert 'id="passed-over"' in page and "1 other dead letter(s) lie before it: 3." in page
    assert "delivery count goes up by 1" in page
    assert 'id="passed-over"' not in assert_html(first, 200)


async def test_confirm_page_of_a_missing_dead_letter_is_404(console: Console) -> None:
    response = await console.client.get(
        "/console/dead-letters/confirm",
        params={"source": "orders", "action": "resubmit", "sequence": "4"},
    )
    assert "no dead letter 4" in assert_html(response, 404)


async def test_resubmit_after_confirmation_moves_it_and_records_who(console: Console) -> None:
    response = await console.post(
        "resubmit", {"source": "orders", "sequence": "3", "confirm": "yes"}
    )

    assert 'id="outcome">Resubmitted: 3.' in assert_html(response, 200)
    [(moved, by)] = console.queue.resubmitted
    assert moved.sequence_number == 3 and by.startswith("console:")
    assert [d.sequence_number for d in console.queue.dead_letters] == [7]


async def test_the_platform_principal_names_who_resubmitted_only_when_trusted() -> None:
    for trusted, expected in ((True, "console:ops@example.test"), (False, None)):
        async for console in console_over(trust_principal_header=trusted):
            await console.post(
                "resubmit",
                {"source": "orders", "sequence": "3", "confirm": "yes"},
                **{"X-MS-CLIENT-PRINCIPAL-NAME": "ops@example.test"},
            )
            [(_, by)] = console.queue.resubmitted
            assert (by == expected) if expected else ("ops@example.test" not in by)


async def test_resubmit_keeps_the_rules_of_orders_dlq(console: Console) -> None:
    console.queue.dead_letters += [
        dead_letter(11, reason="RequestHashMismatch"),
        dead_letter(12, enqueued_at=datetime.now(UTC)),
    ]

    mismatch = await console.post(
        "resubmit", {"source": "orders", "sequence": "11", "confirm": "yes"}
    )
    recent = await console.post(
        "resubmit", {"source": "orders", "sequence": "12", "confirm": "yes"}
    )
    forced = await console.post(
        "resubmit", {"source": "orders", "sequence": "11", "confirm": "yes", "force": "yes"}
    )

    assert "Kept 11: RequestHashMismatch" in assert_html(mismatch, 200)
    assert "duplicate-detection window" in assert_html(recent, 200)
    assert "Resubmitted: 11." in assert_html(forced, 200)
    assert [d.sequence_number for d, _ in console.queue.resubmitted] == [11]


async def test_purge_one_then_all(console: Console) -> None:
    one = await console.post("purge", {"source": "orders", "sequence": "3", "confirm": "yes"})
    assert "Purged: 3." in assert_html(one, 200)
    every = await console.post("purge", {"source": "orders", "sequence": "all", "confirm": "yes"})
    assert "Purged: 7." in assert_html(every, 200)
    listing = await console.client.get("/console/dead-letters?source=orders")
    assert "No dead letters in orders." in assert_html(listing, 200)


async def test_order_page_renders_every_document_by_its_type(console: Console) -> None:
    for document in (
        {"id": "o-1", "orderId": "o-1", "type": "order", "status": "placed"},
        {"id": "o-1-line-1", "orderId": "o-1", "type": "orderLine", "sku": HOSTILE},
        {"id": "pay-1", "orderId": "o-1", "type": "payment", "amount": "2.50"},
        {"id": "x", "orderId": "o-1", "note": {"nested": [1, 2]}, "_rid": "noise"},
    ):
        console.orders.seed_document("o-1", document)

    page = assert_html(await console.client.get("/console/orders?orderId=o-1"), 200)

    # Raw documents: folded away below the timeline, grouped by type.
    raw = page.split('<details id="raw">', 1)[1]
    headings = [part.split("</h3>")[0].split(">")[-1] for part in raw.split("<h3")[1:]]
    assert headings == ["order (1)", "orderLine (1)", "(no type) (1)", "payment (1)"]
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "{&quot;nested&quot;: [1, 2]}" in page and "noise" not in page


async def test_order_page_is_a_timeline_with_its_sources(console: Console) -> None:
    for document in (
        {**new_write("o-2")[0], "processedAt": "2026-12-01T10:00:00+00:00",
         "_etag": "noise-etag", "_lsn": 7},
        {"id": "o-2:status", "orderId": "o-2", "type": "orderStatus", "status": "shipped",
         "version": 3, "history": [
             {"status": "paid", "version": 2, "at": "2026-12-01T10:00:02+00:00"},
             {"status": "shipped", "version": 3, "at": "2026-12-01T10:00:03+00:00"}]},
        {"id": "o-2:shipment", "orderId": "o-2", "type": "shipment", "status": "requested",
         "requestedAt": "2026-12-01T10:00:01+00:00"},
    ):  # fmt: skip
        console.orders.seed_document("o-2", document)

    page = assert_html(await console.client.get("/console/orders?orderId=o-2"), 200)

    summary, raw = page.split('<details id="raw">', 1)
    steps = re.findall(r'<li data-step="(\w+)" data-version="(\d+)">', summary)
    assert steps == [("placed", "1"), ("paid", "2"), ("shipped", "3")]
    assert "Current status: <strong>shipped</strong> (version 3" in summary
    assert "shipment o-2:shipment (inbox container): shipment requested" in summary
    assert "noise-etag" not in summary and "_lsn" not in summary and "noise-etag" in raw
    assert "3 document(s): 1 from the inbox container, 2 from the orders container" in page


async def test_order_page_of_an_unknown_order_says_so(console: Console) -> None:
    page = assert_html(await console.client.get("/console/orders?orderId=nobody"), 200)
    assert "No documents for order nobody." in page
    assert 'label for="orderId"' in assert_html(await console.client.get("/console/orders"), 200)


async def test_counters_json_tallies_the_journal_and_skips_bad_lines(console: Console) -> None:
    console.journal.lines += [
        json.dumps({"outcome": "processed", "settlement": "complete", "at": 1.0}).encode(),
        json.dumps({"outcome": "mismatch", "settlement": "dead_letter", "at": 2.0}).encode(),
        json.dumps({"outcome": "duplicate", "settlement": "complete", "at": 3.0}).encode(),
        b"not json",
        b'{"outcome": "processed", "at": "yesterday"}',
    ]

    response = await console.client.get("/console/api/counters")

    assert response.status_code == 200
    body = response.json()
    assert {name: count for name, count in body["totals"].items() if count} == {
        "decisions": 3,
        "processed": 1,
        "duplicates": 1,
        "mismatches": 1,
        "dead_lettered": 1,
    }
    assert body["skippedLines"] == 2
    assert len(body["series"]) == 60 and body["bucketSeconds"] == 5
    page = assert_html(await console.client.get("/console/counters"), 200)
    assert '<script src="/console/assets/console.js" defer></script>' in page
    script = await console.client.get("/console/assets/console.js")
    assert script.headers["content-type"].startswith("text/javascript")


async def test_without_journals_the_counters_point_to_azure_monitoring() -> None:
    async for console in console_over(journal=False):
        assert_problem(
            await console.client.get("/console/api/counters"), 404, "counters-unavailable"
        )
        assert "Application Insights" in assert_html(
            await console.client.get("/console/counters"), 200
        )


async def test_a_console_that_cannot_be_built_answers_503_and_is_retried() -> None:
    builds: list[int] = []

    async def http_runtime() -> HttpRuntime:
        raise AssertionError("not needed")

    async def failing() -> ConsoleRuntime:
        builds.append(1)
        raise ConnectionError("emulator down")

    app = create_app(http_runtime, console_factory=failing)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console.test"
    ) as client:
        assert "dependency is unavailable" in assert_html(await client.get("/console"), 503)
        assert_problem(await client.get("/console/api/counters"), 503, "service-unavailable")
    assert len(builds) == 2


# --- Hostile input ---------------------------------------------------------------------------

BAD_SEQUENCES = ["0", "-1", "9223372036854775808", "1e3", "١٢", " 1", "1.0", "", "0x10", "9" * 40]


@pytest.mark.parametrize("sequence", BAD_SEQUENCES)
async def test_a_bad_sequence_number_is_a_400_page(console: Console, sequence: str) -> None:
    response = await console.client.get(
        "/console/dead-letters/confirm",
        params={"source": "orders", "action": "purge", "sequence": sequence},
    )
    assert "sequence must be" in assert_html(response, 400)
    posted = await console.post(
        "purge", {"source": "orders", "sequence": sequence, "confirm": "yes"}
    )
    assert_html(posted, 400)
    assert len(console.queue.dead_letters) == 2


@pytest.mark.parametrize(
    "query",
    [
        "",
        "source=nope",
        "source=orders&source=orders",
        "source=" + "o" * 5000,
        "source=ORDERS",
        "source=%00",
    ],
)
async def test_a_bad_source_is_a_400_page(console: Console, query: str) -> None:
    assert_html(await console.client.get(f"/console/dead-letters?{query}"), 400)


@pytest.mark.parametrize(
    "params",
    [
        {"source": "orders", "action": "delete", "sequence": "3"},
        {"source": "orders", "action": "resubmit", "sequence": "all"},
        {"source": "orders", "sequence": "3"},
    ],
)
async def test_a_bad_action_is_a_400_page(console: Console, params: dict[str, str]) -> None:
    assert_html(await console.client.get("/console/dead-letters/confirm", params=params), 400)


@pytest.mark.parametrize("order_id", ["a/b", "x" * 300, "tab\there", "   ", "q?x", "#"])
async def test_an_id_no_order_can_have_is_a_400_page(console: Console, order_id: str) -> None:
    response = await console.client.get("/console/orders", params={"orderId": order_id})
    assert "not an order id" in assert_html(response, 400)


@pytest.mark.parametrize(
    ("headers", "form"),
    [
        ({"Sec-Fetch-Site": "cross-site"}, "source=orders&sequence=3&confirm=yes"),
        ({"Sec-Fetch-Site": "same-site"}, "source=orders&sequence=3&confirm=yes"),
        ({"Origin": "http://evil.test"}, "source=orders&sequence=3&confirm=yes"),
        ({"Origin": "null"}, "source=orders&sequence=3&confirm=yes"),
    ],
)
async def test_a_cross_site_post_is_refused(
    console: Console, headers: dict[str, str], form: str
) -> None:
    response = await console.client.post(
        "/console/dead-letters/purge",
        content=form,
        headers={"Content-Type": "application/x-www-form-urlencoded"} | headers,
    )
    assert_html(response, 403)
    assert len(console.queue.dead_letters) == 2


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", b"source=orders&sequence=3"),  # not confirmed
        ("application/x-www-form-urlencoded", b"source=orders&sequence=3&confirm=no"),
        ("application/json", b'{"source": "orders", "sequence": 3, "confirm": "yes"}'),
        (
            "application/x-www-form-urlencoded",
            b"source=orders&sequence=3&confirm=yes&x=" + b"a" * 5000,
        ),
        ("application/x-www-form-urlencoded", b"&".join([b"a=1"] * 20) + b"&confirm=yes"),
        ("application/x-www-form-urlencoded", "source=orders&sequence=3&confirm=yes&é=1".encode()),
        ("application/x-www-form-urlencoded", b"source=orders&sequence=3&sequence=7&confirm=yes"),
    ],
)
async def test_a_bad_form_is_a_400_page_and_changes_nothing(
    console: Console, content_type: str, body: bytes
) -> None:
    response = await console.client.post(
        "/console/dead-letters/purge",
        content=body,
        headers={"Content-Type": content_type} | SAME_SITE,
    )
    assert_html(response, 400)
    assert len(console.queue.dead_letters) == 2


@given(
    source=st.text(max_size=40),
    action=st.text(max_size=12) | st.sampled_from(["purge", "resubmit"]),
    sequence=st.text(max_size=25) | st.integers().map(str),
)
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
async def test_any_confirm_query_is_answered_with_a_page_never_a_500(
    source: str, action: str, sequence: str
) -> None:
    async for console in console_over():
        response = await console.client.get(
            "/console/dead-letters/confirm",
            params={"source": source, "action": action, "sequence": sequence},
        )
        assert response.status_code in (200, 400, 404)
        assert response.headers["content-type"].startswith("text/html")


@given(order_id=st.text(max_size=200))
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
async def test_any_order_id_is_answered_with_a_page_never_a_500(order_id: str) -> None:
    async for console in console_over():
        response = await console.client.get("/console/orders", params={"orderId": order_id})
        assert response.status_code in (200, 400)
        assert response.headers["content-type"].startswith("text/html")


async def test_unknown_console_paths_are_a_404_page_or_a_problem_under_api(
    console: Console,
) -> None:
    assert_problem(await console.client.get("/console/api/nothing"), 404, "not-found")
    assert "no such console page" in assert_html(await console.client.get("/console/nothing"), 404)
    assert_html(await console.client.post("/console/dead-letters", content=b""), 404)


async def test_the_functions_host_serves_the_console_only_when_the_setting_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # function_app.py calls create_app() with no arguments: settings come from the environment
    # on first use, so here (no COSMOS_ENDPOINT) the console is enabled but cannot be built.
    monkeypatch.delenv("COSMOS_ENDPOINT", raising=False)
    for enabled, status in (("true", 503), ("", 404)):
        monkeypatch.setenv("ORDERS_CONSOLE_ENABLED", enabled)
        transport = httpx.ASGITransport(app=create_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://func.test") as client:
            response = await client.get("/console")
        assert response.status_code == status
        content_type = "text/html" if enabled else PROBLEM
        assert response.headers["content-type"].startswith(content_type)


# --- Forms need the session's token; foreign hosts are refused -----------------------------


async def test_the_confirmation_page_sets_a_strict_session_cookie(console: Console) -> None:
    response = await console.client.get(
        "/console/dead-letters/confirm",
        params={"source": "orders", "action": "purge", "sequence": "3"},
    )
    cookie = response.headers["set-cookie"].lower()
    assert "orders_console_session=" in cookie and "httponly" in cookie
    assert "samesite=strict" in cookie and "path=/console" in cookie
    again = await console.client.get(
        "/console/dead-letters/confirm",
        params={"source": "orders", "action": "purge", "sequence": "7"},
    )
    # One session, one token: every confirmation page of the session carries the same one.
    assert re.findall(r'name="csrf" value="(\w+)"', response.text) == re.findall(
        r'name="csrf" value="(\w+)"', again.text
    )


@pytest.mark.parametrize("token", [None, "", "0" * 64, "not-hex"])
async def test_a_form_without_the_sessions_token_is_refused_and_changes_nothing(
    console: Console, token: str | None
) -> None:
    await console.token()  # the session exists: only the form's token is wrong
    form = {"source": "orders", "sequence": "all", "confirm": "yes"}
    if token is not None:
        form["csrf"] = token
    purge = await console.client.post("/console/dead-letters/purge", data=form, headers=SAME_SITE)
    resubmit = await console.client.post(
        "/console/dead-letters/resubmit", data=form | {"sequence": "3"}, headers=SAME_SITE
    )

    assert "token is missing or stale" in assert_html(purge, 403)
    assert "token is missing or stale" in assert_html(resubmit, 403)
    assert len(console.queue.dead_letters) == 2 and console.queue.resubmitted == []


async def test_a_token_without_its_session_cookie_or_of_another_session_is_refused(
    console: Console,
) -> None:
    token = await console.token()
    form = {"source": "orders", "sequence": "all", "confirm": "yes", "csrf": token}
    console.client.cookies.clear()
    without_cookie = await console.client.post(
        "/console/dead-letters/purge", data=form, headers=SAME_SITE
    )
    # A cookie planted by a neighbour on localhost (cookies ignore ports) has no valid token.
    console.client.cookies.set("orders_console_session", "A" * 43, path="/console")
    planted = await console.client.post("/console/dead-letters/purge", data=form, headers=SAME_SITE)

    assert_html(without_cookie, 403)
    assert_html(planted, 403)
    assert len(console.queue.dead_letters) == 2


async def test_a_dns_rebinding_request_is_refused_before_any_route_and_purges_nothing() -> None:
    """A page that re-bound its own domain to 127.0.0.1: its Origin matches its Host, and the
    browser calls it same-origin, so only the Host tells it apart."""
    async for console in console_over(
        allowed_hosts=AllowedHosts(), base_url="http://127.0.0.1:8000"
    ):
        token = await console.token()  # even with a real session's token
        rebound = {
            "Host": "evil.example:8000",
            "Origin": "http://evil.example:8000",
            "Sec-Fetch-Site": "same-origin",
        }
        purge = await console.client.post(
            "/console/dead-letters/purge",
            data={"source": "orders", "sequence": "all", "confirm": "yes", "csrf": token},
            headers=rebound,
        )
        read = await console.client.get("/console/dead-letters?source=orders", headers=rebound)
        api = await console.client.get("/api/orders/o-1", headers=rebound)

        for refused in (purge, read, api):
            assert_problem(refused, 421, "misdirected-request")
        assert len(console.queue.dead_letters) == 2


@pytest.mark.parametrize(
    ("host", "allowed", "status"),
    [
        ("127.0.0.1:8000", (), 200),
        ("localhost:8000", (), 200),
        ("LOCALHOST:8000", (), 200),
        ("localhost:8001", (), 421),  # another port is another server
        ("localhost", (), 421),  # no port means 80
        ("127.0.0.1.evil.example:8000", (), 421),
        ("evil.example:8000", (), 421),
        ("", (), 421),
        ("localhost:8000@evil.example", (), 421),
        ("localhost:99999", (), 421),
        ("orders-api:8000", ("orders-api",), 200),  # a bare name: with the server's port
        ("orders-api:8080", ("orders-api:8080",), 200),  # a container's published port
        ("orders-api:8081", ("orders-api:8080",), 421),
    ],
)
async def test_the_host_allow_list(host: str, allowed: tuple[str, ...], status: int) -> None:
    async for console in console_over(
        allowed_hosts=AllowedHosts.parse(allowed), base_url="http://127.0.0.1:8000"
    ):
        response = await console.client.get("/console", headers={"Host": host})
        assert response.status_code == status


@pytest.mark.parametrize("entry", ["", "a/b", "host:port", "x:70000", "a b", "é.test"])
def test_a_bad_allowed_host_is_refused_at_start(entry: str) -> None:
    with pytest.raises(ValueError, match="not a host"):
        AllowedHosts.parse([entry])


# --- Warm-up: the local servers build the console before its first page ----------------------


class SignallingCounter(FakeEntityCounter):
    """Counts as the fake does, and says when each entity was counted."""

    def __init__(self, queues: dict[Source, FakeDeadLetterQueue]) -> None:
        super().__init__(queues)
        self.counted: list[Source] = []
        self.all_counted = asyncio.Event()

    async def count(self, source: Source, limit: int) -> EntityCounts:
        self.counted.append(source)
        if len(self.counted) == len(self.queues):
            self.all_counted.set()
        return await super().count(source, limit)


@pytest.mark.parametrize("warm", [True, False])
async def test_a_warmed_console_is_built_and_counted_at_startup_before_any_page(
    warm: bool,
) -> None:
    queues = {QUEUE: FakeDeadLetterQueue(QUEUE, [dead_letter(3)])}
    counter = SignallingCounter(queues)
    built: list[str] = []

    async def console_runtime() -> ConsoleRuntime:
        built.append("console")
        console = OperationsConsole(
            [QUEUE],
            counter,
            queues.__getitem__,
            FakeOrderReader(FakeOrderStore()),
            None,
            layout=LAYOUT,
            duplicate_window=timedelta(minutes=10),
        )
        return ConsoleRuntime(console)

    async def no_api() -> HttpRuntime:
        raise AssertionError("no API request is made")

    app = create_app(no_api, console_factory=console_runtime, warm_console=warm)
    async with app.router.lifespan_context(app):
        if warm:
            await asyncio.wait_for(counter.all_counted.wait(), 10)
        else:
            # Nothing is scheduled without warm-up: one turn of the loop would have started it.
            await asyncio.sleep(0)

    assert built == (["console"] if warm else [])
    assert counter.counted == ([QUEUE] if warm else [])
