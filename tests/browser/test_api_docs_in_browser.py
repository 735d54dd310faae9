"""Swagger UI and ReDoc in headless Chromium, from `orders serve` alone: the pages render the
API's operations with every script and style served by the app (nothing from a CDN, so they
work offline). `orders serve` checks its stack before it starts (one line and exit 2 for a
stopped one, issue 46), so it runs over our two emulators, started here; the pages read nothing
from them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from browser_support import poll_until, screenshot
from servers import free_port, stop_process, wait_for_port

from cosmos_emulator import start_in_background as start_cosmos
from orders.entrypoints.localstack import QueueOptions
from servicebus_emulator import start_in_background as start_servicebus

pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    port = free_port()
    cosmos = start_cosmos(host="127.0.0.1", port=0)
    servicebus = start_servicebus(config=QueueOptions().config())
    stack = {
        "COSMOS_ENDPOINT": cosmos.url,
        "COSMOS_KEY": cosmos.key,
        "ServiceBusConnection": servicebus.connection_string,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "orders", "serve", "--port", str(port)],
        env={**os.environ, **stack},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)
        servicebus.stop()
        cosmos.stop()


def offline(driver: Any) -> None:
    """As without a network: every https URL (every CDN) fails; the app is plain http."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["https://*"]})


def code_loaded_from(driver: Any) -> set[str]:
    """The origins of the scripts, styles and data the page loaded (ReDoc also tries a
    decorative logo from its vendor and hides it when that fails: not what makes it work)."""
    names = driver.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter(e => ['script', 'link', 'css', 'fetch', 'xmlhttprequest']"
        ".includes(e.initiatorType)).map(e => e.name)"
    )
    assert names, "the page loaded no scripts"
    return {"/".join(str(name).split("/")[:3]) for name in names}


def test_swagger_ui_renders_the_operations_from_local_assets(browser: Any, api_url: str) -> None:
    from selenium.webdriver.common.by import By

    offline(browser)
    browser.get(f"{api_url}/api/docs")
    paths = poll_until(
        lambda: [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")],
        30.0,
        "Swagger UI to render the operations",
    )
    screenshot(browser, "api-docs-swagger")
    assert "/api/orders" in paths and "/api/orders/{orderId}" in paths
    assert code_loaded_from(browser) == {api_url}


def test_redoc_renders_the_operations_from_local_assets(browser: Any, api_url: str) -> None:
    from selenium.webdriver.common.by import By

    offline(browser)
    browser.get(f"{api_url}/api/redoc")
    poll_until(
        lambda: "Place an order" in browser.find_element(By.TAG_NAME, "body").text,
        30.0,
        "ReDoc to render the operations",
    )
    screenshot(browser, "api-docs-redoc")
    assert code_loaded_from(browser) == {api_url}
