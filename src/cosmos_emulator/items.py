"""Item operations over a partition view, shared by single requests and batches.

A view is either the live partition or a batch's staging overlay, so a batch runs exactly
the code a single request runs and commits only when every operation succeeded.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import CosmosError, bad_request, item_conflict, item_not_found, precondition_failed
from .ids import MAX_ITEM_BYTES, new_etag, too_large, validate_id
from .patch import apply_patch
from .query.computed import compile_definitions
from .query.evaluator import Evaluator, validate
from .query.parser import parse_query
from .store import Container, Item, Store, pk_key
from .untrusted_json import check_document, parse_json

_SYSTEM_PROPS = ("_rid", "_self", "_etag", "_ts", "_attachments", "_lsn")


class PartitionView(Protocol):
    def get(self, item_id: str) -> Item | None: ...

    def put(self, item_id: str, item: Item) -> None: ...

    def remove(self, item_id: str) -> None: ...


class LivePartition:
    def __init__(self, container: Container, key: str, now: float) -> None:
        self.container = container
        self.key = key
        self.now = now

    def get(self, item_id: str) -> Item | None:
        part = self.container.partitions.get(self.key)
        item = part.get(item_id) if part else None
        if item is None or not self.container.is_live(item, self.now):
            return None
        return item

    def put(self, item_id: str, item: Item) -> None:
        assert item.id == item_id
        self.container.put_item(self.key, item, self.now)

    def remove(self, item_id: str) -> None:
        self.container.remove_item(self.key, item_id)


class StagedPartition:
    """Writes land in an overlay; `commit` applies them to the live partition at once."""

    def __init__(self, live: LivePartition) -> None:
        self.live = live
        self.staged: dict[str, Item | None] = {}

    def get(self, item_id: str) -> Item | None:
        if item_id in self.staged:
            return self.staged[item_id]
        return self.live.get(item_id)

    def put(self, item_id: str, item: Item) -> None:
        self.staged[item_id] = item

    def remove(self, item_id: str) -> None:
        self.staged[item_id] = None

    def commit(self) -> None:
        for item_id, item in self.staged.items():
            if item is None:
                self.live.remove(item_id)
            else:
                self.live.put(item_id, item)


@dataclass
class ItemContext:
    store: Store
    container: Container
    pk_values: list[Any]
    now: float
    # From `x-ms-indexing-directive`: True include, False exclude, None the policy's default.
    index_directive: bool | None = None

    @property
    def key(self) -> str:
        return pk_key(self.pk_values)

    @property
    def indexed(self) -> bool:
        """Whether a write now lands in the index, so that queries find it."""
        if self.index_directive is not None:
            return self.index_directive
        policy = self.container.props.get("indexingPolicy") or {}
        return policy.get("automatic", True) is not False


_INDEXING_DIRECTIVES = {
    "default": None,
    "include": True,
    "exclude": False,
    # The Python SDK sends its IndexingDirective enum's numbers: 0 default, 1 exclude, 2 include.
    "0": None,
    "1": False,
    "2": True,
}


def parse_indexing_directive(raw: str | None) -> bool | None:
    """`x-ms-indexing-directive`: Include / Exclude / Default, any case, or the Python numbers."""
    if raw is None:
        return None
    try:
        return _INDEXING_DIRECTIVES[raw.strip().lower()]
    except KeyError:
        raise bad_request(
            f"x-ms-indexing-directive must be Include, Exclude or Default (got {raw[:40]!r})."
        ) from None


@dataclass
class Outcome:
    status: int
    doc: dict[str, Any] | None


def _check_body(ctx: ItemContext, body: object, expected_id: str | None = None) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("The item must be a JSON object.")
    item_id = validate_id(body.get("id"), item=True)
    if expected_id is not None and item_id != expected_id:
        raise bad_request(
            f"The id '{item_id}' in the body does not match the id '{expected_id}' in the request."
        )
    if ctx.container.pk_from_doc(body) != ctx.pk_values:
        raise CosmosError(
            400,
            "BadRequest",
            "PartitionKey extracted from document doesn't match the one specified in the header. "
            "Learn more: https://aka.ms/CosmosDB/sql/errors/wrong-pk-value",
            substatus=PARTITION_KEY_MISMATCH,
        )
    if "ttl" in body:
        _check_ttl(body["ttl"])
    # The request body was judged as sent (documents.py); a stored item is measured in UTF-8
    # too, which catches an item a patch or a batch's operations grew past the limit.
    size = len(check_document(body, "The item").encode("utf-8", "surrogatepass"))
    if size > MAX_ITEM_BYTES:
        raise too_large(size)
    return body


PARTITION_KEY_MISMATCH = 1001  # Cosmos's substatus for a body whose key is not the header's
MAX_TTL_SECONDS = 2**31 - 1


def _check_ttl(ttl: object) -> None:
    """An item's `ttl`: -1 (never expires) or 1 to 2^31 - 1 seconds; `null` is refused too."""
    if (
        not isinstance(ttl, int)
        or isinstance(ttl, bool)
        or ttl == 0
        or ttl < -1
        or ttl > MAX_TTL_SECONDS
    ):
        shown = json.dumps(ttl)[:40]
        raise bad_request(
            f"The input ttl '{shown}' is invalid. Ensure to provide a nonzero positive integer "
            f"less than or equal to '{MAX_TTL_SECONDS}', or '-1' which means never expire."
        )


