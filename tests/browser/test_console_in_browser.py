"""The operations console in a real browser (headless Chromium), on the real local stack: our
emulators as processes, a real `orders worker`, `orders serve --console`. Each test does what an
operator does and checks what they see; screenshots are kept under tests/browser/artifacts (or
$ORDERS_BROWSER_ARTIFACTS).

The tests share one stack (module scope) on one xdist worker, in no particular order: each
uses its own order ids, asserts on its own messages, and leaves the queue empty.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from browser_support import ConsoleStack, poll_until, screenshot
from poison_corpus import order, valid_order_body

from orders.adapters.decision_journals import consumer_of
from orders.domain.decision_counters import kind_counter
from orders.domain.ownership import OWNER_PROPERTY, app_scope
from orders.domain.status import OrderStatus, OrderStatusChanged

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser"), pytest.mark.timeout(240)]


def send(console: ConsoleStack, body: bytes, message_id: str) -> None:
    """A message as any producer sends it: through the real SDK to our emulator, owned by the
    stack's API callers' scope, so the console's API may show the order it becomes."""
    owner: dict[str | bytes, Any] = {
        OWNER_PROPERTY: app_scope(console.stack.settings().idempotency_scope)
    }
    with (
        ServiceBusClient.from_connection_string(
            console.stack.servicebus_connection_string
        ) as client,
        client.get_queue_sender(console.stack.queue.name) as sender,
    ):
        sender.send_messages(
            ServiceBusMessage(body, message_id=message_id, application_properties=owner)
        )


def peek(console: ConsoleStack, *, dead_letters: bool) -> list[Any]:
    with ServiceBusClient.from_connection_string(
        console.stack.servicebus_connection_string
    ) as client:
        sub_queue = ServiceBusSubQueue.DEAD_LETTER if dead_letters else None
        with client.get_queue_receiver(console.stack.queue.name, sub_queue=sub_queue) as receiver:
            return list(receiver.peek_messages(max_message_count=100, sequence_number=1))


def new_order_id() -> str:
    return f"console-{uuid.uuid4().hex[:10]}"


def open_page(driver: Any, url: str) -> None:
    driver.get(url)
    poll_until(lambda: driver.execute_script("return document.readyState") == "complete",
               30.0, f"{url} to load")  # fmt: skip


def body_text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def dead_letter_row(driver: Any, message_id: str) -> Any:
    """The list's row of this MessageId (shown as it is, in a cell of its own), or None."""
    from selenium.webdriver.common.by import By

    for row in driver.find_elements(By.CSS_SELECTOR, "#dead-letters tbody tr"):
        if message_id in row.text.split():
            return row
    return None


def wait_for_dead_letter(driver: Any, console: ConsoleStack, message_id: str) -> Any:
    list_url = f"{console.url}/console/dead-letters?source=orders"

    def shown() -> Any:
        open_page(driver, list_url)
        return dead_letter_row(driver, message_id)

    return poll_until(shown, 60.0, f"dead letter {message_id} in the console")


