"""End-to-end fixtures: the embedded local stack (both emulators as processes, real workers)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import FAST_QUEUE

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.entrypoints.localstack import LocalStack, local_stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    with local_stack(FAST_QUEUE, tmp_path) as running:
        asyncio.run(prepare_local_cosmos(running.settings()))
        yield running
    assert not [p.name for p in running.processes if p.running], "processes left running"
