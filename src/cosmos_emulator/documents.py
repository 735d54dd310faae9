"""Requests on a container's documents: point operations, batches, feeds, queries, ranges."""

from __future__ import annotations

import functools
import json
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from . import items
from .epk import effective_partition_key, in_range
from .errors import CosmosError, bad_request, item_not_found, unsupported
from .http11 import Request, Response
from .ids import MAX_ITEM_BYTES, RidAllocator, too_large
from .protocol import (
    DEFAULT_PAGE_SIZE,
    Resume,
    Span,
    cosmos_token_rid,
    fingerprint,
    is_query,
    is_true,
    json_body,
    json_response,
    page,
    page_window,
    query_text,
)
from .query import metrics
from .query.ast import Binary, Expr, Literal, Param, Query
from .query.computed import compile_definitions
from .query.evaluator import check_order_by_index, property_path, run, validate
from .query.parser import parse_query
from .query.planner import needs_plan, query_plan
from .query.values import UNDEFINED
from .ranges import COMPLETING_SPLIT_OR_MERGE, MAX_EPK, PARTITION_KEY_RANGE_GONE
from .store import Container, Item, Store, pk_key
from .untrusted_json import parse_json

CROSS_PARTITION = "x-ms-documentdb-query-enablecrosspartition"
RANGE_ID = "x-ms-documentdb-partitionkeyrangeid"
QUERY_PLAN_NEEDED = 1004  # substatus: the SDK then asks for a query plan
MAX_PK_COMPONENTS = 3  # hierarchical keys have at most three paths
MAX_PK_VALUE_BYTES = 2048  # Cosmos: "maximum length of partition key value"


def parse_partition_key_header(raw: str) -> list[Any]:
    """`x-ms-documentdb-partitionkey`: a JSON array of up to three key values.

    A value is a string, number, boolean or null, or `{}` (the SDK's spelling of "no value").
    """
    if len(raw) > MAX_PK_COMPONENTS * (MAX_PK_VALUE_BYTES + 8) + 2:
        raise bad_request("The partition key header is too long.")
    values = parse_json(raw, "The partition key header")
    if not isinstance(values, list) or len(values) > MAX_PK_COMPONENTS:
        raise bad_request(
            'The partition key header must be a JSON array of at most three values, like ["o1"].'
        )
    for value in values:
        if isinstance(value, dict | list) and value not in ({},):
            raise bad_request(
                "A partition key value must be a string, number, boolean, null or {} (undefined)."
            )
        if (
            isinstance(value, str)
            and len(value.encode("utf-8", "surrogatepass")) > MAX_PK_VALUE_BYTES
        ):
            raise bad_request(f"A partition key value is longer than {MAX_PK_VALUE_BYTES} bytes.")
    return values


