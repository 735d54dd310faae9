"""The Cosmos DB gateway REST protocol: routing, authentication and faults (whose switches
need the fault token and are closed to web pages: fault_access.py)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import traceback
import urllib.parse
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .account import account_metadata
from .auth import verify
from .documents import Documents
from .errors import CosmosError, bad_request, not_durable, unsupported
from .fault_access import fault_request_refusal
from .faults import FaultInjector, FaultRule
from .hosts import HostAllowList
from .http11 import Request, Response
from .journal import JournalError
from .offers import DEFAULT_THROUGHPUT, handle_offers, requested_throughput
from .protocol import (
    error_response,
    feed_response,
    is_query,
    is_true,
    json_body,
    json_response,
    query_response,
)
from .ranges import ranges_for_throughput
from .store import Container, Store, pk_key
from .untrusted_json import dump_json, parse_json

ADMIN_PREFIX = "/_emulator/"
_UNSUPPORTED_TYPES = {
    "sprocs": "stored procedures",
    "udfs": "user-defined functions",
    "triggers": "triggers",
    "users": "users and permissions",
    "permissions": "users and permissions",
    "conflicts": "the conflicts feed",
    "attachments": "attachments",
    "operations": "partition key delete",
    "clientencryptionkeys": "client encryption keys",
    "schemas": "schemas",
}


class Gateway:
    def __init__(
        self, store: Store, key: str, faults: FaultInjector, scheme: str, fault_token: str
    ) -> None:
        self.store = store
        self.key = key
        self.faults = faults
        self.fault_token = fault_token
        self.scheme = scheme
        self.fallback_host = "127.0.0.1"
        self.hosts: HostAllowList | None = None  # set once the port is known
        self.operation_counts: Counter[str] = Counter()
        self.log_requests = False
        self.documents = Documents(store)

    # -- entry point -----------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        if self.hosts is not None and not (
            self.hosts.allows(request.headers.get("host"))
            and self.hosts.allows_target(request.target)
        ):
            return error_response(
                CosmosError(
                    421,
                    "MisdirectedRequest",
                    "This emulator does not serve the host "
                    f"{request.headers.get('host', '')[:100]!r}; it serves "
                    f"{', '.join(self.hosts.describe())} (add one with --allowed-host).",
                )
            )
        try:
            path = urllib.parse.urlsplit(request.target).path or "/"
        except ValueError as exc:  # e.g. an absolute-form target with a broken IPv6 host
            return error_response(bad_request(f"Malformed request target: {exc}."))
        if path.startswith(ADMIN_PREFIX):
            return self._admin(request, path)
        journal = self.store.journal
        if journal is not None and journal.out_of_sync is not None:
            return error_response(not_durable(journal.out_of_sync))
        segments = [urllib.parse.unquote(s) for s in path.split("/") if s]
        activity = request.headers.get("x-ms-activity-id") or str(uuid.uuid4())
        try:
            verify(self.key, request.method, segments, request.headers)
            if segments:
                operation = self._operation(request, segments)
                self.operation_counts[operation] += 1
                rule = self.faults.take(request.method, path, operation)
                if rule is not None:
                    if rule.delay_ms:
                        await asyncio.sleep(rule.delay_ms / 1000)
                    if rule.status is not None:
                        raise _fault_error(rule)
            with self.store.lock:
                try:
                    response = self._route(request, segments)
                finally:  # whatever changed (even before an error) is durable before answering
                    self.store.commit()
        except JournalError as exc:  # the write was undone: refused, never acknowledged
            response = error_response(not_durable(str(exc)))
        except CosmosError as err:
            response = error_response(err)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            response = error_response(bad_request(f"The request body is not valid JSON: {exc}"))
        except Exception as exc:  # an emulator bug: say so loudly rather than drop the socket
            traceback.print_exc(file=sys.stderr)
            response = error_response(
                CosmosError(500, "InternalServerError", f"cosmos-emulator bug: {exc!r}")
            )
        headers = response.headers
        headers.setdefault("x-ms-activity-id", activity)
        headers.setdefault("x-ms-request-charge", "1")
        headers.setdefault("x-ms-schemaversion", "1.19")
        headers.setdefault("x-ms-gatewayversion", "cosmos-emulator")
        if self.log_requests:
            print(
                f"cosmos-emulator: {request.method} {path} -> {response.status}",
                file=sys.stderr,
                flush=True,
            )
        return response

    @staticmethod
    def _operation(request: Request, segments: list[str]) -> str:
        h = request.headers
        method = request.method
        if len(segments) % 2 == 1:  # a feed
            if method == "GET":
                return "ReadFeed"
            if is_true(h, "x-ms-cosmos-is-batch-request"):
                return "Batch"
            if is_true(h, "x-ms-cosmos-is-query-plan-request"):
                return "QueryPlan"
            if is_true(h, "x-ms-documentdb-isquery") or "query" in h.get("content-type", ""):
                return "Query"
            return "Upsert" if is_true(h, "x-ms-documentdb-is-upsert") else "Create"
        return {"GET": "Read", "PUT": "Replace", "PATCH": "Patch", "DELETE": "Delete"}.get(
            method, method
        )

    # -- admin -----------------------------------------------------------------------------
    def _admin(self, request: Request, path: str) -> Response:
        name = path[len(ADMIN_PREFIX) :].strip("/")
        try:
            if name == "health":
                return json_response(200, {"status": "ok"})
            if name in ("faults", "ranges"):
                refusal = fault_request_refusal(
                    self.fault_token,
                    self.hosts,
                    self.scheme,
                    request.headers,
                    has_body=request.method == "POST",
                )
                if refusal is not None:
                    return error_response(refusal)
            if name == "faults" and request.method == "POST":
                spec = parse_json(request.body or b"{}", "The fault rule")
                rule = self.faults.add(fault_rule_from(spec))
                return json_response(201, rule.describe())
            if name == "faults" and request.method == "DELETE":
                self.faults.clear()
                return json_response(204, None)
            if name == "faults" and request.method == "GET":
                return json_response(200, {"faults": self.faults.describe()})
            if name == "ranges" and request.method == "POST":
                change = parse_json(request.body or b"{}", "The range change")
                return json_response(200, self.change_ranges(change))
        except CosmosError as err:
            return error_response(err)
        except ValueError as exc:
            return error_response(bad_request(str(exc)))
        return json_response(404, {"code": "NotFound", "message": f"no admin endpoint {path}"})

    def change_ranges(self, change: object) -> dict[str, Any]:
        """Split or merge partition key ranges of a container, as Cosmos does them live:
        `{"database", "container", "split": "<range id>"}` or `..., "merge": ["<id>", "<id>"]`
        (two adjacent ranges). Made durable before it is answered; answers the container's
        live range ids and the ids made. ValueError (a 400) for a change that cannot be made."""
        spec = range_change_from(change)
        with self.store.lock:
            try:
                try:
                    if spec.split is not None:
                        made = list(
                            self.store.split_range(spec.database, spec.container, spec.split)
                        )
                    else:
                        assert spec.merge is not None
                        made = [self.store.merge_ranges(spec.database, spec.container, *spec.merge)]
                finally:
                    self.store.commit()
            except JournalError as exc:  # undone: the ranges are as they were
                raise not_durable(str(exc)) from exc
            coll = self.store.find_container(spec.database, spec.container)
            return {"ranges": coll.ranges.ids(), "made": made}

    # -- routing ---------------------------------------------------------------------------
    def _route(self, request: Request, seg: list[str]) -> Response:
        method = request.method
        n = len(seg)
        if n == 0:
            if method != "GET":
                raise bad_request("Only GET is supported on the account.")
            return json_response(200, self._account(request))
        store = self.store
        if seg[0] == "offers":
            return handle_offers(request, seg, store)
        if seg[0] != "dbs":
            raise unsupported(f"the resource path /{'/'.join(seg)}")
        if n >= 3 and seg[2] != "colls":
            raise unsupported(_UNSUPPORTED_TYPES.get(seg[2], f"resource type '{seg[2]}'"))
        if n >= 5 and seg[4] not in ("docs", "pkranges"):
            raise unsupported(_UNSUPPORTED_TYPES.get(seg[4], f"resource type '{seg[4]}'"))
        if n > 6:
            raise unsupported(_UNSUPPORTED_TYPES.get(seg[6], f"resource type '{seg[6]}'"))
        if n == 1:
            if method == "GET":
                dbs = [d.props for d in store.databases.values()]
                return feed_response(request, "Databases", "", dbs)
            if method == "POST" and is_query(request):
                dbs = [d.props for d in store.databases.values()]
                return query_response(request, "Databases", "", dbs)
            if method == "POST":
                props = store.create_database(json_body(request), requested_throughput(request))
                return json_response(201, props, {"etag": props["_etag"]})
        if n == 2:
            if method == "GET":
                props = store.find_database(seg[1]).props
                return json_response(200, props, {"etag": props["_etag"]})
            if method == "DELETE":
                store.delete_database(seg[1])
                return json_response(204, None)
        if n == 3:
            db = store.find_database(seg[1])
            colls = [c.props for c in db.containers.values()]
            if method == "GET":
                return feed_response(request, "DocumentCollections", db.props["_rid"], colls)
            if method == "POST" and is_query(request):
                return query_response(request, "DocumentCollections", db.props["_rid"], colls)
            if method == "POST":
                throughput = requested_throughput(request)
                if throughput is None and db.throughput is None:
                    throughput = DEFAULT_THROUGHPUT
                # As many ranges as asked for at start, or as its own throughput needs.
                ranges = max(store.partition_ranges, ranges_for_throughput(throughput))
                props = store.create_container(seg[1], json_body(request), throughput, ranges)
                return json_response(201, props, {"etag": props["_etag"]})
        if n == 4:
            if method == "GET":
                return container_read(request, store.find_container(seg[1], seg[3]))
            if method == "PUT":
                coll = store.find_container(seg[1], seg[3])
                if_match = request.headers.get("if-match")
                if if_match not in (None, "*", coll.props["_etag"]):
                    raise CosmosError(412, "PreconditionFailed", "The container ETag differs.")
                props = store.replace_container(seg[1], seg[3], json_body(request))
                return json_response(200, props, {"etag": props["_etag"]})
            if method == "DELETE":
                store.delete_container(seg[1], seg[3])
                return json_response(204, None)
        if n == 5 and seg[4] == "pkranges":
            return self.documents.partition_key_ranges(
                request, store.find_container(seg[1], seg[3])
            )
        if n >= 5 and seg[4] == "docs":  # n is 5 or 6: longer paths were refused above
            coll = store.find_container(seg[1], seg[3])
            try:
                check_session_token(request.headers.get("x-ms-session-token"))
                response = self._documents(request, seg, coll)
            except CosmosError as err:
                err.headers.update(
                    self.documents.scope_headers(request, coll, _db_name(store, seg[1]))
                )
                raise
            response.headers.update(
                self.documents.scope_headers(request, coll, _db_name(store, seg[1]))
            )
            return response
        raise CosmosError(405, "MethodNotAllowed", f"{method} is not allowed on this resource.")

    def _documents(self, request: Request, seg: list[str], coll: Container) -> Response:
        if len(seg) == 5 and request.method == "GET":
            return self.documents.read_feed(request, coll)
        if len(seg) == 5 and request.method == "POST":
            return self.documents.post(request, coll)
        if len(seg) == 6:
            # A link of resource ids (an item's `_self`) names the item by its `_rid` too.
            by_rid = seg[1] not in self.store.databases
            return self.documents.item(request, coll, seg[5], by_rid=by_rid)
        raise CosmosError(
            405, "MethodNotAllowed", f"{request.method} is not allowed on this resource."
        )

    def _account(self, request: Request) -> dict[str, Any]:
        host = request.headers.get("host") or self.fallback_host
        return account_metadata(f"{self.scheme}://{host}/")


def _db_name(store: Store, name_or_rid: str) -> str:
    return str(store.find_database(name_or_rid).props["id"])


# A session token as the SDKs send it back: `<range id>:<token>` pairs joined by commas, a
# token being `<version>#<global LSN>` plus `#<region>=<LSN>` entries, or a bare LSN (v1).
_SESSION_TOKEN = re.compile(r"\d+:(?:-?\d+#\d+(?:#\d+=-?\d+)*|\d+)")


def check_session_token(raw: str | None) -> None:
    """400 for a session token Cosmos could not have issued; any well-formed one is served.

    One replica holds every write at once, so every token is already satisfied: none has to
    wait or be refused as "read session not available" (404/1002)."""
    if raw is None:
        return
    if len(raw) > 4096 or not all(_SESSION_TOKEN.fullmatch(p) for p in raw.split(",")):
        raise bad_request(f"The session token provided '{raw[:100]}' is invalid.")


def container_read(request: Request, coll: Container) -> Response:
    """A container's properties and the headers Cosmos adds on a read.

    Indexing is synchronous here, so a policy change is complete at once: transformation
    progress 100. Quota usage (`x-ms-documentdb-populatequotainfo`) and per-range statistics
    (`x-ms-documentdb-populatepartitionstatistics`) cost a walk over the items, so only when
    asked, as in Cosmos."""
    props = coll.props
    headers = {
        "etag": props["_etag"],
        "x-ms-documentdb-collection-index-transformation-progress": "100",
    }
    h = request.headers
    want_quota = is_true(h, "x-ms-documentdb-populatequotainfo")
    want_statistics = is_true(h, "x-ms-documentdb-populatepartitionstatistics")
    if not (want_quota or want_statistics):
        return json_response(200, props, headers)
    docs = coll.live_items(None, time.time())
    size_kb = sum(len(dump_json(d)) for d in docs) // 1024
    if want_quota:
        # The fields and quota values of a Cosmos response the SDK's own tests replay.
        headers["x-ms-resource-quota"] = (
            f"documentSize=51200;documentsSize={QUOTA_KB};documentsCount=-1;"
            f"collectionSize={QUOTA_KB};"
        )
        headers["x-ms-resource-usage"] = (
            f"documentSize=0;documentsSize={size_kb};documentsCount={len(docs)};"
            f"collectionSize={size_kb};"
        )
    if want_statistics:
        props = dict(props)
        props["statistics"] = [
            {
                "id": range_id,
                "sizeInKB": sum(len(dump_json(d)) for d in in_range) // 1024,
                "documentCount": len(in_range),
                "partitionKeys": [],
            }
            for range_id, in_range in zip(
                coll.ranges.ids(), _docs_by_range(coll, docs), strict=True
            )
        ]
    return json_response(200, props, headers)


def _docs_by_range(coll: Container, docs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    by_range: list[list[dict[str, Any]]] = [[] for _ in range(coll.range_count)]
    for doc in docs:
        by_range[coll.range_of_partition(pk_key(coll.pk_from_doc(doc)))].append(doc)
    return by_range


QUOTA_KB = 50 * 1024 * 1024  # what Cosmos reports for a container's storage: 50 GB, in KB


def _fault_error(rule: FaultRule) -> CosmosError:
    if rule.status == 429:
        return CosmosError(
            429,
            "TooManyRequests",
            "Request rate is large (injected by cosmos-emulator).",
            substatus=3200,
            headers={"x-ms-retry-after-ms": str(rule.retry_after_ms)},
        )
    names: dict[int, str] = {
        503: "ServiceUnavailable",
        500: "InternalServerError",
        408: "RequestTimeout",
        404: "NotFound",
    }
    status = int(rule.status or 503)
    return CosmosError(
        status, names.get(status, "Error"), f"Injected fault {status} (cosmos-emulator)."
    )


@dataclass(frozen=True)
class RangeChange:
    database: str
    container: str
    split: str | None = None
    merge: tuple[str, str] | None = None


def range_change_from(spec: object) -> RangeChange:
    """A split or merge from the admin endpoint's JSON; a wrong field is a ValueError."""
    if not isinstance(spec, dict):
        raise ValueError("A range change must be a JSON object.")
    unknown = set(spec) - {"database", "container", "split", "merge"}
    if unknown:
        raise ValueError(f"unknown range change fields: {sorted(unknown)}")
    database, container = _text_field(spec, "database"), _text_field(spec, "container")
    if database is None or container is None:
        raise ValueError("a range change names its 'database' and 'container'")
    split, merge = spec.get("split"), spec.get("merge")
    if (split is None) == (merge is None):
        raise ValueError("a range change has either 'split' (a range id) or 'merge' (two ids)")
    if split is not None:
        if not isinstance(split, str) or len(split) > 40:
            raise ValueError("'split' is the id of the range to split, a string")
        return RangeChange(database, container, split=split)
    if (
        not isinstance(merge, list)
        or len(merge) != 2
        or not all(isinstance(i, str) and len(i) <= 40 for i in merge)
    ):
        raise ValueError("'merge' is a list of the ids of two adjacent ranges")
    return RangeChange(database, container, merge=(merge[0], merge[1]))


