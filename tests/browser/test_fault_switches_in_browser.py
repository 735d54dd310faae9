"""Issue 37, item 4, in a real browser: a page of another site open in the developer's Chromium
tries to switch on the faults of the payment stand-in and of the Cosmos emulator, as any web page
can, with requests the browser sends without asking anyone: `fetch` in `no-cors` mode with a
`text/plain` body, and a `text/plain` form posted into an iframe. Both servers answer, refuse
(403, for the page's Origin), and install nothing: checked through their own state, with the
token.

Issue 46, item 5: the same page tries to move money through the stand-in (`POST /payments`, and
`POST /refunds` of a real payment) the same two ways, and with a CORS `fetch` carrying the
headers a charge needs (`Idempotency-Key`, JSON, a guessed token), which the browser sends only
after a preflight the stand-in never grants. Nothing is charged or refunded: checked through the
stand-in's own listing.

The page is served by a tiny http.server as `localhost`, the targets as `127.0.0.1`: another
site, as a page on the internet would be, and both on loopback, so no Private Network Access
rule of the browser's stands in the way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from browser_support import poll_until
from payment_service import StandinProcess, running_standin

from cosmos_emulator import RunningCosmosEmulator, start_in_background

pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.timeout(120)]

# What a page would switch on to break the app: every charge refused, every Cosmos request 503.
PAYMENTS_RULE: dict[str, object] = {"kind": "refuse", "count": 1000}
COSMOS_RULE: dict[str, object] = {"status": 503, "count": 1000}

# The page's script, around the fetches it makes (FETCHES: a list of promises of a result): once
# they settled, it posts each target's `field` as a text/plain form into an iframe of its own.
SCRIPT = """<!doctype html>
<html><head><title>a page of another site</title></head><body>
<script>
const targets = TARGETS;
window.fetched = null;
window.loaded = [];
HELPERS
Promise.all(FETCHES).then(results => {
  window.fetched = results;
  for (const t of targets) {
    const frame = document.createElement('iframe');
    frame.name = 'answer-' + t.name;
    document.body.appendChild(frame);
    // Set after inserting: an empty iframe fires a load of its own when inserted.
    frame.onload = () => window.loaded.push(t.name);
    const form = document.createElement('form');
    form.method = 'POST';
    form.enctype = 'text/plain';
    form.action = t.url;
    form.target = frame.name;
    const field = document.createElement('input');
    field.type = 'hidden';
    [field.name, field.value] = t.field;
    form.appendChild(field);
    document.body.appendChild(form);
    form.submit();
  }
});
</script></body></html>
"""
# A simple request: the browser sends it without asking, and hides the answer.
SIMPLE = """const simple = t => fetch(t.url, {
  method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'},
  body: JSON.stringify(t.rule),
}).then(() => 'answered', e => 'failed: ' + e);"""
PAGE = SCRIPT.replace("HELPERS", SIMPLE).replace("FETCHES", "targets.map(simple)")


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    rule: dict[str, object]
    text_field: str  # a field of the rule that takes any text

    def as_page_sees_it(self) -> dict[str, Any]:
        """With the form's one field: a text/plain form sends `NAME=VALUE`, so a name that
        opens a JSON string and a value that closes it make the body the rule plus a string
        field holding `=` (the classic trick against JSON endpoints)."""
        opened = json.dumps({**self.rule, self.text_field: ""})
        return {
            "name": self.name,
            "url": self.url,
            "rule": self.rule,
            "field": [opened[:-2], '"}'],
        }


@dataclass(frozen=True)
class ForeignSite:
    url: str
    targets: list[Target]


def serve_page(html: str) -> ThreadingHTTPServer:
    """A page of another site: a tiny http.server on a free port of 127.0.0.1, on a thread."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test's output is the assertions, not an access log

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinProcess]:
    with running_standin() as running:
        yield running


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningCosmosEmulator]:
    with start_in_background("127.0.0.1", 0) as running:
        yield running


@pytest.fixture
def foreign_site(standin: StandinProcess, emulator: RunningCosmosEmulator) -> Iterator[ForeignSite]:
    targets = [
        Target("payments", f"{standin.url}/faults", PAYMENTS_RULE, "order_id"),
        Target("cosmos", f"{emulator.url}_emulator/faults", COSMOS_RULE, "path_contains"),
    ]
    page = PAGE.replace("TARGETS", json.dumps([t.as_page_sees_it() for t in targets]))
    server = serve_page(page)
    try:
        yield ForeignSite(f"http://localhost:{server.server_address[1]}/", targets)
    finally:
        server.shutdown()
        server.server_close()