class Documents:
    def __init__(self, store: Store) -> None:
        self.store = store

    # -- partition keys ------------------------------------------------------------------
    @staticmethod
    def _pk_values(request: Request, coll: Container, *, required: bool) -> list[Any] | None:
        raw = request.headers.get("x-ms-documentdb-partitionkey")
        if raw is None:
            if required:
                raise bad_request(
                    "PartitionKey value must be supplied for this operation "
                    "(header x-ms-documentdb-partitionkey)."
                )
            return None
        values = parse_partition_key_header(raw)
        if required and len(values) != len(coll.pk_paths):
            # Cosmos's words (the azure-cosmos SDK's own batch tests match them), then ours.
            raise bad_request(
                "Partition key provided either doesn't correspond to definition in the "
                "collection or doesn't match partition key field values specified in the "
                f"document. (It has {len(values)} components; the container's key has "
                f"{len(coll.pk_paths)}.)"
            )
        return values

    def _ctx(self, request: Request, coll: Container) -> items.ItemContext:
        values = self._pk_values(request, coll, required=True)
        assert values is not None
        directive = items.parse_indexing_directive(request.headers.get("x-ms-indexing-directive"))
        return items.ItemContext(self.store, coll, values, time.time(), directive)

    # -- writes and point reads ----------------------------------------------------------
    def post(self, request: Request, coll: Container) -> Response:
        h = request.headers
        if is_true(h, "x-ms-cosmos-is-batch-request"):
            operations = _sized_json_body(request)
            if h.get("x-ms-cosmos-batch-atomic", "").lower() == "false":
                return self._bulk(request, coll, operations)
            ctx = self._ctx(request, coll)
            status, results = items.run_batch(ctx, operations)
            if status == 200 and any(_is_write(op) for op in operations):
                # a transactional batch commits at one LSN, in its partition's one range
                self._advance(coll, coll.ranges.index_of_key(ctx.pk_values))
            return json_response(status, results)
        if is_query(request):
            return self.query(request, coll)
        ctx = self._ctx(request, coll)
        live = items.LivePartition(coll, ctx.key, ctx.now)
        body = _sized_json_body(request)
        if is_true(h, "x-ms-documentdb-is-upsert"):
            outcome = items.upsert(live, ctx, body, h.get("if-match"))
        else:
            outcome = items.create(live, ctx, body)
        self._advance(coll, coll.ranges.index_of_key(ctx.pk_values))
        return _item_response(request, outcome)

    def _advance(self, coll: Container, range_index: int, steps: int = 1) -> None:
        """Committed write requests on one of `coll`'s partition key ranges: its LSN moves on.

        The account's LSN (every item's `_lsn`) moves at least as far, so a range's LSN never
        passes it and a journal replay can restart every range from the account's."""
        lsns = coll.range_lsns
        lsns[range_index] += steps
        if lsns[range_index] > self.store.lsn:
            self.store.lsn = lsns[range_index]  # a delete stamps no item, yet it is a write

    def scope_headers(self, request: Request, coll: Container, db_name: str) -> dict[str, str]:
        """What Cosmos sends on every response about a container's documents.

        The session token is per partition key range (`<range id>:<version>#<LSN>`) and moves
        with each write; the SDK records it only from a response that names the container
        (`x-ms-alt-content-path`, `x-ms-content-path`) and then sends it back, for the range
        it routes the next request to. A request that spans every range (a cross-partition
        query the gateway answers whole) gets every range's token, comma-separated, as the
        SDK itself sends them for such a query; its range id header names the first range."""
        try:
            served = _served_range(request, coll)
        except CosmosError:  # a malformed header was refused: the answer spans no one range
            served = None
        lsns = coll.range_lsns
        ids = coll.ranges.ids()
        if served is None:
            lsn = max(lsns)
            token = ",".join(f"{i}:-1#{n}" for i, n in zip(ids, lsns, strict=True))
            served = 0
        else:
            lsn = lsns[served]
            token = f"{ids[served]}:-1#{lsn}"
        return {
            "lsn": str(lsn),
            "x-ms-session-token": token,
            "x-ms-alt-content-path": _header_safe(f"dbs/{db_name}/colls/{coll.props['id']}"),
            "x-ms-content-path": coll.rid,
            RANGE_ID: ids[served],
        }

    def _bulk(self, request: Request, coll: Container, operations: object) -> Response:
        """A non-atomic batch by partition key range, as the JavaScript SDK's bulk sends it."""
        h = request.headers
        named = _named_range(request, coll, follows_merges=True)
        status, results = items.run_bulk(
            self.store,
            coll,
            operations,
            time.time(),
            continue_on_error=h.get("x-ms-cosmos-batch-continue-on-error", "").lower() != "false",
        )
        assert isinstance(operations, list)  # run_bulk refused anything else
        for op, result in zip(operations, results, strict=False):
            if _is_write(op) and result["statusCode"] < 400:
                # an operation that succeeded had a well-formed key: its range advances
                values = items.parse_batch_partition_key(op["partitionKey"])
                self._advance(coll, coll.ranges.index_of_key(values) if named is None else named)
        return json_response(status, results)

    def item(self, request: Request, coll: Container, item_id: str, *, by_rid: bool) -> Response:
        ctx = self._ctx(request, coll)
        live = items.LivePartition(coll, ctx.key, ctx.now)
        if by_rid:  # a self link (`dbs/<rid>/colls/<rid>/docs/<rid>/`) names the item's _rid
            item_id = _id_of_rid(coll, ctx.key, item_id)
        h = request.headers
        method = request.method
        outcome: items.Outcome
        if method == "GET":
            outcome = items.read(live, item_id, h.get("if-none-match"))
        elif method == "PUT":
            body = _sized_json_body(request)
            outcome = items.replace(live, ctx, item_id, body, h.get("if-match"))
        elif method == "PATCH":
            body = _sized_json_body(request)
            outcome = items.patch(live, ctx, item_id, body, h.get("if-match"))
        elif method == "DELETE":
            outcome = items.delete(live, item_id, h.get("if-match"))
        else:
            raise CosmosError(405, "MethodNotAllowed", f"{method} is not allowed on an item.")
        if method != "GET":
            self._advance(coll, coll.ranges.index_of_key(ctx.pk_values))
        return _item_response(request, outcome)

    # -- feeds and queries ---------------------------------------------------------------
    def _candidates(
        self, request: Request, coll: Container, *, indexed_only: bool = False
    ) -> list[dict[str, Any]]:
        """The live items a request is scoped to; queries see only indexed ones (as in Cosmos,
        an item written with `x-ms-indexing-directive: exclude` is found by reads and feeds only).
        """
        h = request.headers
        now = time.time()
        if "x-ms-start-epk" in h or "x-ms-end-epk" in h:
            start, end = _epk_bounds(request, coll)
            return _epk_candidates(coll, start, end, now, indexed_only)
        values = self._pk_values(request, coll, required=False)
        if values is None:
            # what the SDK fans out per range is answered from that range only
            return coll.live_items(
                None, now, indexed_only=indexed_only, range_index=_named_range(request, coll)
            )
        if len(values) == len(coll.pk_paths):
            return coll.live_items(pk_key(values), now, indexed_only=indexed_only)
        # A prefix of a hierarchical key: every partition that starts with it.
        prefix_len = len(values)
        return [
            d
            for d in coll.live_items(None, now, indexed_only=indexed_only)
            if coll.pk_from_doc(d)[:prefix_len] == values
        ]

    def read_feed(self, request: Request, coll: Container) -> Response:
        a_im = request.headers.get("a-im")
        if a_im:
            if a_im.strip().lower() != "incremental feed":
                raise unsupported(f"the change feed mode A-IM: {a_im[:40]!r}")
            return self.change_feed(request, coll)
        docs = self._candidates(request, coll)
        scope = request.headers.get("x-ms-documentdb-partitionkey", "")
        chunk, headers = page(request, docs, fingerprint("readfeed", {}, scope))
        return json_response(
            200, {"_rid": coll.rid, "Documents": chunk, "_count": len(chunk)}, headers
        )

    def change_feed(self, request: Request, coll: Container) -> Response:
        """Latest-version change feed: each live item once, at its last write, in LSN order.

        The continuation is the response's ETag (the LSN of the last item listed, or the
        current LSN when nothing is new), sent back as `If-None-Match`; `*` means "from now".
        `If-Modified-Since` (start from a point in time) keeps items written at or after it.
        """
        h = request.headers
        # a range that does not exist (or no longer does) is refused before anything
        _named_range(request, coll, follows_merges=True)
        after = _change_feed_position(h.get("if-none-match"), self.store.lsn)
        since = _http_date(h.get("if-modified-since"))
        raw_size = h.get("x-ms-max-item-count", "")
        try:
            size = int(raw_size) if raw_size else -1
        except ValueError:
            raise bad_request("x-ms-max-item-count must be an integer.") from None
        if size <= 0:
            size = DEFAULT_PAGE_SIZE
        now = time.time()
        chunk: list[dict[str, Any]] = []
        for _, item in self._feed_after(request, coll, after):
            doc = item.doc
            if not coll.is_live(item, now) or (since is not None and doc["_ts"] < since):
                continue
            chunk.append(doc)
            if len(chunk) >= size:
                break
        if not chunk:
            # Nothing new: the continuation moves to now, so later polls skip what was seen.
            return Response(304, b"", {"etag": f'"{max(after, self.store.lsn)}"'})
        headers = {"etag": f'"{chunk[-1]["_lsn"]}"', "x-ms-item-count": str(len(chunk))}
        return json_response(
            200, {"_rid": coll.rid, "Documents": chunk, "_count": len(chunk)}, headers
        )

    def _feed_after(
        self, request: Request, coll: Container, after: int
    ) -> Iterator[tuple[int, Item]]:
        """The item versions in the request's scope with an LSN above `after`, in LSN order.

        Read from the LSN indexes, so a page costs O(page): the whole container, one
        partition key (the SDK sends its EPK point range) and a hierarchical prefix each have
        an index. Other EPK ranges and hierarchical prefixes in the partition key header
        walk the container's index and filter it (O(what precedes the page's last item)).
        """
        h = request.headers
        if "x-ms-start-epk" in h or "x-ms-end-epk" in h:
            start, end = _epk_bounds(request, coll)
            definition = coll.props["partitionKey"]
            if definition.get("version", 1) != 2:
                raise unsupported("effective-partition-key ranges on hash V1 containers")
            if start == "" and end in ("", "FF"):
                return coll.feed.after(after)
            scope = _indexed_scope(start, end, definition)
            if scope is not None:
                return coll.scope_feed_after(scope, after)
            kind = definition.get("kind", "Hash")
            return (
                (lsn, item)
                for lsn, item in coll.feed.after(after)
                if in_range(effective_partition_key(coll.pk_from_doc(item.doc), kind), start, end)
            )
        values = self._pk_values(request, coll, required=False)
        if values is None:
            named = _named_range(request, coll)
            if named is not None and coll.range_feeds:
                return coll.range_feeds[named].after(after)  # one range of several
            return coll.feed.after(after)
        if len(values) == len(coll.pk_paths):
            return coll.partition_feed_after(pk_key(values), after)
        prefix_len = len(values)
        return (
            (lsn, item)
            for lsn, item in coll.feed.after(after)
            if coll.pk_from_doc(item.doc)[:prefix_len] == values
        )

    def query(self, request: Request, coll: Container) -> Response:
        h = request.headers
        text, params = query_text(request)
        query = parse_query(text)
        validate(query)
        check_order_by_index(query, coll.props.get("indexingPolicy") or {})
        if is_true(h, "x-ms-cosmos-is-query-plan-request"):
            return json_response(200, query_plan(query, params))
        scoped = "x-ms-documentdb-partitionkey" in h
        per_range = "x-ms-documentdb-partitionkeyrangeid" in h or "x-ms-start-epk" in h
        if scoped and self._pk_values(request, coll, required=False) == []:
            raise bad_request(
                "The partition key supplied in x-ms-documentdb-partitionkey is an empty "
                "array: name a key value, a prefix of a hierarchical key, or none."
            )
        # A query whose WHERE pins the whole partition key is routed to that partition, as
        # Cosmos's gateway routes it: it needs neither a key header nor the cross-partition flag.
        pinned = None if scoped or per_range else pinned_partition_key(query, params, coll)
        if not scoped and not per_range and pinned is None and not is_true(h, CROSS_PARTITION):
            # Cosmos's words: the SDKs set the header themselves where they mean to fan out.
            raise bad_request(
                "Cross partition query is required but disabled. Please set "
                "x-ms-documentdb-query-enablecrosspartition to true, specify "
                "x-ms-documentdb-partitionkey, or revise your query to avoid this exception."
            )
        if not scoped and not per_range and pinned is None and needs_plan(query):
            # What a Cosmos gateway answers: the SDK fetches the plan and merges itself.
            raise CosmosError(
                400,
                "BadRequest",
                "Cross-partition query with ORDER BY, aggregates, TOP, OFFSET/LIMIT or DISTINCT "
                "needs a query plan.",
                substatus=QUERY_PLAN_NEEDED,
                extra={"additionalErrorInfo": json.dumps(query_plan(query, params))},
            )
        computed = compile_definitions(coll.props.get("computedProperties"))
        # A continuation belongs to the partition, range or EPK range it was served from. A
        # per-range one records its span, so that the children of a range that split since
        # resume it (the SDKs hand a parent's continuation to each child).
        span: Span | None = None
        resume: Resume | None = None
        if per_range and not scoped:
            named = _named_range(request, coll)
            low, high = _epk_bounds(request, coll)
            span = (coll.ranges.ids()[named] if named is not None else "", low, high)
            scope = "per-range"
            resume = functools.cache(
                functools.partial(_resume_in_child, coll, query, params, computed, span)
            )
        else:
            scope = "|".join(
                h.get(name, "")
                for name in (
                    "x-ms-documentdb-partitionkey",
                    RANGE_ID,
                    "x-ms-start-epk",
                    "x-ms-end-epk",
                )
            ).rstrip("|")
            if pinned is not None:
                scope += f"|pinned:{pk_key(pinned)}"
        bound_to = fingerprint(text, params, scope)
        start, size = page_window(request, bound_to, span, resume)
        # One past the page tells whether a continuation token is due; a Cosmos-format
        # token's position is known only once the results are (`page` finds it).
        needed = None if cosmos_token_rid(request) is not None else start + size + 1
        candidates = (
            self._candidates(request, coll, indexed_only=True)
            if pinned is None
            else coll.live_items(pk_key(pinned), time.time(), indexed_only=True)
        )
        began = time.perf_counter()
        results = run(query, candidates, params, needed=needed, computed=computed)
        chunk, headers = page(request, results, bound_to, span, resume)
        evaluated = time.perf_counter()
        response = json_response(
            200, {"_rid": coll.rid, "Documents": chunk, "_count": len(chunk)}, headers
        )
        if is_true(h, metrics.ASK_QUERY_METRICS):
            response.headers[metrics.HEADER_QUERY_METRICS] = metrics.query_metrics(
                retrieved=[] if metrics.answered_from_the_index(query) else candidates,
                output=chunk,
                elapsed_ms=(evaluated - began) * 1000,
                write_ms=(time.perf_counter() - evaluated) * 1000,
            )
        if is_true(h, metrics.ASK_INDEX_METRICS):
            response.headers[metrics.HEADER_INDEX_UTILIZATION] = metrics.index_utilization(
                query, coll.pk_paths if scoped else ()
            )
        return response

    def partition_key_ranges(self, request: Request, coll: Container) -> Response:
        """The container's ranges, read as the SDKs read them: a feed whose ETag is the range
        map's generation. Without `If-None-Match` (or with one this container never issued)
        every live range; with an earlier generation's ETag only the ranges made since (a
        split's children, a merge's range, each naming its ancestors in `parents`, which the
        SDKs' incremental routing-map refresh combines with what they had); with the current
        one 304, which ends the SDKs' drain."""
        ranges = coll.ranges
        etag = _ranges_etag(coll, ranges.generation)
        listed = ranges.live
        asked = request.headers.get("if-none-match")
        if asked is not None:
            if asked == etag:
                return Response(304, b"", {"etag": etag})
            since = next(
                (g for g in range(ranges.generation) if asked == _ranges_etag(coll, g)), None
            )
            if since is not None:
                listed = ranges.made_after(since)
        by_id = {r.id: i for i, r in enumerate(ranges.live)}
        payload = [
            {
                "_rid": range_rid(coll.rid, int(r.id)),
                "id": r.id,
                "_etag": f'"{coll.rid}-range-{r.id}"',
                "minInclusive": r.min,
                "maxExclusive": r.max,
                "ridPrefix": int(r.id),
                "_self": f"{coll.props['_self']}pkranges/{range_rid(coll.rid, int(r.id))}/",
                "throughputFraction": 1 / ranges.count,
                "status": "online",
                "parents": list(r.parents),
                "_ts": coll.props["_ts"],
                "lsn": coll.range_lsns[by_id[r.id]],
            }
            for r in listed
        ]
        return json_response(
            200,
            {"_rid": coll.rid, "PartitionKeyRanges": payload, "_count": len(payload)},
            {"etag": etag, "x-ms-item-count": str(len(payload))},
        )


