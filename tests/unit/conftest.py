"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes import LAYOUT, FakeOrderStore

from orders.entrypoints.functions import use_function_consumer
from orders.service.consumer import OrderConsumer


@pytest.fixture
def function_store() -> Iterator[FakeOrderStore]:
    """The store behind the consumer the Functions trigger uses (put in place, then removed)."""
    fake = FakeOrderStore()
    use_function_consumer(OrderConsumer(fake, LAYOUT))
    yield fake
    use_function_consumer(None)