def tab_to(driver: Any, matches: Any, what: str, limit: int = 80) -> Any:
    """Press Tab until the focused element satisfies `matches`; the keyboard path a person takes."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for _ in range(limit):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        focused = driver.switch_to.active_element
        if matches(focused):
            return focused
    raise AssertionError(f"Tab never reached {what}")


def press_enter(driver: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    ActionChains(driver).send_keys(Keys.ENTER).perform()


def has_visible_focus(driver: Any, element: Any) -> bool:
    style = driver.execute_script(
        "const s = getComputedStyle(arguments[0]); return [s.outlineStyle, s.outlineWidth];",
        element,
    )
    return bool(style[0] != "none" and style[1] not in ("0px", ""))


def wait_until_outside_duplicate_window(console: ConsoleStack, enqueued: datetime) -> None:
    """A copy inside the queue's duplicate window would be dropped by the broker; the console
    refuses it then. Wait for the window to pass (a condition on the clock, with a deadline)."""
    window = console.stack.queue.duplicate_window_seconds
    poll_until(lambda: (datetime.now(UTC) - enqueued).total_seconds() > window + 0.5,
               window + 10.0, "the duplicate window to pass")  # fmt: skip


def test_overview_lists_the_queue_with_counts(console: ConsoleStack, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    # Given one message scheduled for later: the broker keeps it, no worker takes it.
    with (
        ServiceBusClient.from_connection_string(
            console.stack.servicebus_connection_string
        ) as client,
        client.get_queue_sender(console.stack.queue.name) as sender,
    ):
        [scheduled] = sender.schedule_messages(
            ServiceBusMessage(b"{}", message_id=new_order_id()),
            datetime.now(UTC) + timedelta(hours=1),
        )
        expected = [str(len(peek(console, dead_letters=flag))) for flag in (True,)]
        try:
            open_page(browser, f"{console.url}/console")
            screenshot(browser, "overview")
        finally:
            sender.cancel_scheduled_messages(scheduled)

    header = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "thead th")]
    assert header[:5] == ["Entity", "Kind", "Active", "Scheduled", "Dead-lettered"]
    row = browser.find_element(By.CSS_SELECTOR, "tbody tr")
    assert row.find_element(By.TAG_NAME, "th").text == "orders"
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == ["queue", "0", "1", *expected]
    assert row.find_element(By.LINK_TEXT, "Dead letters of orders").get_attribute("href") == (
        f"{console.url}/console/dead-letters?source=orders"
    )


def test_a_dead_letter_appears_and_keyboard_resubmit_moves_it_back(
    console: ConsoleStack, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    # Given an order stored, then a different payload under its id: the worker dead-letters
    # that one as RequestHashMismatch.
    order_id = new_order_id()
    sent_at = datetime.now(UTC)
    send(console, valid_order_body(order_id), order_id)
    console.wait_for_decision(order_id, outcome="processed")
    # Same MessageId: sent inside the window, the broker would drop it as a duplicate.
    wait_until_outside_duplicate_window(console, sent_at)
    different = json.dumps(order(order_id, customerId="customer-2")).encode()
    send(console, different, order_id)
    console.wait_for_decision(order_id, outcome="mismatch", settlement="dead_letter")

    # Then it appears in the list with its reason, delivery count and body.
    row = wait_for_dead_letter(browser, console, order_id)
    screenshot(browser, "dead-letter-listed")
    assert "RequestHashMismatch" in row.text
    assert "customer-2" in row.text
    sequence = int(row.find_element(By.TAG_NAME, "th").text)

    # When the operator resubmits it with the keyboard only, without force: refused, kept.
    focused = tab_to(browser, lambda e: e.text == f"Resubmit {sequence}", "the resubmit link")
    assert has_visible_focus(browser, focused)
    press_enter(browser)
    poll_until(lambda: "Resubmit dead letter" in browser.title, 30.0, "the confirm page")
    screenshot(browser, "resubmit-confirm")
    assert "RequestHashMismatch" in body_text(browser)
    tab_to(browser, lambda e: e.text == f"Resubmit dead letter {sequence}", "the confirm button")
    press_enter(browser)
    poll_until(lambda: browser.find_elements(By.ID, "outcome"), 30.0, "the outcome")
    screenshot(browser, "resubmit-refused")
    assert browser.find_element(By.ID, "outcome").text == "Resubmitted: none."
    assert "RequestHashMismatch" in browser.find_element(By.ID, "refused").text

    # With force (the checkbox, reached and ticked by keyboard) and outside the duplicate
    # window, it goes back to the queue with its MessageId. The worker is stopped first, so
    # the message stays there to be seen.
    console.stack.stop_workers()
    enqueued = next(m for m in peek(console, dead_letters=True) if m.message_id == order_id)
    wait_until_outside_duplicate_window(console, enqueued.enqueued_time_utc)
    open_page(browser, f"{console.url}/console/dead-letters?source=orders")
    tab_to(browser, lambda e: e.text == f"Resubmit {sequence}", "the resubmit link")
    press_enter(browser)
    poll_until(lambda: "Resubmit dead letter" in browser.title, 30.0, "the confirm page")
    force = tab_to(browser, lambda e: e.get_attribute("id") == "force", "the force checkbox")
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    ActionChains(browser).send_keys(Keys.SPACE).perform()
    assert force.is_selected()
    tab_to(browser, lambda e: e.text == f"Resubmit dead letter {sequence}", "the confirm button")
    press_enter(browser)
    poll_until(lambda: browser.find_elements(By.ID, "outcome"), 30.0, "the outcome")
    screenshot(browser, "resubmitted")
    assert browser.find_element(By.ID, "outcome").text == f"Resubmitted: {sequence}."

    back = [m for m in peek(console, dead_letters=False) if m.message_id == order_id]
    assert len(back) == 1
    assert str(back[0].application_properties[b"ResubmittedBy"], "utf-8").startswith("console:")
    open_page(browser, f"{console.url}/console/dead-letters?source=orders")
    assert dead_letter_row(browser, order_id) is None
    open_page(browser, f"{console.url}/console")
    cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "tbody tr td")]
    assert cells[1] == "1", cells  # active: the resubmitted message waits in the queue

    # A worker takes it again and, still a mismatch, dead-letters it again (queue left empty).
    console.stack.start_worker(concurrency=2)
    console.wait_for_decision(order_id, times=2, outcome="mismatch")


def test_purge_all_after_confirmation_empties_the_list(console: ConsoleStack, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    message_id = new_order_id()
    send(console, b"{this is not json", message_id)
    wait_for_dead_letter(browser, console, message_id)

    browser.find_element(By.LINK_TEXT, "Purge all dead letters").click()
    poll_until(lambda: "Purge every dead letter" in browser.title, 30.0, "the confirm page")
    screenshot(browser, "purge-confirm")
    # Nothing is gone before the confirmation.
    assert any(m.message_id == message_id for m in peek(console, dead_letters=True))
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    poll_until(lambda: browser.find_elements(By.ID, "outcome"), 30.0, "the outcome")
    screenshot(browser, "purged")
    assert browser.find_element(By.ID, "outcome").text.startswith("Purged: ")

    browser.find_element(By.LINK_TEXT, "Back to the dead letters of orders").click()
    poll_until(lambda: browser.find_elements(By.ID, "empty"), 30.0, "the empty list")
    assert body_text(browser).count("No dead letters in orders.") == 1
    assert peek(console, dead_letters=True) == []


def test_order_page_shows_every_document_of_the_order(console: ConsoleStack, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    order_id = new_order_id()
    sent_at = datetime.now(UTC)
    send(console, valid_order_body(order_id), order_id)
    console.wait_for_decision(order_id, outcome="processed")
    wait_until_outside_duplicate_window(console, sent_at)
    send(console, json.dumps(order(order_id, currency="USD")).encode(), order_id)
    console.wait_for_decision(order_id, outcome="mismatch")

    # The operator types the id into the labelled field and presses Enter.
    open_page(browser, f"{console.url}/console/orders")
    field = browser.find_element(By.ID, "orderId")
    label = browser.find_element(By.CSS_SELECTOR, "label[for=orderId]")
    assert label.text == "Order id"
    field.send_keys(order_id)
    press_enter(browser)
    poll_until(lambda: browser.find_elements(By.ID, "found"), 30.0, "the order's documents")
    screenshot(browser, "order-timeline")
    steps = browser.find_elements(By.CSS_SELECTOR, "#timeline > li")
    assert [step.get_attribute("data-step") for step in steps] == ["placed"]
    assert "order " + order_id in steps[0].text and "orders container" in steps[0].text
    # The raw documents are folded away until asked for.
    raw = browser.find_element(By.ID, "raw")
    assert raw.get_attribute("open") is None
    raw.find_element(By.TAG_NAME, "summary").click()
    screenshot(browser, "order-documents")
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#raw h3")]
    # The outbox event came with the order's batch: a document type the console never named.
    assert headings == ["order (1)", "orderLine (1)", "orderRejection (1)", "outbox (1)"]
    assert "RequestHashMismatch" in body_text(browser)

    # An id no order can have is refused on the page, with the reason.
    open_page(browser, f"{console.url}/console/orders?orderId=a%2Fb")
    assert "not an order id" in browser.find_element(By.ID, "error").text


def test_counters_page_renders_and_updates_without_a_reload(
    console: ConsoleStack, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    open_page(browser, f"{console.url}/console/counters")

    def processed() -> int | None:
        text = browser.find_element(By.ID, "count-processed").text
        return int(text) if text.isdigit() else None

    [before] = poll_until(lambda: [processed()] if processed() is not None else None,
                          30.0, "the counters")  # fmt: skip
    lines = browser.find_elements(By.CSS_SELECTOR, "#chart polyline")
    assert {line.get_attribute("data-series") for line in lines} == {
        "processed", "duplicates", "stale", "mismatches", "dead_lettered"
    }  # fmt: skip
    # Read at a glance: axes with their ticks, a legend, and the counts per consumer.
    axes = browser.find_elements(By.CSS_SELECTOR, "#chart [data-axis]")
    assert {axis.get_attribute("data-axis") for axis in axes} == {"x", "y"}
    ticks = [tick.text for tick in browser.find_elements(By.CSS_SELECTOR, "#chart .tick-x")]
    assert "now" in ticks and "-4 min" in ticks
    assert "Stale" in browser.find_element(By.ID, "legend").text

    page_loaded_at = browser.execute_script("return performance.timeOrigin")

    order_id = new_order_id()
    send(console, valid_order_body(order_id), order_id)
    poll_until(lambda: (processed() or 0) > before, 60.0, "the processed counter to rise")
    cell = poll_until(
        lambda: browser.find_elements(
            By.CSS_SELECTOR, '#by-consumer td[data-consumer="orders"][data-counter="processed"]'
        ),
        30.0,
        "the orders workers' column",
    )
    assert int(cell[0].text) >= 1
    screenshot(browser, "counters")
    # Still the same page: the script updated it in place.
    assert browser.execute_script("return performance.timeOrigin") == page_loaded_at


# Pages and what each needs on screen; the overflow check runs at the width of a small laptop.
LAYOUT_WIDTH, LAYOUT_HEIGHT = 1280, 800
OVERFLOWING = """
const page = document.documentElement;
const wide = [...document.querySelectorAll("table, pre, svg")].filter((element) =>
  element.scrollWidth > element.clientWidth + 1 ||
  element.getBoundingClientRect().right > page.clientWidth + 1);