def _stamp(ctx: ItemContext, body: dict[str, Any], previous: Item | None) -> Item:
    doc = {k: v for k, v in body.items() if k not in _SYSTEM_PROPS}
    if previous is not None:
        rid, seq = previous.doc["_rid"], previous.seq
    else:
        seq = ctx.store.rids.next_value()
        rid = ctx.store.rids.child_with(ctx.container.rid, seq, 8)
    doc["_rid"] = rid
    doc["_self"] = f"{ctx.container.props['_self']}docs/{rid}/"
    doc["_etag"] = new_etag()
    doc["_attachments"] = "attachments/"
    now = time.time()
    doc["_ts"] = int(now)
    ctx.store.touch()
    # The write's log sequence number: the change feed lists items in its order.
    doc["_lsn"] = ctx.store.lsn
    return Item(doc, now, seq, ctx.indexed)


def _check_if_match(item: Item, if_match: str | None) -> None:
    if if_match is not None and if_match != "*" and item.etag != if_match:
        raise precondition_failed()


def create(view: PartitionView, ctx: ItemContext, body: object) -> Outcome:
    doc = _check_body(ctx, body)
    if view.get(doc["id"]) is not None:
        raise item_conflict(doc["id"])
    item = _stamp(ctx, doc, None)
    view.put(doc["id"], item)
    return Outcome(201, item.doc)


def upsert(view: PartitionView, ctx: ItemContext, body: object, if_match: str | None) -> Outcome:
    doc = _check_body(ctx, body)
    existing = view.get(doc["id"])
    if existing is None:
        # Cosmos applies If-Match only on the replace path of an upsert: a missing item is
        # created whatever the condition (as the service and its SDK maintainers describe).
        item = _stamp(ctx, doc, None)
        view.put(doc["id"], item)
        return Outcome(201, item.doc)
    _check_if_match(existing, if_match)
    item = _stamp(ctx, doc, existing)
    view.put(doc["id"], item)
    return Outcome(200, item.doc)


def replace(
    view: PartitionView, ctx: ItemContext, item_id: str, body: object, if_match: str | None
) -> Outcome:
    """Replace the item `item_id`; a body with another id renames it, as Cosmos does.

    The item keeps its `_rid` (Cosmos addresses it by that); the new id must be free in the
    partition (409 otherwise), and the old id is gone."""
    doc = _check_body(ctx, body)
    existing = view.get(item_id)
    if existing is None:
        raise item_not_found(item_id)
    _check_if_match(existing, if_match)
    new_id = doc["id"]
    if new_id != item_id and view.get(new_id) is not None:
        raise item_conflict(new_id)
    item = _stamp(ctx, doc, existing)
    if new_id != item_id:
        view.remove(item_id)
    view.put(new_id, item)
    return Outcome(200, item.doc)


