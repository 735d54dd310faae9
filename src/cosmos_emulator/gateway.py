"""The Cosmos DB gateway REST protocol: routing, authentication, faults and responses."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
import time
import traceback
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import items
from .auth import verify
from .epk import effective_partition_key, in_range
from .errors import CosmosError, bad_request, not_found, unsupported
from .faults import FaultInjector, FaultRule
from .http11 import Request, Response
from .ids import MAX_ITEM_BYTES, too_large
from .query.evaluator import bind_params, check_order_by_index, run, validate
from .query.parser import parse_query
from .query.planner import FULL_RANGE, needs_plan, query_plan
from .store import Container, Store, pk_key

ADMIN_PREFIX = "/_emulator/"
DEFAULT_PAGE_SIZE = 100
DEFAULT_THROUGHPUT = 400
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


def _true(headers: dict[str, str], name: str) -> bool:
    return headers.get(name, "").lower() == "true"


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    body = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
    out = {"Content-Type": "application/json"}
    out.update(headers or {})
    return Response(status, body, out)


def _error(err: CosmosError) -> Response:
    payload: dict[str, Any] = {"code": err.code, "message": err.message}
    payload.update(err.extra)
    headers = dict(err.headers)
    if err.substatus is not None:
        headers["x-ms-substatus"] = str(err.substatus)
    return _json(err.status, payload, headers)


class Gateway:
    def __init__(self, store: Store, key: str, faults: FaultInjector, scheme: str) -> None:
        self.store = store
        self.key = key
        self.faults = faults
        self.scheme = scheme
        self.fallback_host = "127.0.0.1"
        self.operation_counts: Counter[str] = Counter()
        self.log_requests = False

    # -- entry point -----------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        parsed = urllib.parse.urlsplit(request.target)
        path = parsed.path or "/"
        if path.startswith(ADMIN_PREFIX):
            return self._admin(request, path)
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
                response = self._route(request, segments)
        except CosmosError as err:
            response = _error(err)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            response = _error(bad_request(f"The request body is not valid JSON: {exc}"))
        except Exception as exc:  # an emulator bug: say so loudly rather than drop the socket
            traceback.print_exc(file=sys.stderr)
            response = _error(
                CosmosError(500, "InternalServerError", f"cosmos-emulator bug: {exc!r}")
            )
        headers = response.headers
        headers.setdefault("x-ms-activity-id", activity)
        headers.setdefault("x-ms-request-charge", "1")
        headers.setdefault("x-ms-session-token", f"0:-1#{self.store.lsn}")
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
            if _true(h, "x-ms-cosmos-is-batch-request"):
                return "Batch"
            if _true(h, "x-ms-cosmos-is-query-plan-request"):
                return "QueryPlan"
            if _true(h, "x-ms-documentdb-isquery") or "query" in h.get("content-type", ""):
                return "Query"
            return "Upsert" if _true(h, "x-ms-documentdb-is-upsert") else "Create"
        return {"GET": "Read", "PUT": "Replace", "PATCH": "Patch", "DELETE": "Delete"}.get(
            method, method
        )

    # -- admin -----------------------------------------------------------------------------
    def _admin(self, request: Request, path: str) -> Response:
        name = path[len(ADMIN_PREFIX) :].strip("/")
        try:
            if name == "health":
                return _json(200, {"status": "ok"})
            if name == "faults" and request.method == "POST":
                spec = json.loads(request.body or b"{}")
                rule = self.faults.add(fault_rule_from(spec))
                return _json(201, rule.describe())
            if name == "faults" and request.method == "DELETE":
                self.faults.clear()
                return _json(204, None)
            if name == "faults" and request.method == "GET":
                return _json(200, {"faults": self.faults.describe()})
        except (ValueError, TypeError) as exc:
            return _json(400, {"code": "BadRequest", "message": str(exc)})
        return _json(404, {"code": "NotFound", "message": f"no admin endpoint {path}"})

    # -- routing ---------------------------------------------------------------------------
    def _route(self, request: Request, seg: list[str]) -> Response:
        method = request.method
        n = len(seg)
        if n == 0:
            if method != "GET":
                raise bad_request("Only GET is supported on the account.")
            return _json(200, self._account(request))
        if seg[0] == "offers":
            return self._offers(request, seg)
        if seg[0] != "dbs":
            raise unsupported(f"the resource path /{'/'.join(seg)}")
        if n >= 3 and seg[2] != "colls":
            raise unsupported(_UNSUPPORTED_TYPES.get(seg[2], f"resource type '{seg[2]}'"))
        if n >= 5 and seg[4] not in ("docs", "pkranges"):
            raise unsupported(_UNSUPPORTED_TYPES.get(seg[4], f"resource type '{seg[4]}'"))
        if n > 6:
            raise unsupported(_UNSUPPORTED_TYPES.get(seg[6], f"resource type '{seg[6]}'"))
        store = self.store
        if n == 1:
            if method == "GET":
                dbs = [d.props for d in store.databases.values()]
                return self._feed(request, "Databases", "", dbs)
            if method == "POST" and self._is_query(request):
                dbs = [d.props for d in store.databases.values()]
                return self._query_resources(request, "Databases", "", dbs)
            if method == "POST":
                props = store.create_database(self._body(request))
                store.databases[props["id"]].throughput = _requested_throughput(request)
                return _json(201, props, {"etag": props["_etag"]})
        if n == 2:
            if method == "GET":
                props = store.find_database(seg[1]).props
                return _json(200, props, {"etag": props["_etag"]})
            if method == "DELETE":
                store.delete_database(seg[1])
                return _json(204, None)
        if n == 3:
            db = store.find_database(seg[1])
            colls = [c.props for c in db.containers.values()]
            if method == "GET":
                return self._feed(request, "DocumentCollections", db.props["_rid"], colls)
            if method == "POST" and self._is_query(request):
                return self._query_resources(
                    request, "DocumentCollections", db.props["_rid"], colls
                )
            if method == "POST":
                props = store.create_container(seg[1], self._body(request))
                throughput = _requested_throughput(request)
                if throughput is None and db.throughput is None:
                    throughput = DEFAULT_THROUGHPUT
                db.containers[props["id"]].throughput = throughput
                return _json(201, props, {"etag": props["_etag"]})
        if n == 4:
            if method == "GET":
                props = store.find_container(seg[1], seg[3]).props
                return _json(200, props, {"etag": props["_etag"]})
            if method == "PUT":
                coll = store.find_container(seg[1], seg[3])
                if_match = request.headers.get("if-match")
                if if_match not in (None, "*", coll.props["_etag"]):
                    raise CosmosError(412, "PreconditionFailed", "The container ETag differs.")
                props = store.replace_container(seg[1], seg[3], self._body(request))
                return _json(200, props, {"etag": props["_etag"]})
            if method == "DELETE":
                store.delete_container(seg[1], seg[3])
                return _json(204, None)
        if n == 5 and seg[4] == "pkranges":
            return self._pkranges(request, store.find_container(seg[1], seg[3]))
        if n == 5:
            coll = store.find_container(seg[1], seg[3])
            if method == "GET":
                return self._read_feed(request, coll)
            if method == "POST":
                return self._docs_post(request, coll)
        if n == 6 and seg[4] == "docs":
            coll = store.find_container(seg[1], seg[3])
            return self._item(request, coll, seg[5])
        raise CosmosError(405, "MethodNotAllowed", f"{method} is not allowed on this resource.")

    def _account(self, request: Request) -> dict[str, Any]:
        host = request.headers.get("host") or self.fallback_host
        url = f"{self.scheme}://{host}/"
        location = [{"name": "South Central US", "databaseAccountEndpoint": url}]
        return {
            "_self": "",
            "id": "localhost",
            "_rid": "localhost",
            "media": "//media/",
            "addresses": "//addresses/",
            "_dbs": "//dbs/",
            "writableLocations": location,
            "readableLocations": location,
            "enableMultipleWriteLocations": False,
            "userReplicationPolicy": {
                "asyncReplication": False,
                "minReplicaSetSize": 1,
                "maxReplicasetSize": 4,
            },
            "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
            "systemReplicationPolicy": {"minReplicaSetSize": 1, "maxReplicasetSize": 4},
            "readPolicy": {"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
            "queryEngineConfiguration": json.dumps(
                {
                    "maxSqlQueryInputLength": 262144,
                    "maxJoinsPerSqlQuery": 5,
                    "maxLogicalAndPerSqlQuery": 500,
                    "maxLogicalOrPerSqlQuery": 500,
                    "maxUdfRefPerSqlQuery": 10,
                    "maxInExpressionItemsCount": 16000,
                    "queryMaxInMemorySortDocumentCount": 500,
                    "maxQueryRequestTimeoutFraction": 0.9,
                    "sqlAllowNonFiniteNumbers": False,
                    "sqlAllowAggregateFunctions": True,
                    "sqlAllowSubQuery": False,
                    "sqlAllowScalarSubQuery": False,
                    "allowNewKeywords": True,
                    "sqlAllowLike": False,
                    "sqlAllowGroupByClause": False,
                    "maxSpatialQueryCells": 12,
                    "spatialMaxGeometryPointCount": 256,
                    "sqlDisableOptimizationFlags": 0,
                    "sqlAllowTop": True,
                    "enableSpatialIndexing": True,
                }
            ),
        }

    @staticmethod
    def _body(request: Request) -> Any:
        if not request.body:
            raise bad_request("The request body is empty.")
        return json.loads(request.body)

    @staticmethod
    def _is_query(request: Request) -> bool:
        h = request.headers
        return (
            _true(h, "x-ms-documentdb-isquery")
            or _true(h, "x-ms-cosmos-is-query-plan-request")
            or "query" in h.get("content-type", "")
        )

    # -- feeds and paging ------------------------------------------------------------------
    def _page(
        self, request: Request, results: list[Any], fingerprint: str
    ) -> tuple[list[Any], dict[str, str]]:
        raw_size = request.headers.get("x-ms-max-item-count", "")
        try:
            size = int(raw_size) if raw_size else -1
        except ValueError:
            raise bad_request("x-ms-max-item-count must be an integer.") from None
        if size <= 0:
            size = DEFAULT_PAGE_SIZE
        start = 0
        token = request.headers.get("x-ms-continuation")
        if token:
            try:
                state = json.loads(base64.urlsafe_b64decode(token.encode()))
                start = int(state["offset"])
                if state["fp"] != fingerprint:
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                raise bad_request("Invalid continuation token for this query.") from None
        page = results[start : start + size]
        headers = {"x-ms-item-count": str(len(page))}
        if start + size < len(results):
            state = {"offset": start + size, "fp": fingerprint}
            headers["x-ms-continuation"] = base64.urlsafe_b64encode(
                json.dumps(state).encode()
            ).decode()
        return page, headers

    def _feed(self, request: Request, kind: str, rid: str, resources: list[Any]) -> Response:
        page, headers = self._page(request, resources, kind)
        return _json(200, {"_rid": rid, kind: page, "_count": len(page)}, headers)

    def _query_text(self, request: Request) -> tuple[str, dict[str, Any]]:
        if "application/sql" in request.headers.get("content-type", ""):
            return request.body.decode(), {}
        body = self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            raise bad_request("A query body needs a 'query' string.")
        return body["query"], bind_params(body.get("parameters"))

    def _query_resources(
        self, request: Request, kind: str, rid: str, resources: list[Any]
    ) -> Response:
        text, params = self._query_text(request)
        query = parse_query(text)
        validate(query)
        results = run(query, resources, params)
        fingerprint = _fingerprint(text, params, kind)
        page, headers = self._page(request, results, fingerprint)
        return _json(200, {"_rid": rid, kind: page, "_count": len(page)}, headers)

    def _offer_list(self) -> list[dict[str, Any]]:
        offers = []
        for db in self.store.databases.values():
            owners: list[tuple[dict[str, Any], int | None]] = [(db.props, db.throughput)]
            owners += [(c.props, c.throughput) for c in db.containers.values()]
            for props, throughput in owners:
                if throughput is None:
                    continue
                rid = props["_rid"]
                offers.append(
                    {
                        "id": rid,
                        "_rid": rid,
                        "_self": f"offers/{rid}/",
                        "_etag": props["_etag"],
                        "_ts": props["_ts"],
                        "offerType": "Invalid",
                        "offerVersion": "V2",
                        "resource": props["_self"],
                        "offerResourceId": rid,
                        "content": {
                            "offerThroughput": throughput,
                            "offerIsRUPerMinuteThroughputEnabled": False,
                        },
                    }
                )
        return offers

    def _offers(self, request: Request, seg: list[str]) -> Response:
        offers = self._offer_list()
        if len(seg) == 1 and request.method == "GET":
            return self._feed(request, "Offers", "", offers)
        if len(seg) == 1 and request.method == "POST" and self._is_query(request):
            return self._query_resources(request, "Offers", "", offers)
        offer = next((o for o in offers if len(seg) == 2 and o["id"] == seg[1]), None)
        if offer is None:
            raise not_found("Offer not found.")
        if request.method == "GET":
            return _json(200, offer)
        if request.method == "PUT":
            body = self._body(request)
            throughput = (
                body.get("content", {}).get("offerThroughput") if isinstance(body, dict) else None
            )
            if not isinstance(throughput, int) or throughput < 400:
                raise bad_request("content.offerThroughput must be an integer >= 400.")
            for db in self.store.databases.values():
                if db.props["_rid"] == offer["id"]:
                    db.throughput = throughput
                for coll in db.containers.values():
                    if coll.rid == offer["id"]:
                        coll.throughput = throughput
            self.store.touch()
            return _json(
                200, {**offer, "content": {**offer["content"], "offerThroughput": throughput}}
            )
        raise CosmosError(405, "MethodNotAllowed", "Offers can only be read and replaced.")

    def _pkranges(self, request: Request, coll: Container) -> Response:
        etag = f'"{coll.rid}-ranges-1"'
        if request.headers.get("if-none-match") == etag:
            return Response(304, b"", {"etag": etag})
        ranges = [
            {
                "_rid": coll.rid + "AgAAAAAAAA==",
                "id": "0",
                "_etag": etag,
                "minInclusive": FULL_RANGE["min"],
                "maxExclusive": FULL_RANGE["max"],
                "ridPrefix": 0,
                "_self": f"{coll.props['_self']}pkranges/0/",
                "throughputFraction": 1,
                "status": "online",
                "parents": [],
                "_ts": coll.props["_ts"],
                "lsn": self.store.lsn,
            }
        ]
        return _json(
            200,
            {"_rid": coll.rid, "PartitionKeyRanges": ranges, "_count": 1},
            {"etag": etag, "x-ms-item-count": "1"},
        )

    # -- documents -------------------------------------------------------------------------
    def _pk_values(self, request: Request, coll: Container, *, required: bool) -> list[Any] | None:
        raw = request.headers.get("x-ms-documentdb-partitionkey")
        if raw is None:
            if required:
                raise bad_request(
                    "PartitionKey value must be supplied for this operation "
                    "(header x-ms-documentdb-partitionkey)."
                )
            return None
        try:
            values = json.loads(raw)
        except json.JSONDecodeError:
            raise bad_request(f"Invalid partition key header {raw!r}.") from None
        if not isinstance(values, list):
            raise bad_request("The partition key header must be a JSON array.")
        if required and len(values) != len(coll.pk_paths):
            raise bad_request(
                "The partition key supplied has a different number of components "
                "than the container's partition key definition."
            )
        return values

    def _ctx(self, request: Request, coll: Container) -> items.ItemContext:
        values = self._pk_values(request, coll, required=True)
        assert values is not None
        return items.ItemContext(self.store, coll, values, time.time())

    def _docs_post(self, request: Request, coll: Container) -> Response:
        h = request.headers
        if _true(h, "x-ms-cosmos-is-batch-request"):
            if len(request.body) > MAX_ITEM_BYTES:
                raise too_large(len(request.body))
            ctx = self._ctx(request, coll)
            status, results = items.run_batch(ctx, self._body(request))
            return _json(status, results)
        if self._is_query(request):
            return self._query_docs(request, coll)
        if len(request.body) > MAX_ITEM_BYTES:
            raise too_large(len(request.body))
        ctx = self._ctx(request, coll)
        live = items.LivePartition(coll, ctx.key, ctx.now)
        body = self._body(request)
        if _true(h, "x-ms-documentdb-is-upsert"):
            outcome = items.upsert(live, ctx, body, h.get("if-match"))
        else:
            outcome = items.create(live, ctx, body)
        return self._item_response(request, outcome)

    def _item(self, request: Request, coll: Container, item_id: str) -> Response:
        ctx = self._ctx(request, coll)
        live = items.LivePartition(coll, ctx.key, ctx.now)
        h = request.headers
        method = request.method
        if method in ("PUT", "PATCH") and len(request.body) > MAX_ITEM_BYTES:
            raise too_large(len(request.body))
        outcome: items.Outcome
        if method == "GET":
            outcome = items.read(live, item_id, h.get("if-none-match"))
        elif method == "PUT":
            outcome = items.replace(live, ctx, item_id, self._body(request), h.get("if-match"))
        elif method == "PATCH":
            outcome = items.patch(live, ctx, item_id, self._body(request), h.get("if-match"))
        elif method == "DELETE":
            outcome = items.delete(live, item_id, h.get("if-match"))
        else:
            raise CosmosError(405, "MethodNotAllowed", f"{method} is not allowed on an item.")
        return self._item_response(request, outcome)

    @staticmethod
    def _item_response(request: Request, outcome: items.Outcome) -> Response:
        headers: dict[str, str] = {}
        if outcome.doc is not None:
            headers["etag"] = outcome.doc["_etag"]
        minimal = (
            request.method != "GET"
            and request.headers.get("prefer", "").lower() == "return=minimal"
        )
        if outcome.doc is None or minimal:
            return Response(outcome.status, b"", headers)
        return _json(outcome.status, outcome.doc, headers)

    def _candidates(self, request: Request, coll: Container) -> list[dict[str, Any]]:
        h = request.headers
        now = time.time()
        if "x-ms-start-epk" in h or "x-ms-end-epk" in h:
            return self._epk_candidates(
                coll, h.get("x-ms-start-epk", ""), h.get("x-ms-end-epk", "FF"), now
            )
        values = self._pk_values(request, coll, required=False)
        if values is None:
            return coll.live_items(None, now)
        if len(values) == len(coll.pk_paths):
            return coll.live_items(pk_key(values), now)
        # A prefix of a hierarchical key: every partition that starts with it.
        prefix_len = len(values)
        return [d for d in coll.live_items(None, now) if coll.pk_from_doc(d)[:prefix_len] == values]

    @staticmethod
    def _epk_candidates(coll: Container, start: str, end: str, now: float) -> list[dict[str, Any]]:
        definition = coll.props["partitionKey"]
        if definition.get("version", 1) != 2:
            raise unsupported("effective-partition-key ranges on hash V1 containers")
        kind = definition.get("kind", "Hash")
        return [
            d
            for d in coll.live_items(None, now)
            if in_range(effective_partition_key(coll.pk_from_doc(d), kind), start, end)
        ]

    def _read_feed(self, request: Request, coll: Container) -> Response:
        if request.headers.get("a-im"):
            raise unsupported("the change feed")
        docs = self._candidates(request, coll)
        fingerprint = _fingerprint(
            "readfeed", {}, request.headers.get("x-ms-documentdb-partitionkey", "")
        )
        page, headers = self._page(request, docs, fingerprint)
        return _json(200, {"_rid": coll.rid, "Documents": page, "_count": len(page)}, headers)

    def _query_docs(self, request: Request, coll: Container) -> Response:
        h = request.headers
        text, params = self._query_text(request)
        query = parse_query(text)
        validate(query)
        check_order_by_index(query, coll.props.get("indexingPolicy") or {})
        if _true(h, "x-ms-cosmos-is-query-plan-request"):
            return _json(200, query_plan(query, params))
        scoped = "x-ms-documentdb-partitionkey" in h
        per_range = "x-ms-documentdb-partitionkeyrangeid" in h
        if not scoped and not per_range and needs_plan(query):
            plan = query_plan(query, params)
            raise CosmosError(
                400,
                "BadRequest",
                "Cross-partition query with ORDER BY, aggregates, TOP, OFFSET/LIMIT or DISTINCT "
                "needs a query plan.",
                substatus=1004,
                extra={"additionalErrorInfo": json.dumps(plan)},
            )
        results = run(query, self._candidates(request, coll), params)
        fingerprint = _fingerprint(text, params, h.get("x-ms-documentdb-partitionkey", ""))
        page, headers = self._page(request, results, fingerprint)
        return _json(200, {"_rid": coll.rid, "Documents": page, "_count": len(page)}, headers)


def _requested_throughput(request: Request) -> int | None:
    raw = request.headers.get("x-ms-offer-throughput")
    autoscale = request.headers.get("x-ms-cosmos-offer-autopilot-settings")
    try:
        if raw:
            return int(raw)
        if autoscale:
            return int(json.loads(autoscale)["maxThroughput"])
    except (ValueError, KeyError, TypeError):
        raise bad_request("Invalid throughput header.") from None
    return None


def _fingerprint(text: str, params: dict[str, Any], scope: str) -> str:
    raw = json.dumps([text, params, scope], sort_keys=True, default=repr)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


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
        410: "Gone",
    }
    status = int(rule.status or 503)
    return CosmosError(
        status, names.get(status, "Error"), f"Injected fault {status} (cosmos-emulator)."
    )


def fault_rule_from(spec: dict[str, Any]) -> FaultRule:
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
    return FaultRule(
        status=spec.get("status"),
        count=int(spec.get("count", 1)),
        delay_ms=int(spec.get("delay_ms", 0)),
        retry_after_ms=int(spec.get("retry_after_ms", 10)),
        method=spec.get("method"),
        path_contains=spec.get("path_contains"),
        operation=spec.get("operation"),
    )


NowFn = Callable[[], float]
