"""Item operations over a partition view, shared by single requests and batches.

A view is either the live partition or a batch's staging overlay, so a batch runs exactly
the code a single request runs and commits only when every operation succeeded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import CosmosError, bad_request, conflict, not_found, precondition_failed
from .ids import MAX_ITEM_BYTES, new_etag, too_large, validate_id
from .patch import apply_patch
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
        assert item.doc["id"] == item_id
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

    @property
    def key(self) -> str:
        return pk_key(self.pk_values)


@dataclass
class Outcome:
    status: int
    doc: dict[str, Any] | None


def _check_body(ctx: ItemContext, body: object, expected_id: str | None = None) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("The item must be a JSON object.")
    item_id = validate_id(body.get("id"))
    if expected_id is not None and item_id != expected_id:
        raise bad_request(
            f"The id '{item_id}' in the body does not match the id '{expected_id}' in the request."
        )
    if ctx.container.pk_from_doc(body) != ctx.pk_values:
        raise bad_request(
            "PartitionKey extracted from document doesn't match the one specified in the header."
        )
    if "ttl" in body and body["ttl"] is not None:
        ttl = body["ttl"]
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl == 0 or ttl < -1:
            raise bad_request("The item 'ttl' must be -1 or a positive number of seconds.")
    size = len(check_document(body, "The item"))
    if size > MAX_ITEM_BYTES:
        raise too_large(size)
    return body


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
    return Item(doc, now, seq)


def _check_if_match(item: Item, if_match: str | None) -> None:
    if if_match is not None and if_match != "*" and item.doc["_etag"] != if_match:
        raise precondition_failed()


def create(view: PartitionView, ctx: ItemContext, body: object) -> Outcome:
    doc = _check_body(ctx, body)
    if view.get(doc["id"]) is not None:
        raise conflict(f"Entity with the specified id '{doc['id']}' already exists.")
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
    doc = _check_body(ctx, body, item_id)
    existing = view.get(item_id)
    if existing is None:
        raise not_found(f"Entity with the specified id '{item_id}' does not exist.")
    _check_if_match(existing, if_match)
    item = _stamp(ctx, doc, existing)
    view.put(item_id, item)
    return Outcome(200, item.doc)


def read(view: PartitionView, item_id: str, if_none_match: str | None = None) -> Outcome:
    existing = view.get(item_id)
    if existing is None:
        raise not_found(f"Entity with the specified id '{item_id}' does not exist.")
    if if_none_match is not None and if_none_match in (existing.doc["_etag"], "*"):
        return Outcome(304, None)
    return Outcome(200, existing.doc)


def delete(view: PartitionView, item_id: str, if_match: str | None) -> Outcome:
    existing = view.get(item_id)
    if existing is None:
        raise not_found(f"Entity with the specified id '{item_id}' does not exist.")
    _check_if_match(existing, if_match)
    view.remove(item_id)
    return Outcome(204, None)


def patch(
    view: PartitionView, ctx: ItemContext, item_id: str, body: object, if_match: str | None
) -> Outcome:
    if not isinstance(body, dict):
        raise bad_request("The patch body must be a JSON object.")
    existing = view.get(item_id)
    if existing is None:
        raise not_found(f"Entity with the specified id '{item_id}' does not exist.")
    _check_if_match(existing, if_match)
    condition = body.get("condition")
    if condition is not None:
        if not isinstance(condition, str):
            raise bad_request("The patch 'condition' must be a string like 'FROM c WHERE ...'.")
        query = parse_query("SELECT * " + condition)
        validate(query)
        if (
            query.where is not None
            and Evaluator(query, {}).eval(query.where, existing.doc) is not True
        ):
            raise precondition_failed("The patch filter predicate did not match the item.")
    patched = apply_patch(existing.doc, body.get("operations"), ctx.container.pk_paths)
    doc = _check_body(ctx, patched, item_id)
    item = _stamp(ctx, doc, existing)
    view.put(item_id, item)
    return Outcome(200, item.doc)


MAX_BATCH_OPERATIONS = 100


def run_batch(ctx: ItemContext, operations: object) -> tuple[int, list[dict[str, Any]]]:
    """All-or-nothing: the first failure gets its status, every other operation 424."""
    if not isinstance(operations, list) or not operations:
        raise bad_request("A batch needs a non-empty list of operations.")
    if len(operations) > MAX_BATCH_OPERATIONS:
        raise bad_request(
            f"Batch request has {len(operations)} operations; at most "
            f"{MAX_BATCH_OPERATIONS} are allowed."
        )
    staged = StagedPartition(LivePartition(ctx.container, ctx.key, ctx.now))
    results: list[dict[str, Any]] = []
    for index, op in enumerate(operations):
        try:
            outcome = _batch_operation(staged, ctx, op)
        except CosmosError as err:
            failed: dict[str, Any] = {
                "statusCode": err.status,
                "requestCharge": 1.0,
                "message": err.message,
            }
            if err.substatus is not None:
                failed["subStatusCode"] = err.substatus
            responses = [{"statusCode": 424, "requestCharge": 0.0} for _ in operations]
            responses[index] = failed
            return 207, responses
        entry: dict[str, Any] = {"statusCode": outcome.status, "requestCharge": 1.0}
        if outcome.doc is not None:
            entry["eTag"] = outcome.doc["_etag"]
            entry["resourceBody"] = outcome.doc
        results.append(entry)
    staged.commit()
    return 200, results


def parse_batch_partition_key(raw: object) -> Any:
    if not isinstance(raw, str):
        raise bad_request("A batch operation's 'partitionKey' must be a JSON array in a string.")
    return parse_json(raw, "The batch operation's partitionKey")


def _batch_operation(view: StagedPartition, ctx: ItemContext, op: object) -> Outcome:
    if not isinstance(op, dict):
        raise bad_request("Each batch operation must be an object.")
    kind = str(op.get("operationType", ""))
    if_match = op.get("ifMatch")
    if_none_match = op.get("ifNoneMatch")
    if "partitionKey" in op and parse_batch_partition_key(op["partitionKey"]) != ctx.pk_values:
        raise bad_request("Every operation of a batch must target the batch's partition key.")
    body = op.get("resourceBody")
    item_id = op.get("id")
    if kind == "Create":
        return create(view, ctx, body)
    if kind == "Upsert":
        return upsert(view, ctx, body, if_match)
    if kind in ("Read", "Delete", "Replace", "Patch") and not isinstance(item_id, str):
        raise bad_request(f"Batch operation {kind} needs an 'id'.")
    assert isinstance(item_id, str) or kind not in ("Read", "Delete", "Replace", "Patch")
    if kind == "Read":
        return read(view, str(item_id), if_none_match)
    if kind == "Delete":
        return delete(view, str(item_id), if_match)
    if kind == "Replace":
        return replace(view, ctx, str(item_id), body, if_match)
    if kind == "Patch":
        return patch(view, ctx, str(item_id), body, if_match)
    raise bad_request(f"Unknown batch operationType {kind!r}.")
