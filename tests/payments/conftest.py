"""One stand-in process per module; tests use fresh order ids and keys, so they share it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from payment_service import StandinProcess, running_standin


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinProcess]:
    with running_standin() as running:
        yield running


@pytest.fixture(scope="module")
def module_client(standin: StandinProcess) -> Iterator[httpx.Client]:
    # The operator's and the app's client: it holds the fault token and the money token (a
    # web page's requests are in test_standin_fault_access.py and test_standin_money_access.py).
    with httpx.Client(base_url=standin.url, timeout=10, auth=standin.auth()) as http:
        yield http


@pytest.fixture
def client(module_client: httpx.Client) -> Iterator[httpx.Client]:
    yield module_client
    module_client.delete("/faults")  # a test's unused fault never leaks into the next one


@pytest.fixture
def order_id() -> str:
    return f"o-{uuid.uuid4().hex[:12]}"
