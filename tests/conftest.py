"""Fixtures shared by every test area: local Cosmos wire servers; the suite's wall time; the
Service Bus SDK's waits on open and close made short."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
import sdk_waits
from servers import (
    CosmosServer,
    reaped_processes,
    skip_or_fail,
    vercel_cosmos_server,
    vercel_server_unavailable_reason,
)

from cosmos_emulator import WELL_KNOWN_KEY as WELL_KNOWN_COSMOS_KEY

# Every Service Bus sender and receiver the tests open opens and closes at once rather than after
# the SDK's polls and its keep-alive's second (sdk_waits.py says why and how).
sdk_waits.install()


@pytest.fixture(scope="session")
def vercel_cosmos() -> Iterator[CosmosServer]:
    reason = vercel_server_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    with vercel_cosmos_server() as endpoint:
        yield CosmosServer("vercel", endpoint, WELL_KNOWN_COSMOS_KEY)


@pytest.fixture(scope="session")
def python_cosmos() -> Iterator[CosmosServer]:
    try:
        from cosmos_emulator import start_in_background
    except ImportError:
        skip_or_fail("cosmos_emulator is not available yet")
        raise
    emulator = start_in_background(host="127.0.0.1", port=0)
    try:
        yield CosmosServer("python-emulator", emulator.url, emulator.key, emulator.fault_token)
    finally:
        emulator.stop()


@pytest.fixture
def reaped_env() -> Iterator[dict[str, str]]:
    """The environment for the processes a test starts: on teardown, however the test ended,
    every process started under it (children and grandchildren) is killed (servers.py)."""
    with reaped_processes() as env:
        yield env


_SESSION_STARTED = time.monotonic()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The wall time of the whole run and the cores it had, last: the suite must stay under
    10 minutes on 2 cores (docs/development.md says what it took), and this is the number to
    watch (xdist workers print nothing)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    seconds = time.monotonic() - _SESSION_STARTED
    terminalreporter.write_sep(
        "=", f"suite wall time {seconds / 60:.1f} min ({seconds:.0f} s) on {os.cpu_count()} cores"
    )
