"""Fakes of our own ports, honouring the same contract as the real adapters.

`FakeOrderStore` (the orders container) and `FakeDocumentStore` (a view of a
`FakeFencedDocuments`) are the `exactly_once` core's `DocumentStore` in memory, as
`exactly_once.cosmos.CosmosStore` is over Cosmos DB: a batch writes all documents or none, and
a conflict names the first document that exists and its position; they are for fast unit tests
of decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from exactly_once._records import (
    JsonInput,
    JsonMapping,
    JsonValue,
    Record,
    RecordRead,
    RecordStatus,
    Stamp,
)
from exactly_once.change_feed import ChangePage, Lease, LeaseTable
from exactly_once.cosmos import RecordShape, user_fields
from exactly_once.exceptions import (
    DocumentExistsError,
    RecordChangedError,
    RecordExistsError,
)
from exactly_once.store import StoredDocument
from orders.adapters.cosmos_billing import ChargeRecordShape, RefundRecordShape
from orders.adapters.cosmos_idempotency import (
    RECORD_DOCUMENT_TYPE,
    IntakeRecordShape,
    claim_order_id,
    order_claim,
    order_claim_id,
)
from orders.adapters.cosmos_layout import (
    CosmosLayout,
    order_write,
)
from orders.adapters.servicebus_publisher import order_message_body
from orders.domain.dead_letters import (
    DeadLetter,
    DeadLetterOutcome,
    DeadLetterPlan,
    Selection,
    plan_for,
)
from orders.domain.decision_counters import DecisionCounters
from orders.domain.events import OrderAccepted, OrderCancelled
from orders.domain.hashing import request_hash
from orders.domain.idempotency import KeyRecord, OrderIdClaim, validate_idempotency_key
from orders.domain.messages import parse_order
from orders.domain.model import OrderPlaced
from orders.domain.payments import Charge, ChargeRequest, Refund, RefundRequest
from orders.domain.received import ReceivedOrderMessage
from orders.domain.saga import Fulfilment
from orders.domain.status import OrderStatusChanged
from orders.exceptions import (
    InvalidIdempotencyKeyError,
    PaymentError,
    PaymentRefusedError,
    ResubmitUnsupportedError,
)
from orders.service.billing import BillingConsumer, BillingStores
from orders.service.ports import EntityCounts
from orders.service.saga import OrderSaga
from orders.service.shipping import ShippingConsumer
from orders.service.subscribers import Source

# The real documents layout: pure mapping, no I/O, so the fakes store what Cosmos would.
LAYOUT = CosmosLayout()


class FakeOrderStore:
    """The orders container as the order consumer writes it (the core's `DocumentStore`),
    kept by partition so that tests read and seed it directly. Held to `CosmosStore` by
    tests/integration/test_document_store_contract.py."""

    def __init__(self) -> None:
        self.partitions: dict[str, dict[str, dict[str, Any]]] = {}
        self.create_calls = 0
        self.read_calls = 0
        self._failures: list[BaseException] = []

    def fail_next(self, error: BaseException, times: int = 1) -> None:
        """The next `times` batches (an order's or a rejection note's) raise `error`."""
        self._failures.extend([error] * times)

    def seed_document(self, partition_key: str, document: dict[str, Any]) -> None:
        self.partitions.setdefault(partition_key, {})[document["id"]] = copy.deepcopy(document)

    def documents(self, partition_key: str) -> list[dict[str, Any]]:
        return list(self.partitions.get(partition_key, {}).values())

    def order_ids(self) -> list[str]:
        return [pk for pk, docs in self.partitions.items() if pk in docs]

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        self.create_calls += 1
        await asyncio.sleep(0)  # let concurrent deliveries interleave before the atomic step
        if self._failures:
            raise self._failures.pop(0)
        stored = self.partitions.setdefault(partition, {})
        written = [
            {**copy.deepcopy(dict(document)), "orderId": partition} for document in documents
        ]
        refuse_conflicts(written, lambda document_id: document_id in stored)
        for document in written:  # no await in between: the batch is atomic
            stored[str(document["id"])] = document

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        self.read_calls += 1
        await asyncio.sleep(0)
        found = _with_etag(self.partitions.get(partition, {}).get(document_id))
        return None if found is None else stored_document(found)

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        await asyncio.sleep(0)
        self._check_etag(document, partition, etag)
        return self._replaced(document, partition)

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        await self.replace_all_and_create(partition, [(document, etag)], created=created)

    async def replace_all_and_create(
        self,
        partition: str,
        replaced: Sequence[tuple[JsonMapping, str]],
        *,
        created: Sequence[JsonMapping],
    ) -> None:
        await asyncio.sleep(0)
        for document, etag in replaced:
            self._check_etag(document, partition, etag)
        stored = self.partitions.setdefault(partition, {})
        written = [{**copy.deepcopy(dict(each)), "orderId": partition} for each in created]
        refuse_conflicts(written, lambda document_id: document_id in stored)
        for document, _ in replaced:  # no await in between: the batch is atomic
            self._replaced(document, partition)
        for each in written:
            stored[str(each["id"])] = each

    def _check_etag(self, document: JsonMapping, partition: str, etag: str) -> None:
        current = _with_etag(self.partitions.get(partition, {}).get(str(document["id"])))
        if current is None or current["_etag"] != etag:
            raise RecordChangedError(f"{document['id']!r} changed since it was read")

    def _replaced(self, document: JsonMapping, partition: str) -> StoredDocument:
        stored = {**copy.deepcopy(dict(document)), "orderId": partition}
        stored["_etag"] = f'"{next(_ETAGS)}"'
        self.partitions[partition][str(document["id"])] = stored
        return stored_document(stored)


def refuse_conflicts(batch: list[dict[str, Any]], is_stored: Callable[[str], bool]) -> None:
    """As `CosmosStore.create_all` fails a batch: the core's `DocumentExistsError` naming the
    first document that is stored already (or comes twice) and its position; nothing written."""
    seen: set[str] = set()
    for index, document in enumerate(batch):
        if is_stored(document["id"]) or document["id"] in seen:
            raise DocumentExistsError(str(document["id"]), index)
        seen.add(document["id"])


def stored_document(stored: dict[str, Any]) -> StoredDocument:
    """A stored document as the core's port hands it over: a copy of its own fields, its ETag
    apart."""
    return StoredDocument(body=user_fields(copy.deepcopy(stored)), etag=stored["_etag"])


def _with_etag(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored document of `FakeOrderStore`, given an ETag on first sight (documents are
    seeded and written without one)."""
    if found is not None and "_etag" not in found:
        found["_etag"] = f'"{next(_ETAGS)}"'
    return found


@dataclass
class RecordingSettler:
    """A `Settler` (the core's) that remembers the one settlement it was asked for."""

    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    async def complete(self) -> None:
        self.calls.append(("complete", {}))

    async def abandon(self) -> None:
        self.calls.append(("abandon", {}))

    async def dead_letter(self, *, reason: str, description: str) -> None:
        self.calls.append(("dead_letter", {"reason": reason, "description": description}))

    async def retry_later(self, *, retry: int, delay_seconds: float) -> None:
        self.calls.append(("retry_later", {"retry": str(retry), "delay": f"{delay_seconds:g}"}))


@dataclass
class FakeMessageActions:
    """Stands in for the Functions host's `ServiceBusMessageActions` (gRPC, host-only)."""

    calls: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)

    def complete(self, message: Any) -> None:
        self.calls.append(("complete", message, {}))

    def abandon(self, message: Any) -> None:
        self.calls.append(("abandon", message, {}))

    def deadletter(
        self, message: Any, *, deadletter_reason: str, deadletter_error_description: str
    ) -> None:
        self.calls.append(
            (
                "deadletter",
                message,
                {
                    "deadletter_reason": deadletter_reason,
                    "deadletter_error_description": deadletter_error_description,
                },
            )
        )


