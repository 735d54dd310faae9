"""Browser fixtures: the local stack with `orders serve --console`, and headless Chromium."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import (
    CONSOLE_QUEUE,
    ConsoleStack,
    browser_unavailable_reason,
    chromium,
    screenshot,
    start_console,
)
from servers import free_port, skip_or_fail

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.entrypoints.localstack import local_stack


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = browser_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[ConsoleStack]:
    workdir: Path = tmp_path_factory.mktemp("console-stack")
    with local_stack(CONSOLE_QUEUE, workdir) as stack:
        asyncio.run(prepare_local_cosmos(stack.settings()))
        stack.start_worker(concurrency=2)
        _, url = start_console(stack, free_port())
        yield ConsoleStack(stack, url)
    assert not [p.name for p in stack.processes if p.running], "processes left running"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, keep what the browser showed (screenshot and HTML) beside the others."""
    report = yield
    driver = getattr(item, "funcargs", {}).get("browser")
    if report.when == "call" and report.failed and driver is not None:
        path = screenshot(driver, f"FAILED-{item.name}")
        path.with_suffix(".html").write_text(driver.page_source, encoding="utf-8")
    return report