def answer_in_frame(browser: Any, name: str) -> str:
    """The text the server answered the form with (WebDriver reads across origins)."""
    browser.switch_to.frame(browser.find_element("name", f"answer-{name}"))
    try:
        return str(browser.find_element("tag name", "body").text)
    finally:
        browser.switch_to.default_content()


def test_a_cross_site_page_cannot_switch_faults_on(
    browser: Any,
    foreign_site: ForeignSite,
    standin: StandinProcess,
    emulator: RunningCosmosEmulator,
) -> None:
    browser.get(foreign_site.url)

    # Both servers answered the fetches (an opaque answer, not a network error)...
    fetched = poll_until(
        lambda: browser.execute_script("return window.fetched"), 30.0, "the page's fetches"
    )
    assert fetched == ["answered", "answered"]
    # ...and the forms, with a refusal for the page's origin.
    poll_until(
        lambda: len(browser.execute_script("return window.loaded")) == 2,
        30.0,
        "the answers to the page's forms",
    )
    assert "foreign-origin" in answer_in_frame(browser, "payments")
    assert "Forbidden" in answer_in_frame(browser, "cosmos")
    # Nothing was switched on, by either request.
    with httpx.Client(headers=standin.fault_headers()) as operator:
        assert operator.get(f"{standin.url}/faults").json() == {"faults": []}
    assert emulator.pending_faults() == []


# --- money: a page cannot charge or refund through the stand-in (issue 46) --------------------

# Besides the simple request, one with a charge's headers: sent only after a CORS preflight.
PREFLIGHTED = """const preflighted = t => fetch(t.url, {
  method: 'POST',
  headers: {'Content-Type': 'application/json', 'Idempotency-Key': 'page-' + t.name,
            'Authorization': 'Bearer guessed-token-of-enough-length'},
  body: JSON.stringify(t.rule),
}).then(r => 'read ' + r.status, e => 'refused');"""
MONEY_PAGE = SCRIPT.replace("HELPERS", SIMPLE + "\n" + PREFLIGHTED).replace(
    "FETCHES", "targets.flatMap(t => [simple(t), preflighted(t)])"
)


@dataclass(frozen=True)
class MoneySite:
    url: str
    order_id: str  # the order the page tries to charge
    paid_order_id: str  # the order whose real payment it tries to refund


@pytest.fixture
def money_site(standin: StandinProcess) -> Iterator[MoneySite]:
    with httpx.Client(base_url=standin.url, auth=standin.auth()) as app:
        paid = app.post(
            "/payments",
            json={"orderId": "o-paid-by-the-app", "amount": "12.50", "currency": "EUR"},
            headers={"Idempotency-Key": "billing:o-paid-by-the-app"},
        )
        assert paid.status_code == 201, paid.text
    payment_id = paid.json()["paymentId"]
    targets = [
        Target(
            "payments",
            f"{standin.url}/payments",
            {"orderId": "o-charged-by-a-page", "amount": "12.50", "currency": "EUR"},
            "note",
        ),
        Target(
            "refunds",
            f"{standin.url}/refunds",
            {"paymentId": payment_id, "amount": "12.50", "currency": "EUR"},
            "note",
        ),
    ]
    page = MONEY_PAGE.replace("TARGETS", json.dumps([t.as_page_sees_it() for t in targets]))
    server = serve_page(page)
    try:
        yield MoneySite(
            f"http://localhost:{server.server_address[1]}/",
            "o-charged-by-a-page",
            "o-paid-by-the-app",
        )
    finally:
        server.shutdown()
        server.server_close()


def test_a_cross_site_page_cannot_charge_or_refund_through_the_stand_in(
    browser: Any, money_site: MoneySite, standin: StandinProcess
) -> None:
    browser.get(money_site.url)

    # The simple requests are sent and answered (opaquely); the ones with a charge's headers
    # never leave the browser: their preflight is refused.
    fetched = poll_until(
        lambda: browser.execute_script("return window.fetched"), 30.0, "the page's fetches"
    )
    assert fetched == ["answered", "refused", "answered", "refused"]
    poll_until(
        lambda: len(browser.execute_script("return window.loaded")) == 2,
        30.0,
        "the answers to the page's forms",
    )
    # The forms are refused for the page's origin, not for a detail the page could get right.
    assert "foreign-origin" in answer_in_frame(browser, "payments")
    assert "foreign-origin" in answer_in_frame(browser, "refunds")
    # No money moved: nothing charged for the page's order, the app's payment not refunded.
    with httpx.Client(base_url=standin.url, auth=standin.auth()) as operator:
        charged = operator.get("/payments", params={"orderId": money_site.order_id})
        refunded = operator.get("/refunds", params={"orderId": money_site.paid_order_id})
    assert charged.json()["payments"] == [] and refunded.json()["refunds"] == []