return { page: page.scrollWidth > page.clientWidth + 1,
  tables: wide.map((element) => element.id || element.className || element.tagName) };
"""


def test_every_page_fits_a_1280_pixel_screen(console: ConsoleStack, browser: Any) -> None:
    from azure.servicebus import ServiceBusClient, ServiceBusSubQueue
    from selenium.webdriver.common.by import By

    # The widest content a dead letter brings: a long unbroken body, id and description.
    message_id = new_order_id() + "-" + "x" * 40
    send(console, b'{"note": "' + b"y" * 600 + b'"', message_id)
    row = wait_for_dead_letter(browser, console, message_id)
    sequence = row.find_element(By.CSS_SELECTOR, "th").text
    order_id = new_order_id()
    send(console, valid_order_body(order_id), order_id)
    console.wait_for_decision(order_id, outcome="processed")
    pages = {
        "queues": "/console",
        "dead-letters": "/console/dead-letters?source=orders",
        "confirm": "/console/dead-letters/confirm?source=orders&action=resubmit"
        f"&sequence={sequence}",
        "order": f"/console/orders?orderId={order_id}",
        "counters": "/console/counters",
    }
    browser.set_window_size(LAYOUT_WIDTH, LAYOUT_HEIGHT)
    try:
        width = browser.execute_script("return document.documentElement.clientWidth")
        assert LAYOUT_WIDTH - 40 <= width <= LAYOUT_WIDTH, width
        overflowing = {}
        for name, path in pages.items():
            open_page(browser, console.url + path)
            for details in browser.find_elements(By.CSS_SELECTOR, "details"):
                details.find_element(By.TAG_NAME, "summary").click()  # raw documents too
            found = browser.execute_script(OVERFLOWING)
            screenshot(browser, f"layout-1280-{name}")
            if found["page"] or found["tables"]:
                overflowing[name] = found
        assert overflowing == {}, f"wider than {LAYOUT_WIDTH} px: {overflowing}"
    finally:
        browser.set_window_size(1280, 900)
        with (
            ServiceBusClient.from_connection_string(
                console.stack.servicebus_connection_string
            ) as client,
            client.get_queue_receiver(
                console.stack.queue.name, sub_queue=ServiceBusSubQueue.DEAD_LETTER
            ) as dead_letters,
        ):
            for message in dead_letters.receive_messages(max_message_count=50, max_wait_time=5):
                if message.message_id == message_id:
                    dead_letters.complete_message(message)
                else:
                    dead_letters.abandon_message(message)


def send_status(console: ConsoleStack, change: OrderStatusChanged) -> None:
    """A status update as billing or shipping sends it, to the stack's status queue."""
    with (
        ServiceBusClient.from_connection_string(
            console.stack.servicebus_connection_string
        ) as client,
        client.get_queue_sender(console.stack.queue.status_queue) as sender,
    ):
        sender.send_messages(ServiceBusMessage(change.body(), message_id=change.message_id))


