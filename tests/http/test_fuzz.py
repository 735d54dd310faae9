"""Schemathesis fuzzes the app's own OpenAPI document in process (ASGI): never a 5xx.

The app runs over fakes, so any 5xx is the API's fault, not a dependency's. Bounded by
`max_examples` so the run stays well under a minute.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fakes import (
    FakeIdempotencyStore,
    FakeOrderReader,
    FakeOrderStore,
    RecordingPublisher,
)
from http_support import FakeClock, runtime_over
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from orders.bootstrap import HttpRuntime
from orders.entrypoints.http_api import create_app


async def fake_runtime() -> HttpRuntime:
    orders = FakeOrderStore()
    return runtime_over(
        FakeIdempotencyStore(),
        RecordingPublisher(),
        FakeOrderReader(orders),
        FakeClock(),
        orders=orders,
    )


app = create_app(fake_runtime)
schema = schemathesis.openapi.from_asgi("/api/openapi.json", app)
# Invalid requests too (missing or malformed keys, bodies off the schema): all must be 4xx.
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
# A body over the route's byte limit is refused with 413 (documented), which the default
# list of rejections lacks: a schema cannot bound a body's bytes (a 200-character reason may
# take 2400 of them, escaped), so negative data may be refused for its size first.
rejections = schema.config.checks.negative_data_rejection
rejections.expected_statuses = [*rejections.expected_statuses, "413"]


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_answers_5xx_and_matches_its_description(case: schemathesis.Case[Any]) -> None:
    # Every default check but one: a schema-valid price such as 0.123456 is still refused
    # (at most 4 decimals), a limit JSON Schema cannot express for numbers.
    case.call_and_validate(excluded_checks=[positive_data_acceptance])
