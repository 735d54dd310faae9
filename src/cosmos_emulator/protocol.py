"""Shared pieces of the REST protocol: JSON responses, errors, query bodies and paging."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from .errors import CosmosError, bad_request
from .http11 import Request, Response
from .ids import MAX_ITEM_BYTES, too_large
from .query.evaluator import bind_params, run, validate
from .query.parser import parse_query
from .untrusted_json import dump_json, parse_json

DEFAULT_PAGE_SIZE = 100


def is_true(headers: dict[str, str], name: str) -> bool:
    return headers.get(name, "").lower() == "true"


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    body = b"" if payload is None else dump_json(payload)
    out = {"Content-Type": "application/json"}
    out.update(headers or {})
    return Response(status, body, out)


def error_response(err: CosmosError) -> Response:
    payload: dict[str, Any] = {"code": err.code, "message": err.message}
    payload.update(err.extra)
    headers = dict(err.headers)
    if err.substatus is not None:
        headers["x-ms-substatus"] = str(err.substatus)
    return json_response(err.status, payload, headers)


def json_body(request: Request) -> Any:
    if not request.body:
        raise bad_request("The request body is empty.")
    body = request.body
    if len(body) > MAX_ITEM_BYTES and len(body) - 5 * body.count(b"\\u") > MAX_ITEM_BYTES:
        # Even with every `\uXXXX` shrunk to one byte this is over 2 MB of UTF-8: refused
        # before decoding, so only escaped text (cheap to decode) makes a body pass 2 MiB.
        raise too_large(len(body) - 5 * body.count(b"\\u"))
    return parse_json(body, "The request body")


def is_query(request: Request) -> bool:
    h = request.headers
    return (
        is_true(h, "x-ms-documentdb-isquery")
        or is_true(h, "x-ms-cosmos-is-query-plan-request")
        or "query" in h.get("content-type", "")
    )


def query_text(request: Request) -> tuple[str, dict[str, Any]]:
    if "application/sql" in request.headers.get("content-type", ""):
        try:
            return request.body.decode("utf-8"), {}
        except UnicodeDecodeError:
            raise bad_request("The query text is not UTF-8.") from None
    body = json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        raise bad_request("A query body needs a 'query' string.")
    return body["query"], bind_params(body.get("parameters"))


def fingerprint(text: str, params: dict[str, Any], scope: str) -> str:
    """Binds a continuation token to the query it came from."""
    raw = json.dumps([text, params, scope], sort_keys=True, default=repr)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


# A continuation token in Cosmos's own backend format, e.g.
# `-RID:~a0NPAOszCpOChB4AAAAAAA==#RT:1#TRC:2#ISV:2#IEO:65567#QCF:8`: the resource id of the
# document to resume at, then round trips, results so far and engine flags.
_COSMOS_TOKEN = re.compile(r"[+-]RID:~?(?P<rid>[A-Za-z0-9+/=-]{1,64})(?:#[A-Z]+:[^#]{0,64})*")


def cosmos_token_rid(request: Request) -> str | None:
    """The `_rid` a continuation token in Cosmos's own format resumes at, else None."""
    token = request.headers.get("x-ms-continuation")
    match = _COSMOS_TOKEN.fullmatch(token) if token else None
    return match["rid"] if match else None


# Where a page was served from: (range id or "", start EPK, end EPK) of a per-range query.
Span = tuple[str, str, str]
# Maps a token's offset from the span it was issued in to the span asked now (a split's child
# resuming its parent's token); None when the token cannot apply there.
Resume = Callable[[Span, int], int | None]


def page_window(
    request: Request, bound_to: str, span: Span | None = None, resume: Resume | None = None
) -> tuple[int, int]:
    """(first result index, page size) asked for by `x-ms-continuation` and max item count.

    A token in Cosmos's format starts at 0 here: `page` finds where it resumes. A token issued
    in another `span` than `span` (a range that has split since) is mapped by `resume`."""
    raw_size = request.headers.get("x-ms-max-item-count", "")
    try:
        size = int(raw_size) if raw_size else -1
    except ValueError:
        raise bad_request("x-ms-max-item-count must be an integer.") from None
    if size <= 0:
        size = DEFAULT_PAGE_SIZE
    start = 0
    token = request.headers.get("x-ms-continuation")
    if token and cosmos_token_rid(request) is None:
        try:
            state = parse_json(base64.urlsafe_b64decode(token.encode()), "token")
            start = state["offset"]
            if not isinstance(start, int) or start < 0 or state["fp"] != bound_to:
                raise ValueError
            issued = state.get("span")
            if issued is not None and (
                not isinstance(issued, list)
                or len(issued) != 3
                or not all(isinstance(part, str) for part in issued)
            ):
                raise ValueError
            if issued is not None and span is not None and tuple(issued) != span:
                moved = None if resume is None else resume((issued[0], issued[1], issued[2]), start)
                if moved is None:
                    raise ValueError
                start = moved
        except (CosmosError, ValueError, KeyError, TypeError):
            raise bad_request("Invalid continuation token for this query.") from None
    return start, size


def page(
    request: Request,
    results: list[Any],
    bound_to: str,
    span: Span | None = None,
    resume: Resume | None = None,
) -> tuple[list[Any], dict[str, str]]:
    """One page of `results`; `results` must hold at least one past the page when more exist.

    A Cosmos-format token resumes at the document with its `_rid`; a token naming none of
    the results (another container's, say) starts from the beginning, as Cosmos does."""
    start, size = page_window(request, bound_to, span, resume)
    resume_at = cosmos_token_rid(request)
    if resume_at is not None:
        start = next(
            (
                index
                for index, row in enumerate(results)
                if isinstance(row, dict) and row.get("_rid") == resume_at
            ),
            0,
        )
    chunk = results[start : start + size]
    headers = {"x-ms-item-count": str(len(chunk))}
    if start + size < len(results):
        state: dict[str, Any] = {"offset": start + size, "fp": bound_to}
        if span is not None:
            state["span"] = list(span)
        headers["x-ms-continuation"] = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
    return chunk, headers


def feed_response(request: Request, kind: str, rid: str, resources: list[Any]) -> Response:
    chunk, headers = page(request, resources, kind)
    return json_response(200, {"_rid": rid, kind: chunk, "_count": len(chunk)}, headers)


def query_response(request: Request, kind: str, rid: str, resources: list[Any]) -> Response:
    """A query over a list of resources (databases, containers, offers)."""
    text, params = query_text(request)
    query = parse_query(text)
    validate(query)
    results = run(query, resources, params)
    chunk, headers = page(request, results, fingerprint(text, params, kind))
    return json_response(200, {"_rid": rid, kind: chunk, "_count": len(chunk)}, headers)