def fault_rule_from(spec: object) -> FaultRule:
    """A rule from the admin endpoint's JSON; a wrong field is a ValueError naming it."""
    if not isinstance(spec, dict):
        raise ValueError("A fault rule must be a JSON object.")
    allowed = {
        "status",
        "count",
        "delay_ms",
        "retry_after_ms",
        "method",
        "path_contains",
        "operation",
    }
    unknown = set(spec) - allowed
    if unknown:
        raise ValueError(f"unknown fault fields: {sorted(unknown)}")
    status = spec.get("status")
    if status is not None:
        status = _int_field(spec, "status", 100, 599)
    return FaultRule(
        status=status,
        count=_int_field(spec, "count", 1, 1_000_000, default=1),
        delay_ms=_int_field(spec, "delay_ms", 0, MAX_FAULT_DELAY_MS, default=0),
        retry_after_ms=_int_field(spec, "retry_after_ms", 0, MAX_FAULT_DELAY_MS, default=10),
        method=_text_field(spec, "method"),
        path_contains=_text_field(spec, "path_contains"),
        operation=_text_field(spec, "operation"),
    )


MAX_FAULT_DELAY_MS = 60_000  # a longer delay would look like a hung emulator


def _int_field(spec: dict[str, Any], name: str, low: int, high: int, default: int = 0) -> int:
    value = spec.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"fault field {name!r} must be an integer from {low} to {high}")
    return value


def _text_field(spec: dict[str, Any], name: str) -> str | None:
    value = spec.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > 1024):
        raise ValueError(f"fault field {name!r} must be a string of at most 1024 characters")
    return value