def pinned_partition_key(query: Query, params: dict[str, Any], coll: Container) -> list[Any] | None:
    """The partition key values a query's WHERE pins with equalities ANDed at its top
    (`c.pk = 'a'`, `@t = c.tenant AND c.user = 'u' AND ...`), one per key path; None unless
    every path of the container's key is pinned to a value a key can have."""
    if query.where is None:
        return None
    pinned: dict[str, Any] = {}
    conjuncts: list[Expr] = [query.where]
    while conjuncts:
        node = conjuncts.pop()
        if isinstance(node, Binary) and node.op == "AND":
            conjuncts += [node.left, node.right]
            continue
        if not (isinstance(node, Binary) and node.op == "="):
            continue
        for side, other in ((node.left, node.right), (node.right, node.left)):
            path = property_path(side, query.alias)
            if isinstance(other, Literal):
                value = other.value
            elif isinstance(other, Param):
                value = params.get(other.name, UNDEFINED)
            else:
                continue
            if path is not None and _is_key_value(value):
                pinned.setdefault(path, value)
    values = [pinned.get(path, UNDEFINED) for path in coll.pk_paths]
    return None if any(v is UNDEFINED for v in values) else values


def _is_key_value(value: Any) -> bool:
    return value is None or isinstance(value, str | bool | int | float)


