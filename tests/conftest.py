"""Fixtures shared by every test area: local Cosmos wire servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from servers import (
    CosmosServer,
    skip_or_fail,
    vercel_cosmos_server,
    vercel_server_unavailable_reason,
)

from cosmos_emulator import WELL_KNOWN_KEY as WELL_KNOWN_COSMOS_KEY


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
        yield CosmosServer("python-emulator", emulator.url, emulator.key)
    finally:
        emulator.stop()