def journal_counts(console: ConsoleStack) -> dict[str, Counter[str]]:
    """Each consumer's decisions per kind, read straight from the workers' journals."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for journal in console.stack.workdir.glob("*.decisions.jsonl"):
        for line in journal.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "backoff" in entry:  # a wait announced before deciding again: not a decision
                continue
            consumer = consumer_of(journal)
            counts[consumer]["decisions"] += 1
            counts[consumer][kind_counter(entry["outcome"])] += 1
    return counts


def test_the_timeline_is_gets_history_and_the_counters_are_the_decision_logs(
    console: ConsoleStack, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    if not [p for p in console.stack.processes if p.name.startswith("status") and p.running]:
        console.stack.start_subscriber("status")
    order_id = new_order_id()
    send(console, valid_order_body(order_id), order_id)
    console.wait_for_decision(order_id, outcome="processed")
    # shipped (3) arrives before paid (2), as it can when two producers race
    now = datetime.now(UTC)
    send_status(console, OrderStatusChanged.of(order_id, OrderStatus.SHIPPED, changed_at=now))
    got = poll_until(
        lambda: (history := httpx.get(f"{console.url}/api/orders/{order_id}").json().get(
            "statusHistory", [])) and history[-1]["status"] == "shipped" and history,
        60.0, "GET to show shipped",
    )  # fmt: skip
    send_status(console, OrderStatusChanged.of(order_id, OrderStatus.PAID, changed_at=now))
    got = poll_until(
        lambda: len(history := httpx.get(f"{console.url}/api/orders/{order_id}").json()[
            "statusHistory"]) == 3 and history,
        60.0, "GET to keep the late paid",
    )  # fmt: skip

    open_page(browser, f"{console.url}/console/orders?orderId={order_id}")
    steps = browser.find_elements(By.CSS_SELECTOR, "#timeline > li")
    screenshot(browser, "order-history")
    shown = [(s.get_attribute("data-step"), int(s.get_attribute("data-version"))) for s in steps]
    assert shown == [(c["status"], c["version"]) for c in got]
    assert shown == [("placed", 1), ("paid", 2), ("shipped", 3)]
    assert "version 3" in browser.find_element(By.ID, "current-status").text

    # Every consumer's row on the counters page is its decision log, kind by kind.
    open_page(browser, f"{console.url}/console/counters")
    counters = [
        row.get_attribute("data-counter")
        for row in browser.find_elements(By.CSS_SELECTOR, "#by-consumer tbody tr[data-counter]")
    ]
    assert {"skipped_cancelled", "nothing_to_refund", "refunded", "decisions"} <= set(counters)

    def rows_match_the_logs() -> dict[str, dict[str, int]] | None:
        # The whole table in one call, as the page has it between two of its refreshes (every
        # 2 s): read cell by cell, three WebDriver calls a cell, a loaded machine took longer
        # than a refresh, so the table was always replaced while it was read.
        cells = browser.execute_script(
            "return Array.from(document.querySelectorAll('#by-consumer td[data-consumer]'))"
            ".map((td) => [td.dataset.consumer, td.dataset.counter, td.textContent]);"
        )
        rows: dict[str, dict[str, int]] = defaultdict(dict)
        for consumer, counter, text in cells:
            if consumer != "all":
                rows[str(consumer)][str(counter)] = int(text)
        logs = {c: dict(kinds) for c, kinds in journal_counts(console).items()}
        settlements = ("dead_lettered", "abandoned")
        seen = {
            consumer: {
                name: count for name, count in row.items() if count and name not in settlements
            }
            for consumer, row in rows.items()
        }
        last_compared[:] = [seen, logs]
        return rows if seen == logs else None

    last_compared: list[dict[str, dict[str, int]]] = []
    try:
        rows = poll_until(rows_match_the_logs, 30.0, "the counters to equal the decision logs")
    except AssertionError as timed_out:
        page, logs = last_compared or [{}, {}]
        raise AssertionError(f"{timed_out}: the page showed {page}, the logs held {logs}") from None
    assert rows["status"]["stale"] >= 1 and rows["status"]["processed"] >= 1
    screenshot(browser, "counters-equal-logs")
