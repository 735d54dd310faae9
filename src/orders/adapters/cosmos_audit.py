"""Cosmos side of the verifier: every document of one load run."""

from __future__ import annotations

from typing import Any

from azure.cosmos.aio import ContainerProxy


async def documents_of_run(container: ContainerProxy, run_id: str) -> list[dict[str, Any]]:
    # Cross-partition on purpose: an audit reads every order of the run.
    items = container.query_items(
        "SELECT * FROM c WHERE STARTSWITH(c.orderId, @prefix)",
        parameters=[{"name": "@prefix", "value": f"{run_id}-"}],
    )
    return [item async for item in items]