def read(view: PartitionView, item_id: str, if_none_match: str | None = None) -> Outcome:
    existing = view.get(item_id)
    if existing is None:
        raise item_not_found(item_id)
    if if_none_match is not None and if_none_match in (existing.etag, "*"):
        return Outcome(304, None)
    return Outcome(200, existing.doc)


def delete(view: PartitionView, item_id: str, if_match: str | None) -> Outcome:
    existing = view.get(item_id)
    if existing is None:
        raise item_not_found(item_id)
    _check_if_match(existing, if_match)
    view.remove(item_id)
    return Outcome(204, None)


def _patch_request(body: object) -> tuple[object, object]:
    """(operations, condition) of a patch body in either of the shapes Cosmos accepts.

    The JavaScript SDK sends the operations as a bare array; the Python SDK wraps them in an
    object, `{"operations": [...], "condition": "FROM c WHERE ..."}`.
    """
    if isinstance(body, list):
        return body, None
    if isinstance(body, dict):
        return body.get("operations"), body.get("condition")
    raise bad_request(
        "The patch body must be a JSON array of operations or an object with 'operations'."
    )


def patch(
    view: PartitionView, ctx: ItemContext, item_id: str, body: object, if_match: str | None
) -> Outcome:
    operations, condition = _patch_request(body)
    existing = view.get(item_id)
    if existing is None:
        raise item_not_found(item_id)
    _check_if_match(existing, if_match)
    if condition is not None:
        if not isinstance(condition, str):
            raise bad_request("The patch 'condition' must be a string like 'FROM c WHERE ...'.")
        query = parse_query("SELECT * " + condition)
        validate(query)
        computed = compile_definitions(ctx.container.props.get("computedProperties"))
        if (
            query.where is not None
            and Evaluator(query, {}, computed).eval(query.where, existing.doc) is not True
        ):
            raise precondition_failed("The patch filter predicate did not match the item.")
    patched = apply_patch(existing.doc, operations, ctx.container.pk_paths)
    doc = _check_body(ctx, patched, item_id)
    item = _stamp(ctx, doc, existing)
    view.put(item_id, item)
    return Outcome(200, item.doc)


MAX_BATCH_OPERATIONS = 100


def _check_operation_list(operations: object) -> list[object]:
    # The first sentence of each message is Cosmos's own (the SDKs' tests match on it).
    if not isinstance(operations, list):
        raise bad_request("Batch request has no operations. The body must be a JSON array.")
    if not operations:
        raise bad_request("Batch request has no operations.")
    if len(operations) > MAX_BATCH_OPERATIONS:
        raise bad_request(
            "Batch request has more operations than what is supported. It has "
            f"{len(operations)}; at most {MAX_BATCH_OPERATIONS} are allowed."
        )
    return operations


def _failed_entry(err: CosmosError) -> dict[str, Any]:
    failed: dict[str, Any] = {
        "statusCode": err.status,
        "requestCharge": 1.0,
        "message": err.message,
    }
    if err.substatus is not None:
        failed["subStatusCode"] = err.substatus
    return failed


def _done_entry(outcome: Outcome) -> dict[str, Any]:
    entry: dict[str, Any] = {"statusCode": outcome.status, "requestCharge": 1.0}
    if outcome.doc is not None:
        entry["eTag"] = outcome.doc["_etag"]
        entry["resourceBody"] = outcome.doc
    return entry


_NOT_RUN: dict[str, Any] = {"statusCode": 424, "requestCharge": 0.0}