def _resume_in_child(
    coll: Container,
    query: Query,
    params: dict[str, Any],
    computed: Mapping[str, Expr],
    span: Span,
    issued: Span,
    offset: int,
) -> int | None:
    """Where a per-range query's continuation, issued `offset` results into `issued`,
    resumes in `span`: a child of the range that issued it (after a split) or a part of it.

    The child's results are the parent's that come from the child's items, in the same
    order, so the position is how many of the parent's first `offset` rows are the child's
    leading rows. None when `span` is not within `issued` (not a continuation for here)."""
    issued_id, issued_low, issued_high = issued
    range_id, low, high = span
    if not (issued_low <= low and high <= issued_high):
        return None
    if issued_id and issued_id != range_id:
        index = coll.ranges.index_of_id(range_id)
        if index is None or issued_id not in coll.ranges.live[index].parents:
            return None
    now = time.time()
    before = run(
        query, _epk_candidates(coll, issued_low, issued_high, now, True), params, computed=computed
    )[:offset]
    mine = run(query, _epk_candidates(coll, low, high, now, True), params, computed=computed)
    position = 0
    for row in before:
        if position < len(mine) and mine[position] == row:
            position += 1
    return position


def _ranges_etag(coll: Container, generation: int) -> str:
    # Generation 0 keeps the ETag the emulator gave before ranges could change.
    return f'"{coll.rid}-ranges-{generation + 1}"'


