"""Fixtures of the HTTP API tests (helpers live in tests/http_support.py: the API tests on real
servers in tests/integration and tests/e2e share them)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fakes import FakeIdempotencyStore
from http_support import Api, api_over


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for value in api_over(FakeIdempotencyStore()):
        yield value
