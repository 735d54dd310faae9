"""Helpers of the browser tests: headless Chromium from Debian driven by Selenium, the local
stack with the console, and what a person does (send a message, wait for the worker).

A module of its own rather than conftest.py: several test areas have a conftest.py.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orders.entrypoints.localstack import LocalStack, ManagedProcess, QueueOptions

# Debian's chromium first; Google Chrome where a CI image ships it with a matching driver.
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
ARTIFACTS_ENV = "ORDERS_BROWSER_ARTIFACTS"
ARTIFACTS = Path(os.environ.get(ARTIFACTS_ENV) or Path(__file__).parent / "artifacts")
# The official emulator's shortest duplicate window: a resubmit waits for it to pass.
CONSOLE_QUEUE = QueueOptions(duplicate_window_seconds=2, lock_seconds=5, max_delivery_count=10)
API_READY = re.compile(r"Uvicorn running on (http://\S+)")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def browser_binary() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def browser_unavailable_reason() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if browser_binary() is None or shutil.which("chromedriver") is None:
        return "no chromium/chromedriver: `make browser` (apt-get install chromium chromium-driver)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium with a fresh profile, closed (and its driver stopped) on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(browser_binary())
    with tempfile.TemporaryDirectory(prefix="orders-chromium-") as profile:
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        service = Service(executable_path=shutil.which("chromedriver"))
        driver = webdriver.Chrome(options=options, service=service)
        try:
            driver.set_page_load_timeout(30)
            yield driver
        finally:
            driver.quit()


def screenshot(driver: Any, name: str) -> Path:
    """Keep what the page looked like (a test artefact, git-ignored)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def poll_until(condition: Callable[[], Any], within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)  # polling an outside process's state, bounded by the deadline
    raise AssertionError(f"timed out waiting for {what}")


def start_console(stack: LocalStack, port: int) -> tuple[ManagedProcess, str]:
    """`orders serve --console` on the stack, reading its workers' journals."""
    api = stack.spawn(
        "http-api",
        ["-m", "orders", "serve", "--console", "--port", str(port)],
        env={
            **stack.environment(),
            "ORDERS_DECISIONS_DIR": str(stack.workdir),
            "ORDERS_DUPLICATE_WINDOW_SECONDS": str(stack.queue.duplicate_window_seconds),
        },
    )

    def ready() -> str | None:
        if not api.running:
            raise AssertionError(f"the console exited:\n{api.log()[-2000:]}")
        match = API_READY.search(api.log())
        return match.group(1) if match else None

    return api, str(poll_until(ready, 60.0, "the console to listen"))


@dataclass
class ConsoleStack:
    stack: LocalStack
    url: str

    def worker_decisions(self) -> list[dict[str, Any]]:
        return [entry for worker in self.stack.workers() for entry in worker.decisions()]

    def wait_for_decision(self, order_id: str, times: int = 1, **fields: str) -> None:
        def decided() -> bool:
            matching = [
                entry
                for entry in self.worker_decisions()
                if entry.get("order_id") == order_id
                and all(entry.get(key) == value for key, value in fields.items())
            ]
            return len(matching) >= times

        poll_until(decided, 60.0, f"a decision on {order_id} {fields}")

    def running_workers(self) -> list[ManagedProcess]:
        return [worker for worker in self.stack.workers() if worker.running]