def range_rid(container_rid: str, index: int) -> str:
    """A range's resource id: its container's, one type byte and its number (a Cosmos
    partition key range rid is the container's 8 bytes and 4 more)."""
    return RidAllocator.child_with(container_rid, 0x02_000000 + index, 4)


def _named_range(request: Request, coll: Container, *, follows_merges: bool = False) -> int | None:
    """The range `x-ms-documentdb-partitionkeyrangeid` names, None without the header; 400
    for one the container never had, 410 Gone for one split or merged away.

    A split's parent answers substatus 1002 (PartitionKeyRangeGone) to every request. A
    merge's sources answer 1007 (CompletingSplit, "split or merge") to the requests whose SDK
    code handles it as a range change, the change feed and bulk (`follows_merges`), and 1002
    to the rest (queries), whose SDK code refreshes its routing map on 1002 alone."""
    range_id = request.headers.get(RANGE_ID)
    if range_id is None:
        return None
    range_id = range_id.strip()
    index = coll.ranges.index_of_id(range_id)
    if index is not None:
        return index
    gone = coll.ranges.gone_substatus(range_id)
    if gone is not None:
        merged = gone == COMPLETING_SPLIT_OR_MERGE
        raise CosmosError(
            410,
            "Gone",
            f"The partition key range {range_id[:40]!r} is gone: it was "
            f"{'merged' if merged else 'split'} (read /pkranges again for the ranges that "
            "replace it).",
            substatus=gone if follows_merges or not merged else PARTITION_KEY_RANGE_GONE,
        )
    ids = coll.ranges.ids()
    raise bad_request(
        f"Partition key range {range_id[:40]!r} does not exist: the container's ranges "
        f"are {', '.join(repr(i) for i in ids[:10])}{' ...' if len(ids) > 10 else ''}."
    )