def order_payload(order_id: str, **overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "orderId": order_id,
        "customerId": "customer-1",
        "currency": "EUR",
        "lines": [
            {"sku": "sku-apple", "quantity": 2, "unitPrice": 1.25},
            {"sku": "sku-pear", "quantity": 1, "unitPrice": 3},
        ],
    }
    payload.update(overrides)
    return payload


def new_write(
    order_id: str, *, owner_scope: str | None = None, **overrides: Any
) -> tuple[dict[str, Any], ...]:
    """The documents the consumer would write for `order_payload(order_id, **overrides)` sent
    with `owner_scope` as its owner (None: no owner, as a producer's that names none), the
    order document first."""
    order = parse_order(json.dumps(order_payload(order_id, **overrides)).encode())
    return order_write(
        order,
        request_hash=request_hash(order.canonical_payload()),
        message_id=order_id,
        processed_at=datetime.now(UTC),
        owner_scope=owner_scope,
    )


# --- HTTP API: idempotency records, publishing, reading orders back --------------------------


class FakeIdempotencyStore:
    """`IdempotencyStore` in memory, with the Cosmos adapter's contract: documents in the
    intake's shape, stamped with an ETag and `_ts` by `database_clock` (the fake's database
    time, which judges leases); a create conflicts with the stored record and the database's
    time attached; If-Match writes fail with `RecordChangedError` when the ETag moved on."""

    def __init__(self, database_clock: Callable[[], float] = time.time) -> None:
        self.documents: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.database_clock = database_clock
        self._failures: dict[str, list[BaseException]] = {}
        self._before: dict[str, list[Callable[[], Awaitable[None]]]] = {}
        self._shape = IntakeRecordShape()

    def fail_next(self, operation: str, error: BaseException) -> None:
        self._failures.setdefault(operation, []).append(error)

    def before_next(self, operation: str, action: Callable[[], Awaitable[None]]) -> None:
        """Run `action` just before the next `operation` (another writer moving first)."""
        self._before.setdefault(operation, []).append(action)

    def record(self, record_id: str) -> Record | None:
        document = self.documents.get(record_id)
        return self._record(document) if document is not None else None

    def _now_ms(self) -> int:
        return int(self.database_clock() * 1000)

    def _record(self, document: dict[str, Any]) -> Record:
        identifier = str(document["id"])
        record = self._shape.record(document, identifier, identifier)
        ttl = document.get("ttl")
        return replace(
            record,
            expires_after_seconds=int(ttl) if ttl is not None else None,
            stamp=Stamp(etag=str(document["_etag"]), written_at_s=int(document["_ts"])),
        )

    async def _enter(self, operation: str) -> None:
        await asyncio.sleep(0)  # let concurrent requests interleave before the atomic step
        for action in self._before.pop(operation, []):
            await action()
        self.calls.append(operation)
        failures = self._failures.get(operation)
        if failures:
            raise failures.pop(0)

    def _write(self, record: Record) -> Record:
        document = self._shape.fields(record) | {
            "id": record.key,
            "type": self._shape.record_type,
            "_etag": f'"{uuid.uuid4()}"',
            "_ts": int(self.database_clock()),
        }
        if record.expires_after_seconds is not None:
            document["ttl"] = record.expires_after_seconds
        self.documents[record.key] = document
        return self._record(copy.deepcopy(document))

    def _fenced(self, record: Record) -> dict[str, Any]:
        current = self.documents.get(record.key)
        if current is None or record.stamp is None or current["_etag"] != record.stamp.etag:
            raise RecordChangedError(f"record {record.key!r} changed since it was read")
        return current

    async def claim(self, record: Record) -> Record:
        await self._enter("claim")
        existing = self.record(record.key)
        if existing is not None:
            raise RecordExistsError(existing, self._now_ms())
        return self._write(record)

    async def read(self, key: str, partition: str) -> RecordRead:
        await self._enter("read")
        return RecordRead(self.record(key), self._now_ms())

    async def take_over(self, existing: Record, owner: str, lease_seconds: float) -> Record:
        await self._enter("take_over")
        self._fenced(existing)
        return self._write(existing.owned_by(owner, lease_seconds))

    async def complete(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> Record:
        await self._enter("complete")
        self._fenced(owned)
        stored: JsonValue = json.loads(json.dumps(result))
        return self._write(replace(owned, status=status, result=stored))

    async def release(self, owned: Record) -> None:
        await self._enter("release")
        with contextlib.suppress(RecordChangedError):
            self._fenced(owned)
            del self.documents[owned.key]

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        """The core's `DocumentCreator`, as the intake's orderId claims use it (one document
        per partition, the partition its id): all or nothing, `DocumentExistsError` naming
        the first document that exists."""
        await self._enter("create_all")
        for index, document in enumerate(documents):
            if str(document["id"]) in self.documents:
                raise DocumentExistsError(str(document["id"]), index)
        for document in documents:
            stored = json.loads(json.dumps(document))
            self.documents[str(document["id"])] = stored | {"_etag": f'"{uuid.uuid4()}"'}

    async def claim_order_id(self, claim: OrderIdClaim) -> OrderIdClaim | None:
        # The adapter's own claim (the core's create-or-compare) over this fake's documents.
        await self._enter("claim_order_id")
        return await claim_order_id(self, claim)

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        await self._enter("get")
        found = self.documents.get(document_id)
        if found is None:
            return None
        body = {name: value for name, value in found.items() if not name.startswith("_")}
        return StoredDocument(body=copy.deepcopy(body), etag=str(found["_etag"]))

    async def read_order_id_claim(self, order_id: str) -> OrderIdClaim | None:
        await self._enter("read_order_id_claim")
        found = self.documents.get(order_claim_id(order_id))
        return order_claim(found) if found is not None else None

    async def find_order(self, scope: str, order_id: str) -> KeyRecord | None:
        await self._enter("find_order")
        for document in self.documents.values():
            if (
                document.get("type") == RECORD_DOCUMENT_TYPE
                and document["orderId"] == order_id
                and document["scope"] == scope
                and document["status"] == RecordStatus.COMPLETED.value
                and "operation" not in document  # placing records only, as the adapter's query
            ):
                return KeyRecord.of(self._record(document))
        return None


class RecordingPublisher:
    """`OrderPublisher` that remembers what it sent; `hold()` keeps sends waiting."""

    def __init__(self) -> None:
        self.published: list[OrderPlaced] = []
        self.owners: dict[str, str] = {}  # orderId -> the owner scope it was last published with
        self.statuses: list[OrderStatusChanged] = []
        self._failures: list[BaseException] = []
        self._released = asyncio.Event()
        self._released.set()
        self.started = asyncio.Event()
        self.calls = 0
        self._called = asyncio.Condition()

    def fail_next(self, error: BaseException) -> None:
        self._failures.append(error)

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    async def wait_for_calls(self, count: int) -> None:
        async with self._called:
            await self._called.wait_for(lambda: self.calls >= count)

    async def publish_status(self, change: OrderStatusChanged) -> None:
        """As `StatusPublisher`: the same hold and failure controls as `publish`."""
        await self._sent()
        self.statuses.append(change)

    async def _sent(self) -> None:
        self.started.set()
        async with self._called:
            self.calls += 1
            self._called.notify_all()
        await self._released.wait()
        if self._failures:
            raise self._failures.pop(0)

    async def publish(self, order: OrderPlaced, owner_scope: str) -> None:
        await self._sent()
        self.published.append(order)
        self.owners[order.order_id] = owner_scope

    def as_received(self, order: OrderPlaced) -> ReceivedOrderMessage:
        """The published order as the consumer receives it: body, MessageId and owner."""
        return ReceivedOrderMessage(
            order_message_body(order), order.order_id, owner_property=self.owners[order.order_id]
        )


class FakeOrderReader:
    """`OrderReader` over a `FakeOrderStore`, so a fake consumer's writes can be read back."""

    def __init__(self, store: FakeOrderStore) -> None:
        self._store = store

    async def read_order_documents(self, order_id: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self._store.documents(order_id))


_ETAGS = itertools.count(1)


class NoChangesFeed:
    """A change feed with nothing to read: for tests that hand `dispatch` its documents."""

    async def feed_ranges(self) -> list[str]:
        return []

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        return ChangePage([], continuation)


class FakeLeaseStore:
    """The change-feed processor's `LeaseStore` in memory, with a database clock the test
    moves: each write stamps the lease with a fresh ETag and `_ts` of that clock; a write with
    a stale stamp raises `RecordChangedError` and writes nothing. Held to `CosmosLeaseStore` by
    tests/core/test_lease_store_contract.py."""

    def __init__(self) -> None:
        self.leases: dict[str, Lease] = {}  # by feed range
        self.database_now_ms = 1_800_000_000_000

    async def read_all(self) -> LeaseTable:
        return LeaseTable(list(self.leases.values()), self.database_now_ms)

    async def create(
        self, feed_range: str, lease_seconds: float, continuation: str | None = None
    ) -> None:
        if feed_range not in self.leases:
            self._write(Lease(feed_range, None, lease_seconds, continuation))

    async def acquire(self, lease: Lease, owner: str, lease_seconds: float) -> Lease:
        taken = replace(lease, owner=owner, lease_seconds=lease_seconds, requested_by=None)
        return self._replace(taken)

    async def request(self, lease: Lease, owner: str) -> Lease:
        return self._replace(replace(lease, requested_by=owner))

    async def renew(self, lease: Lease) -> Lease:
        return self._replace(lease)

    async def checkpoint(self, lease: Lease, continuation: str) -> Lease:
        return self._replace(replace(lease, continuation=continuation))

    async def release(self, lease: Lease) -> Lease:
        return self._replace(replace(lease, owner=None, requested_by=None))

    async def delete(self, lease: Lease) -> None:
        self._require_current(lease)
        del self.leases[lease.feed_range]

    def _replace(self, lease: Lease) -> Lease:
        self._require_current(lease)
        return self._write(lease)

    def _require_current(self, lease: Lease) -> None:
        current = self.leases.get(lease.feed_range)
        if current is None or current.stamp != lease.stamp:
            raise RecordChangedError(f"lease of {lease.feed_range!r} changed since it was read")

    def _write(self, lease: Lease) -> Lease:
        stamp = Stamp(etag=f'"{next(_ETAGS)}"', written_at_s=self.database_now_ms // 1000)
        self.leases[lease.feed_range] = stored = replace(lease, stamp=stamp)
        return stored


class FakeFencedDocuments:
    """An orders or inbox container in memory, with a database clock the test moves: documents
    keyed by (partition key, id), the partition key read from each document at
    `partition_key_path` as Cosmos reads it (`orderId` for the orders and inbox containers).
    The core's ports over it are `FakeDocumentStore` (its documents) and `FakeShapedRecords`
    (records in a `RecordShape`), each held to `CosmosStore` by a contract test."""

    def __init__(self, partition_key_path: str = "orderId") -> None:
        self.partition_key_path = partition_key_path
        # By (partition key, id), as Cosmos keys them.
        self.documents: dict[tuple[str, str], dict[str, Any]] = {}
        self.database_now_ms = 1_800_000_000_000

    def key_of(self, document: Mapping[str, Any]) -> tuple[str, str]:
        return (str(document[self.partition_key_path]), str(document["id"]))

    def _stored(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Write `document` (a create or a replace), stamped as Cosmos stamps it; a copy."""
        stored = {
            **copy.deepcopy(dict(document)),
            "_ts": self.database_now_ms // 1000,
            # Unique across every fake, as a real store's are: two fakes that share documents
            # (a test's racing view) must never hand out an ETag a stale reader still holds.
            "_etag": f'"{next(_ETAGS)}"',
        }
        self.documents[self.key_of(document)] = stored
        return copy.deepcopy(stored)

    def _found(self, document_id: str, partition_key: str) -> dict[str, Any] | None:
        found = self.documents.get((partition_key, document_id))
        return copy.deepcopy(found) if found else None

    def holds(self, key: tuple[str, str], etag: str) -> bool:
        """Whether the document stored under `key` is there with ETag `etag` (If-Match)."""
        current = self.documents.get(key)
        return current is not None and current["_etag"] == etag


class FakeShapedRecords:
    """The core's `Store` in one `RecordShape` over a `FakeFencedDocuments` container, as
    `exactly_once.cosmos.CosmosStore` is over a real one (held to it by
    tests/integration/test_record_store_contract.py): the records are the container's documents,
    so the other consumers and the audits read what billing wrote."""

    def __init__(self, documents: FakeFencedDocuments, shape: RecordShape) -> None:
        self.documents = documents
        self._shape = shape

    def _document(self, record: Record) -> dict[str, Any]:
        document = self._shape.fields(record) | {
            "id": record.key,
            self.documents.partition_key_path: record.partition,
            "type": self._shape.record_type,
        }
        if record.expires_after_seconds is not None:
            document["ttl"] = record.expires_after_seconds
        return document

    def _record(self, stored: dict[str, Any]) -> Record:
        record = self._shape.record(stored, stored["id"], stored[self.documents.partition_key_path])
        stamp = Stamp(etag=stored["_etag"], written_at_s=stored["_ts"])
        return replace(record, expires_after_seconds=stored.get("ttl"), stamp=stamp)

    async def claim(self, record: Record) -> Record:
        document = self._document(record)
        if self.documents.key_of(document) not in self.documents.documents:
            return self._record(self.documents._stored(document))
        found = await self.read(record.key, record.partition)
        assert found.record is not None  # nothing deletes between the two in a fake
        raise RecordExistsError(found.record, found.database_now_ms)

    async def read(self, key: str, partition: str) -> RecordRead:
        found = self.documents._found(key, partition)
        # The adapter's one query returns no row, hence no clock, for a missing record.
        if found is None:
            return RecordRead(None, 0)
        return RecordRead(self._record(found), self.documents.database_now_ms)

    async def _replace(self, record: Record, fence: Record) -> Record:
        assert fence.stamp is not None
        document = self._document(record)
        if not self.documents.holds(self.documents.key_of(document), fence.stamp.etag):
            raise RecordChangedError(f"record {record.key!r} changed since it was read")
        return self._record(self.documents._stored(document))

    async def take_over(self, existing: Record, owner: str, lease_seconds: float) -> Record:
        return await self._replace(existing.owned_by(owner, lease_seconds), existing)

    async def complete(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> Record:
        stored: JsonValue = json.loads(json.dumps(result))
        return await self._replace(replace(owned, status=status, result=stored), owned)

    async def release(self, owned: Record) -> None:
        assert owned.stamp is not None
        # Another owner moved on, or it is gone: nothing of ours to release.
        if self.documents.holds((owned.partition, owned.key), owned.stamp.etag):
            del self.documents.documents[(owned.partition, owned.key)]

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        await FakeDocumentStore(self.documents).create_all(partition, documents)

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        return await FakeDocumentStore(self.documents).get(document_id, partition)

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        return await FakeDocumentStore(self.documents).replace(document, partition, etag=etag)

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        await self.replace_all_and_create(partition, [(document, etag)], created=created)

    async def replace_all_and_create(
        self,
        partition: str,
        replaced: Sequence[tuple[JsonMapping, str]],
        *,
        created: Sequence[JsonMapping],
    ) -> None:
        await FakeDocumentStore(self.documents).replace_all_and_create(
            partition, replaced, created=created
        )


def billing_stores(inbox: FakeFencedDocuments) -> BillingStores:
    """Billing's charges and refunds in the fake inbox container, in billing's shapes."""
    return BillingStores(
        FakeShapedRecords(inbox, ChargeRecordShape()), FakeShapedRecords(inbox, RefundRecordShape())
    )


class FakeDocumentStore:
    """The core's `DocumentStore` over a `FakeFencedDocuments` (an inbox or orders container):
    shipping's `create_or_find`, status's `apply_version` and the saga's fenced writes. As
    `CosmosStore` does, every document is written in the partition it is given. Held to
    `CosmosStore` by tests/integration/test_document_store_contract.py."""

    def __init__(self, container: FakeFencedDocuments | None = None) -> None:
        self.container = container or FakeFencedDocuments()

    def _in(self, partition: str, document: JsonMapping) -> dict[str, Any]:
        return {**copy.deepcopy(dict(document)), self.container.partition_key_path: partition}

    async def create_all(self, partition: str, documents: Sequence[JsonMapping]) -> None:
        written = [self._in(partition, document) for document in documents]
        refuse_conflicts(
            written, lambda document_id: (partition, document_id) in self.container.documents
        )
        for document in written:
            self.container._stored(document)

    async def get(self, document_id: str, partition: str) -> StoredDocument | None:
        found = self.container._found(document_id, partition)
        return None if found is None else stored_document(found)

    async def replace(self, document: JsonMapping, partition: str, *, etag: str) -> StoredDocument:
        written = self._in(partition, document)
        self._check_etag(written, etag)
        return stored_document(self.container._stored(written))

    async def replace_and_create(
        self,
        partition: str,
        document: JsonMapping,
        *,
        etag: str,
        created: Sequence[JsonMapping],
    ) -> None:
        await self.replace_all_and_create(partition, [(document, etag)], created=created)

    async def replace_all_and_create(
        self,
        partition: str,
        replaced: Sequence[tuple[JsonMapping, str]],
        *,
        created: Sequence[JsonMapping],
    ) -> None:
        fenced = [self._in(partition, document) for document, _ in replaced]
        written = [self._in(partition, each) for each in created]
        for document, (_, etag) in zip(fenced, replaced, strict=True):
            self._check_etag(document, etag)
        refuse_conflicts(
            written, lambda document_id: (partition, document_id) in self.container.documents
        )
        for each in (*fenced, *written):  # no await in between: the batch is atomic
            self.container._stored(each)

    def _check_etag(self, document: dict[str, Any], etag: str) -> None:
        if not self.container.holds(self.container.key_of(document), etag):
            raise RecordChangedError(f"{document['id']!r} changed since it was read")


class FakePaymentGateway:
    """`PaymentGateway` in memory, held to the real adapter's behaviour by
    tests/integration/test_payment_gateway_contract.py: one charge and one refund per key, a key
    reused for another charge or refund refused (422), keys no provider takes refused before
    anything happens; a refund refused, as the stand-in refuses it, for an unknown payment
    (404), a payment refunded in full (409), more than remains or another currency (422).

    `fail_next(error)` makes the next charge raise before charging; `fail_next(error,
    after_charge=True)` charges first (the provider failed after recording it).
    `fail_next_refund(error)` and `fail_next_refund(error, after_refund=True)` do the same for
    the next refund."""

    def __init__(self) -> None:
        self.charges: dict[str, Charge] = {}  # by idempotency key, in creation order
        self.requests: list[ChargeRequest] = []
        self.refunds: dict[str, Refund] = {}  # by idempotency key, in creation order
        self.refund_requests: list[RefundRequest] = []
        self._failures: list[tuple[PaymentError, bool]] = []
        self._refund_failures: list[tuple[PaymentError, bool]] = []

    def fail_next(self, error: PaymentError, *, after_charge: bool = False) -> None:
        self._failures.append((error, after_charge))

    def fail_next_refund(self, error: PaymentError, *, after_refund: bool = False) -> None:
        self._refund_failures.append((error, after_refund))

    async def charge(self, request: ChargeRequest) -> Charge:
        self.requests.append(request)
        _refuse_invalid_key(request.idempotency_key)
        error, after_charge = self._failures.pop(0) if self._failures else (None, False)
        if error is not None and not after_charge:
            raise error
        existing = self.charges.setdefault(
            request.idempotency_key,
            Charge(
                payment_id=f"pay_{uuid.uuid4().hex}",
                order_id=request.order_id,
                amount=request.amount,
                currency=request.currency,
                idempotency_key=request.idempotency_key,
                created_at=_now(),
            ),
        )
        if error is not None:
            raise error
        if not existing.answers(request):
            raise PaymentRefusedError(
                "idempotency-key-reused",
                f"this key was first used for another charge; {existing.payment_id} stands",
                status=422,
            )
        return existing

    async def charges_for(self, order_id: str) -> list[Charge]:
        return [charge for charge in self.charges.values() if charge.order_id == order_id]

    async def refund(self, request: RefundRequest) -> Refund:
        self.refund_requests.append(request)
        _refuse_invalid_key(request.idempotency_key)
        if not request.amount.is_finite():  # as the adapter refuses it, before sending
            raise PaymentRefusedError("invalid-amount", f"{request.amount} is not a number")
        if request.amount <= 0:
            raise PaymentRefusedError("invalid-request", "the amount must be above 0", status=400)
        error, after_refund = (
            self._refund_failures.pop(0) if self._refund_failures else (None, False)
        )
        if error is not None and not after_refund:
            raise error
        try:
            refund = self._refund_once(request)
        except PaymentRefusedError:
            if error is not None:  # the provider decided, then failed: the caller sees the failure
                raise error from None
            raise
        if error is not None:
            raise error
        if not refund.answers(request):
            raise PaymentRefusedError(
                "refund-mismatch",
                f"refund {refund.refund_id} is of order {refund.order_id!r}, "
                f"not {request.order_id!r}",
            )
        return refund

    def _refund_once(self, request: RefundRequest) -> Refund:
        """The stand-in's ledger: the key's refund if the key is used, else a new one if the
        payment can take it."""
        asked = (request.payment_id, request.amount, request.currency)
        existing = self.refunds.get(request.idempotency_key)
        if existing is not None:
            if (existing.payment_id, existing.amount, existing.currency) != asked:
                raise PaymentRefusedError(
                    "idempotency-key-reused",
                    f"this key was first used for another refund; {existing.refund_id} stands",
                    status=422,
                )
            return existing
        paid = next((c for c in self.charges.values() if c.payment_id == request.payment_id), None)
        if paid is None:
            raise PaymentRefusedError("unknown-payment", "no payment has this id", status=404)
        if request.currency != paid.currency:
            raise PaymentRefusedError(
                "currency-mismatch", f"the payment was made in {paid.currency}", status=422
            )
        remaining = paid.amount - sum(
            (r.amount for r in self.refunds.values() if r.payment_id == paid.payment_id),
            Decimal(0),
        )
        if remaining <= 0:
            raise PaymentRefusedError("already-refunded", "fully refunded", status=409)
        if request.amount > remaining:
            raise PaymentRefusedError(
                "refund-exceeds-payment", f"{remaining} remains refundable", status=422
            )
        refund = Refund(
            refund_id=f"re_{uuid.uuid4().hex}",
            payment_id=paid.payment_id,
            order_id=paid.order_id,
            amount=request.amount,
            currency=request.currency,
            idempotency_key=request.idempotency_key,
            created_at=_now(),
        )
        self.refunds[request.idempotency_key] = refund
        return refund

    async def refunds_for(self, order_id: str) -> list[Refund]:
        return [refund for refund in self.refunds.values() if refund.order_id == order_id]


def _refuse_invalid_key(key: str) -> None:
    try:
        validate_idempotency_key(key)
    except InvalidIdempotencyKeyError as exc:
        raise PaymentRefusedError("invalid-idempotency-key", str(exc)) from None


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def placed_order(order_id: str = "o-1", amount: str = "12.5") -> OrderPlaced:
    """The order `event_message` and `stored_orders` speak of."""
    return OrderPlaced.model_validate(
        {
            "orderId": order_id,
            "customerId": "c-1",
            "currency": "EUR",
            "lines": [{"sku": "s", "quantity": 1, "unitPrice": Decimal(amount)}],
        }
    )


def event_message(order_id: str = "o-1", amount: str = "12.5") -> ReceivedOrderMessage:
    order = placed_order(order_id, amount)
    event = OrderAccepted.of(order, total_amount=amount, accepted_at=datetime.now(UTC))
    return ReceivedOrderMessage(body=event.body(), message_id=event.event_id)


def cancel_message(order_id: str = "o-1") -> ReceivedOrderMessage:
    event = OrderCancelled.of(order_id, cancelled_at=datetime.now(UTC), reason=None)
    return ReceivedOrderMessage(body=event.body(), message_id=event.event_id)


def stored_orders(
    *order_ids: str, amount: str = "12.5", charged: bool = False
) -> FakeFencedDocuments:
    """An orders container holding what the order consumer writes for each id (the order
    document and its outbox event), as `event_message` describes them; with `charged`, the
    order document also carries billing's recorded charge (what shipping waits for)."""
    orders = FakeFencedDocuments()
    for order_id in order_ids or ("o-1",):
        order = placed_order(order_id, amount)
        write = order_write(
            order,
            request_hash="h",
            message_id=order_id,
            processed_at=datetime.now(UTC),
            owner_scope=None,
        )
        order_document, event_document = write[:2]
        if charged:
            order_document = LAYOUT.order_charged(
                order_document, f"pay-{order_id}", datetime.now(UTC)
            )
        orders._stored(order_document)
        orders._stored(event_document)
    return orders


class FakeDeadLetterQueue:
    """`DeadLetterQueue` over a list: resubmitted dead letters move to `resubmitted`."""

    def __init__(self, source: Source, dead_letters: list[DeadLetter] | None = None) -> None:
        self.source = source
        self.dead_letters = list(dead_letters or [])
        self.resubmitted: list[tuple[DeadLetter, str]] = []

    async def browse(self, limit: int, from_sequence: int = 1) -> list[DeadLetter]:
        found = [d for d in self.dead_letters if d.sequence_number >= from_sequence]
        return sorted(found, key=lambda d: d.sequence_number)[:limit]

    async def resubmit(
        self,
        selection: Selection,
        refusal: Callable[[DeadLetter], str | None],
        *,
        by: str,
        now: datetime,
    ) -> DeadLetterOutcome:
        if self.source.queue is None:
            raise ResubmitUnsupportedError(f"{self.source}: resubmit at the source")
        outcome = DeadLetterOutcome()
        for dead in [d for d in self.dead_letters if selection.matches(d)]:
            why = refusal(dead)
            if why is not None:
                outcome.refused[dead.sequence_number] = why
                continue
            self.dead_letters.remove(dead)
            self.resubmitted.append((dead, by))
            outcome.done.append(dead.sequence_number)
        return outcome

    async def plan(
        self, selection: Selection, refusal: Callable[[DeadLetter], str | None]
    ) -> DeadLetterPlan:
        return plan_for(selection, self.dead_letters, refusal)

    async def purge(self, selection: Selection) -> DeadLetterOutcome:
        gone = [d for d in self.dead_letters if selection.matches(d)]
        self.dead_letters = [d for d in self.dead_letters if not selection.matches(d)]
        return DeadLetterOutcome(done=[d.sequence_number for d in gone])


@dataclass
class FakeEntityCounter:
    """`EntityCounter` answering the dead-letter queues' sizes and set active counts."""

    queues: dict[Source, FakeDeadLetterQueue]
    active: dict[Source, int] = field(default_factory=dict)

    async def count(self, source: Source, limit: int) -> EntityCounts:
        dead = min(len(self.queues[source].dead_letters), limit)
        return EntityCounts(source, min(self.active.get(source, 0), limit), 0, dead, limit)


@dataclass
class FakeDecisionFeed:
    """`DecisionFeed` over journal lines held in memory."""

    lines: list[bytes] = field(default_factory=list)

    async def counters(self) -> DecisionCounters:
        counters = DecisionCounters()
        for line in self.lines:
            counters.add_line(line)
        return counters


# --- Billing and shipping over the fake containers (the saga's unit tests share them) --------


def billing_over(
    inbox: FakeFencedDocuments, payments: FakePaymentGateway, orders: Any, **options: Any
) -> Any:
    """Billing over the fake inbox (its records) and orders (the saga's order documents);
    `options` are BillingConsumer's."""
    return BillingConsumer(
        billing_stores(inbox),
        payments,
        OrderSaga(FakeDocumentStore(orders), LAYOUT),
        LAYOUT,
        lease_seconds=60,
        **options,
    )


def shipping_over(inbox: FakeFencedDocuments, orders: FakeFencedDocuments, **options: Any) -> Any:
    """Shipping over the fake inbox and orders; `options` are ShippingConsumer's."""
    return ShippingConsumer(
        FakeDocumentStore(inbox), OrderSaga(FakeDocumentStore(orders), LAYOUT), LAYOUT, **options
    )


def shipments_in(inbox: FakeFencedDocuments) -> list[dict[str, Any]]:
    return [d for d in inbox.documents.values() if d.get("type") == "shipment"]


def fulfilment_of(orders: FakeFencedDocuments, order_id: str = "o-1") -> Fulfilment:
    order = LAYOUT.saga_order(orders.documents[(order_id, order_id)])
    assert order is not None
    return order.fulfilment
