"""Cosmos side of the verifier: every document of one load run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from azure.cosmos.aio import ContainerProxy

# Documents per page of the audit's query. A run of 10,000 orders is some 50,000 documents:
# at the SDK's default page (100) that is 500 round trips, and a gateway that resumes a
# cross-partition query by re-reading what it already returned (our emulator does) makes the
# whole read quadratic (18,000 documents: 25 s at 100 a page, 0.7 s at 5,000). Cosmos DB ends
# a page at 4 MB whatever is asked, so asking for many costs nothing there.
AUDIT_PAGE = 5000


async def documents_of_run(
    container: ContainerProxy, run_id: str, on_read: Callable[[int], None] = lambda count: None
) -> list[dict[str, Any]]:
    """Every document of the run; `on_read` hears how many were read as each page arrives."""
    # Cross-partition on purpose: an audit reads every order of the run.
    pages = container.query_items(
        "SELECT * FROM c WHERE STARTSWITH(c.orderId, @prefix)",
        parameters=[{"name": "@prefix", "value": f"{run_id}-"}],
        max_item_count=AUDIT_PAGE,
    ).by_page()
    found: list[dict[str, Any]] = []
    async for page in pages:
        before = len(found)
        found += [item async for item in page]
        on_read(len(found) - before)
    return found