def _epk_bounds(request: Request, coll: Container) -> tuple[str, str]:
    """The EPK range a request asks for, within the range it names (if it names one): the
    SDK sends a feed range narrower than a partition key range with both."""
    h = request.headers
    start, end = h.get("x-ms-start-epk", ""), h.get("x-ms-end-epk", "") or MAX_EPK
    named = _named_range(request, coll)
    if named is not None:
        start = max(start, coll.ranges.bounds[named])
        end = min(end, coll.ranges.bounds[named + 1])
    return start, end


def _served_range(request: Request, coll: Container) -> int | None:
    """The one range a request is answered from: named, or holding its full partition key;
    None when it spans several (a cross-partition query, a hierarchical prefix)."""
    named = _named_range(request, coll)
    if named is not None or coll.range_count == 1:
        return 0 if named is None else named
    raw = request.headers.get("x-ms-documentdb-partitionkey")
    if raw is None:
        start, end = request.headers.get("x-ms-start-epk"), request.headers.get("x-ms-end-epk")
        if start is None and end is None:
            return None
        overlapping = coll.ranges.overlapping(start or "", end or "FF")
        return overlapping[0] if len(overlapping) == 1 else None
    values = parse_partition_key_header(raw)
    return coll.ranges.index_of_key(values) if len(values) == len(coll.pk_paths) else None


