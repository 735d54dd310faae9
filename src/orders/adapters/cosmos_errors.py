"""Cosmos SDK failures as the store's own exceptions, in one place for every Cosmos adapter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from orders.exceptions import LeaseLostError, StoreError, TransientStoreError

# Throttling, timeouts, "retry with" and every server-side failure may succeed on redelivery.
TRANSIENT_STATUS_CODES = frozenset({408, 410, 429, 449})
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    ServiceRequestError,
    ServiceResponseError,
    cosmos_errors.CosmosClientTimeoutError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    ConnectionError,
)


def is_transient_status(status: int | None) -> bool:
    return status is not None and (status in TRANSIENT_STATUS_CODES or status >= 500)


def store_error_for(status: int | None, message: str) -> StoreError:
    if is_transient_status(status):
        return TransientStoreError(f"Cosmos DB answered {status}: {message}")
    return StoreError(f"Cosmos DB answered {status}: {message}")


@contextmanager
def store_errors() -> Iterator[None]:
    """Translate what the block's SDK calls raise; expected statuses are caught inside it."""
    try:
        yield
    except cosmos_errors.CosmosHttpResponseError as exc:
        raise store_error_for(exc.status_code, str(exc.message)) from exc
    except NETWORK_ERRORS as exc:
        raise TransientStoreError(f"Cosmos DB unreachable: {exc!r}") from exc


@contextmanager
def fenced_write(lost: str) -> Iterator[None]:
    """An If-Match write: a moved ETag (412) or a missing item (404) is `LeaseLostError(lost)`,
    anything else as `store_errors` says."""
    with store_errors():
        try:
            yield
        except (
            cosmos_errors.CosmosAccessConditionFailedError,
            cosmos_errors.CosmosResourceNotFoundError,
        ) as exc:
            raise LeaseLostError(lost) from exc


async def read_document(
    container: ContainerProxy, item_id: str, partition_key: str
) -> dict[str, Any] | None:
    """Point read (the cheapest Cosmos request); None when the item does not exist."""
    with store_errors():
        try:
            return await container.read_item(item=item_id, partition_key=partition_key)
        except cosmos_errors.CosmosResourceNotFoundError:
            return None
