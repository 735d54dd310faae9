"""The JavaScript SDK's requests that the Python SDK cannot send itself, sent through the Python
SDK's own connection (its signing, headers and retries): a bulk (non-atomic) batch and a
bare-array patch body. Shared by the issue 26 tests and their persistence tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.cosmos import ContainerProxy
from azure.cosmos import _base as sdk_base


def send_bulk(
    container: ContainerProxy,
    operations: list[dict[str, Any]],
    *,
    range_id: str = "0",
    continue_on_error: bool = True,
) -> tuple[int, list[dict[str, Any]]]:
    """(HTTP status, per-operation results) of one bulk request.

    The headers replace the SDK's transactional ones (atomic, no continue-on-error), as the
    JavaScript SDK sends them; `continueOnError` defaults to true there.
    """
    headers = {
        "x-ms-cosmos-batch-atomic": "false",
        "x-ms-documentdb-partitionkeyrangeid": range_id,
        "x-ms-cosmos-batch-continue-on-error": str(continue_on_error).lower(),
    }
    statuses: list[int] = []

    def keep_status(response: PipelineResponse[Any, Any]) -> None:
        statuses.append(response.http_response.status_code)

    link = container.container_link
    results, _ = container.client_connection._Batch(
        operations,
        sdk_base.GetPathFromLink(link, "docs"),
        sdk_base.GetResourceIdOrFullNameFromLink(link),
        {},
        headers=headers,
        raw_response_hook=keep_status,
    )
    return statuses[-1], results


def bare_array_body(operations: list[dict[str, Any]]) -> Callable[[PipelineRequest[Any]], None]:
    """A request hook that sends the patch operations as the JavaScript SDK does: a bare array.

    The Python SDK always wraps them in `{"operations": [...]}`; the body is not signed, so
    rewriting it after the SDK built the request keeps its auth.
    """

    def rewrite(request: PipelineRequest[Any]) -> None:
        request.http_request.set_json_body(operations)

    return rewrite