def _is_write(op: object) -> bool:
    return not (isinstance(op, dict) and op.get("operationType") == "Read")


def _sized_json_body(request: Request) -> Any:
    """The JSON body of an item write or a batch, within Cosmos's 2 MiB request limit.

    Cosmos judges the limit on the request body as sent: the SDKs' default body escapes
    non-ASCII text (`\\uXXXX`, six bytes for a CJK character), so an item of CJK text over
    2 MiB escaped is refused (413) even though its UTF-8 is smaller, while the same item sent
    as compact UTF-8 (azure-cosmos's `enable_compact_utf8_item_writes`) is accepted, as the
    azure-cosmos SDK's own tests expect of Cosmos."""
    if len(request.body) > MAX_ITEM_BYTES:
        raise too_large(len(request.body))
    return json_body(request)


def _header_safe(text: str) -> str:
    """`text` as an HTTP header value: non-ASCII and control characters percent-encoded."""
    if text.isascii() and text.isprintable():
        return text
    return urllib.parse.quote(text, safe="/ !$&'()*+,;=:@")


def _id_of_rid(coll: Container, key: str, rid: str) -> str:
    """The id of the item whose `_rid` is `rid` in partition `key`; 404 when there is none."""
    for item_id, item in coll.partitions.get(key, {}).items():
        if item.doc.get("_rid") == rid:
            return item_id
    raise item_not_found(rid)


def _item_response(request: Request, outcome: items.Outcome) -> Response:
    headers: dict[str, str] = {}
    if outcome.doc is not None:
        headers["etag"] = outcome.doc["_etag"]
    minimal = (
        request.method != "GET" and request.headers.get("prefer", "").lower() == "return=minimal"
    )
    if outcome.doc is None or minimal:
        return Response(outcome.status, b"", headers)
    return json_response(outcome.status, outcome.doc, headers)


EPK_COMPONENT_HEX = 32  # one hashed key component: 128 bits in hex


def _indexed_scope(start: str, end: str, definition: dict[str, Any]) -> str | None:
    """The scoped index answering exactly [start, end), if there is one.

    The SDK asks for one partition key as [EPK, EPK + 1) and for a hierarchical prefix as
    [EPK, EPK + "FF"); every item EPK in such a range starts with `start`, which is what the
    scoped index of `start` (a whole key, or a prefix of whole components) holds.
    """
    if not start or len(start) % EPK_COMPONENT_HEX or start != start.upper():
        return None
    components = len(start) // EPK_COMPONENT_HEX
    paths = len(definition["paths"])
    if definition.get("kind") == "MultiHash":
        if components > paths:
            return None
    elif components != 1:
        return None
    try:
        successor = f"{int(start, 16) + 1:0{len(start)}X}"
    except ValueError:
        return None
    if end in (successor, start + "FF") and len(successor) == len(start):
        return start
    return None


def _change_feed_position(if_none_match: str | None, now_lsn: int) -> int:
    """The LSN after which changes are wanted: 0 from the beginning, now for `*`."""
    if if_none_match is None:
        return 0
    token = if_none_match.strip()
    if token == "*":
        return now_lsn
    token = token.removeprefix("W/").strip('"')
    if not token.isascii() or not token.isdigit() or len(token) > 19:
        raise bad_request("The change feed continuation (If-None-Match) is not a valid LSN.")
    return int(token)


def _http_date(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        raise bad_request("If-Modified-Since must be an HTTP date (RFC 1123).") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _epk_candidates(
    coll: Container, start: str, end: str, now: float, indexed_only: bool
) -> list[dict[str, Any]]:
    definition = coll.props["partitionKey"]
    if definition.get("version", 1) != 2:
        raise unsupported("effective-partition-key ranges on hash V1 containers")
    kind = definition.get("kind", "Hash")
    return [
        d
        for d in coll.live_items(None, now, indexed_only=indexed_only)
        if in_range(effective_partition_key(coll.pk_from_doc(d), kind), start, end)
    ]
