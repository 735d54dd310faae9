"""The HTTP intake's records on Cosmos DB (container partitioned by /id, per-item ttl).

Key records run on the `exactly_once` core's one Cosmos implementation (`CosmosStore`): the
create is the claim, every later write is If-Match the claimant's ETag, and a lease is judged
by the database's clock (the record's `_ts` against `GetCurrentTimestamp()`). An orderId's
claim is a document the core creates or compares (`create_or_find`, through the store's
`create_all` and `get`). This module adds only the layout the console, `orders keys` and GET
read (`IntakeRecordShape`), the orderId claim's document, and the lookups GET and operators
need.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from azure.cosmos import exceptions as cosmos_errors
from azure.cosmos.aio import ContainerProxy

from exactly_once import CosmosStore
from exactly_once.cosmos import claim_fields, store_errors
from exactly_once.store import DocumentCreator, Record, RecordRead, RecordStatus, create_or_find
from orders.adapters.cosmos_client import idempotency_container
from orders.adapters.process_clients import given_or_own
from orders.domain.idempotency import (
    PLACE_OPERATION,
    KeyRecord,
    OrderIdClaim,
    core_store_errors,
)
from orders.settings import Settings

RECORD_DOCUMENT_TYPE = "idempotencyRecord"
ORDER_CLAIM_DOCUMENT_TYPE = "orderIdClaim"


class IntakeRecordShape:
    """A key's record as the intake has always stored it: flat `scope`, `key`, `orderId` and
    the first answer under `response`, beside the core's claim fields (`owner`,
    `leaseSeconds`, `attempts`).

    Records written before the core judged leases carry `leaseExpiresAt` (the claimant's clock)
    instead of `owner` and `leaseSeconds`; they are read as an unnamed owner's claim whose lease
    runs from their `_ts` to that time, so a key claimed just before an upgrade is still
    protected, and replayed once completed, within its TTL."""

    record_type = RECORD_DOCUMENT_TYPE

    def fields(self, record: Record) -> dict[str, Any]:
        data = KeyRecord.of(record)
        return {
            "scope": data.scope,
            "key": data.key,
            "orderId": data.order_id,
            **({"operation": data.operation} if data.operation != PLACE_OPERATION else {}),
            **claim_fields(record),
            "response": record.result,
        }

    def record(self, document: Mapping[str, Any], key: str, partition: str) -> Record:
        lease_seconds = document.get("leaseSeconds")
        if lease_seconds is None:  # written before the database's clock judged leases
            written_at_s = int(document.get("_ts", 0))
            legacy_end = float(document.get("leaseExpiresAt", 0.0))
            lease_seconds = max(0.0, legacy_end - (written_at_s + 1))
        return Record(
            key=key,
            partition=partition,
            request_hash=str(document["requestHash"]),
            status=RecordStatus(document["status"]),
            owner=str(document.get("owner") or ""),
            lease_seconds=float(lease_seconds),
            attempts=int(document.get("attempts", 1)),
            result=document.get("response"),
            data={
                "scope": str(document["scope"]),
                "key": str(document["key"]),
                "orderId": str(document["orderId"]),
                **({"operation": str(document["operation"])} if "operation" in document else {}),
            },
        )


def order_claim_id(order_id: str) -> str:
    # Record ids are SHA-256 hex, so the prefix keeps the two kinds of id apart.
    return f"order:{order_id}"


def order_claim_document(claim: OrderIdClaim) -> dict[str, Any]:
    """The claim as claims have always been stored; its `requestHash` is what the core's
    `create_or_find` compares."""
    return {
        "id": order_claim_id(claim.order_id),
        "type": ORDER_CLAIM_DOCUMENT_TYPE,
        "orderId": claim.order_id,
        "requestHash": claim.request_hash,
        "ownerScope": claim.owner_scope,
    }


def order_claim(document: Mapping[str, Any]) -> OrderIdClaim:
    return OrderIdClaim(
        order_id=str(document["orderId"]),
        request_hash=str(document["requestHash"]),
        owner_scope=document.get("ownerScope"),
    )


async def claim_order_id(documents: DocumentCreator, claim: OrderIdClaim) -> OrderIdClaim | None:
    """The claim created (None), or the claim stored first with the same request hash; the
    core's `PayloadMismatchError` when it holds another. The core's create-or-compare: one
    create (a one-document batch in the claim's own partition), a point read on a conflict."""
    document_id = order_claim_id(claim.order_id)
    with core_store_errors():
        _, first = await create_or_find(
            documents, document_id, order_claim_document(claim), request_hash=claim.request_hash
        )
    return None if first is None else order_claim(first.body)


class CosmosIdempotencyStore(CosmosStore):
    """`IdempotencyStore`: the core's `CosmosStore` over the intake's container (partitioned by
    `/id`, so every record and claim is a point), in the intake's shape, plus the lookups of
    GET and operators."""

    def __init__(self, container: ContainerProxy) -> None:
        super().__init__(container, partition_key_field="id", shape=IntakeRecordShape())
        self._documents = container

    async def claim_order_id(self, claim: OrderIdClaim) -> OrderIdClaim | None:
        return await claim_order_id(self, claim)

    async def read_order_id_claim(self, order_id: str) -> OrderIdClaim | None:
        document_id = order_claim_id(order_id)
        with core_store_errors():
            stored = await self.get(document_id, document_id)
        return order_claim(stored.body) if stored is not None else None

    async def find_order(self, scope: str, order_id: str) -> KeyRecord | None:
        # Placing records only (a cancel's record has `operation`). Cross-partition, but only
        # GET of an order that is not stored yet pays for it.
        query = (
            "SELECT * FROM c WHERE c.type = @type AND c.orderId = @orderId "
            "AND c.scope = @scope AND c.status = @status AND NOT IS_DEFINED(c.operation)"
        )
        parameters: list[dict[str, Any]] = [
            {"name": "@type", "value": RECORD_DOCUMENT_TYPE},
            {"name": "@orderId", "value": order_id},
            {"name": "@scope", "value": scope},
            {"name": "@status", "value": RecordStatus.COMPLETED.value},
        ]
        with store_errors():
            async for document in self._documents.query_items(query, parameters=parameters):
                identifier = str(document["id"])
                return KeyRecord.of(IntakeRecordShape().record(document, identifier, identifier))
        return None

    async def read_key(self, record_id: str) -> RecordRead:
        """A key's record as stored, with the database's time (operators' `orders keys`)."""
        with core_store_errors():
            return await self.read(record_id, record_id)

    def document(self, record: Record) -> dict[str, Any]:
        """A key's record as stored (its shape, `id`, `ttl` and ETag): what operators see."""
        document = self._record_document(record)
        if record.stamp is not None:
            document["_etag"] = record.stamp.etag
        return document

    async def evict(self, record_id: str) -> bool:
        """Delete a key's record whatever its state; False when there was none."""
        with store_errors():
            try:
                await self._documents.delete_item(item=record_id, partition_key=record_id)
            except cosmos_errors.CosmosResourceNotFoundError:
                return False
        return True


@asynccontextmanager
async def idempotency_key_tools(settings: Settings) -> AsyncIterator[CosmosIdempotencyStore]:
    """What `orders keys` works with: Cosmos DB alone, so it works while Service Bus is down."""
    async with AsyncExitStack() as stack:
        cosmos = await given_or_own(stack, settings, None).cosmos(create_local_resources=False)
        yield CosmosIdempotencyStore(idempotency_container(cosmos, settings))