def run_batch(ctx: ItemContext, operations: object) -> tuple[int, list[dict[str, Any]]]:
    """All-or-nothing: the first failure gets its status, every other operation 424."""
    ops = _check_operation_list(operations)
    staged = StagedPartition(LivePartition(ctx.container, ctx.key, ctx.now))
    results: list[dict[str, Any]] = []
    for index, op in enumerate(ops):
        try:
            outcome = _batch_operation(staged, ctx, op)
        except CosmosError as err:
            responses = [dict(_NOT_RUN) for _ in ops]
            responses[index] = _failed_entry(err)
            return 207, responses
        results.append(_done_entry(outcome))
    staged.commit()
    return 200, results


def run_bulk(
    store: Store,
    container: Container,
    operations: object,
    now: float,
    *,
    continue_on_error: bool,
) -> tuple[int, list[dict[str, Any]]]:
    """Non-atomic (the JavaScript SDK's bulk): each operation on its own partition key.

    Every operation commits on its own, so a failing one keeps its own status and rolls back
    nothing. With continue-on-error off the operations after the first failure are not run and
    get 424. The answer is 200 when all succeeded, else 207 (multi-status).
    """
    ops = _check_operation_list(operations)
    results: list[dict[str, Any]] = []
    for op in ops:
        try:
            outcome = _bulk_operation(store, container, op, now)
        except CosmosError as err:
            results.append(_failed_entry(err))
            if not continue_on_error:
                results.extend(dict(_NOT_RUN) for _ in range(len(ops) - len(results)))
                break
            continue
        results.append(_done_entry(outcome))
    failed = any(r["statusCode"] >= 400 for r in results)
    return (207 if failed else 200), results


def _bulk_operation(store: Store, container: Container, op: object, now: float) -> Outcome:
    if not isinstance(op, dict):
        raise bad_request("Each batch operation must be an object.")
    if "partitionKey" not in op:
        raise bad_request(
            "PartitionKey value must be supplied for each operation of a non-atomic "
            "(bulk) batch: 'partitionKey', a JSON array in a string."
        )
    values = parse_batch_partition_key(op["partitionKey"])
    if not isinstance(values, list) or len(values) != len(container.pk_paths):
        raise bad_request(
            "A bulk operation's partitionKey must be a JSON array with one value per path of "
            "the container's partition key definition."
        )
    if any(isinstance(v, dict | list) and v != {} for v in values):
        raise bad_request(
            "A partition key value must be a string, number, boolean, null or {} (undefined)."
        )
    ctx = ItemContext(store, container, values, now)
    return _run_operation(LivePartition(container, ctx.key, now), ctx, op)


def parse_batch_partition_key(raw: object) -> Any:
    if not isinstance(raw, str):
        raise bad_request("A batch operation's 'partitionKey' must be a JSON array in a string.")
    return parse_json(raw, "The batch operation's partitionKey")


def _batch_operation(view: StagedPartition, ctx: ItemContext, op: object) -> Outcome:
    if not isinstance(op, dict):
        raise bad_request("Each batch operation must be an object.")
    if "partitionKey" in op and parse_batch_partition_key(op["partitionKey"]) != ctx.pk_values:
        raise bad_request("Every operation of a batch must target the batch's partition key.")
    return _run_operation(view, ctx, op)


def _run_operation(view: PartitionView, ctx: ItemContext, op: dict[str, Any]) -> Outcome:
    kind = str(op.get("operationType", ""))
    if_match = op.get("ifMatch")
    if_none_match = op.get("ifNoneMatch")
    body = op.get("resourceBody")
    item_id = op.get("id")
    if kind == "Create":
        return create(view, ctx, body)
    if kind == "Upsert":
        return upsert(view, ctx, body, if_match)
    if kind not in ("Read", "Delete", "Replace", "Patch"):
        raise bad_request(f"Unknown batch operationType {kind!r}.")
    if not isinstance(item_id, str):
        raise bad_request(f"Batch operation {kind} needs an 'id'.")
    if kind == "Read":
        return read(view, item_id, if_none_match)
    if kind == "Delete":
        return delete(view, item_id, if_match)
    if kind == "Replace":
        return replace(view, ctx, item_id, body, if_match)
    return patch(view, ctx, item_id, body, if_match)
