"""Billing's charge and refund records as the `exactly_once` core's records.

Billing claims, takes over and completes them through the core's one state machine
(`exactly_once.claims.Claims`); this module is the record store it runs on: the inbox
container's fenced documents, in the shapes the store's `BillingLayout` gives them (billing's
flat documents of `type` `billing` / `refund`, which the console, the audits and operators
read).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypedDict

from exactly_once.exceptions import DocumentExistsError, RecordChangedError, RecordExistsError
from exactly_once.records import JsonInput, JsonValue, Record, RecordRead, RecordStatus, Stamp
from orders.domain.inbox import BillingRecord, BillingStatus, RefundRecord
from orders.domain.leases import StampedDocument
from orders.service.ports import BillingLayout, FencedDocuments

# Billing's records are named by message or order, never by payload: no request hash to compare.
NO_REQUEST_HASH = ""
# A record that vanishes between the create's conflict and the read is created again this often.
CLAIM_ATTEMPTS = 3

_TO_CORE = {
    BillingStatus.IN_PROGRESS: RecordStatus.IN_PROGRESS,
    BillingStatus.COMPLETED: RecordStatus.COMPLETED,
    BillingStatus.REFUSED: RecordStatus.FAILED,
}
_TO_BILLING = {core: billing for billing, core in _TO_CORE.items()}


def _field(data: JsonValue, name: str) -> str:
    if not isinstance(data, dict) or not isinstance(data.get(name), str):
        raise ValueError(f"the record's data holds no {name!r}")
    return str(data[name])


def _core_record(
    record: BillingRecord | RefundRecord,
    *,
    downstream_key: str,
    result: str | None,
    data: dict[str, JsonValue],
    stamp: Stamp | None,
) -> Record:
    """What both of billing's records hold, as the core's record."""
    return Record(
        key=record.record_id,
        partition=record.order_id,
        request_hash=NO_REQUEST_HASH,
        status=_TO_CORE[record.status],
        owner=record.owner,
        lease_seconds=record.lease_seconds,
        attempts=record.attempts,
        downstream_key=downstream_key,
        result=result,
        data=data,
        stamp=stamp,
    )


class _BillingFields(TypedDict):
    record_id: str
    order_id: str
    status: BillingStatus
    owner: str
    lease_seconds: float
    amount: str
    currency: str
    attempts: int


def _billing_fields(record: Record) -> _BillingFields:
    """What both of billing's records read off the core's record (the inverse of
    `_core_record`'s common part)."""
    return _BillingFields(
        record_id=record.key,
        order_id=record.partition,
        status=_TO_BILLING[record.status],
        owner=record.owner,
        lease_seconds=record.lease_seconds,
        amount=_field(record.data, "amount"),
        currency=_field(record.data, "currency"),
        attempts=record.attempts,
    )


def charge_record(charge: BillingRecord, stamp: Stamp | None = None) -> Record:
    """A charge's record as the core's: the payment key is the downstream key, the payment id
    the result, the message id, amount and currency what the claim carries."""
    return _core_record(
        charge,
        downstream_key=charge.payment_key,
        result=charge.payment_id,
        data={"messageId": charge.message_id, "amount": charge.amount, "currency": charge.currency},
        stamp=stamp,
    )


def as_charge(record: Record) -> BillingRecord:
    """The core's record as billing's charge record."""
    return BillingRecord(
        **_billing_fields(record),
        message_id=_field(record.data, "messageId"),
        payment_key=str(record.downstream_key),
        payment_id=str(record.result) if record.result is not None else None,
    )


def refund_record(refund: RefundRecord, stamp: Stamp | None = None) -> Record:
    """A refund's record as the core's: the refund key is the downstream key, the refund id
    the result, the charge's payment id, amount and currency what the claim carries."""
    return _core_record(
        refund,
        downstream_key=refund.refund_key,
        result=refund.refund_id,
        data={"paymentId": refund.payment_id, "amount": refund.amount, "currency": refund.currency},
        stamp=stamp,
    )


def as_refund(record: Record) -> RefundRecord:
    """The core's record as billing's refund record."""
    return RefundRecord(
        **_billing_fields(record),
        payment_id=_field(record.data, "paymentId"),
        refund_key=str(record.downstream_key),
        refund_id=str(record.result) if record.result is not None else None,
    )


class FencedRecords:
    """The core's `RecordStore` over billing's fenced documents, in one of billing's shapes."""

    def __init__(
        self,
        documents: FencedDocuments,
        to_document: Callable[[Record], dict[str, Any]],
        from_document: Callable[[StampedDocument], Record],
    ) -> None:
        self._documents = documents
        self._to_document = to_document
        self._from_document = from_document

    @classmethod
    def charges(cls, documents: FencedDocuments, layout: BillingLayout) -> FencedRecords:
        """Charge records, in the layout's shape. The version the fenced-documents port hands
        over apart (ETag and write time) becomes the core record's stamp: billing's records
        never see it."""
        return cls(
            documents,
            lambda record: layout.charge_document(as_charge(record)),
            lambda stored: charge_record(layout.charge_of(stored.body), stored.stamp),
        )

    @classmethod
    def refunds(cls, documents: FencedDocuments, layout: BillingLayout) -> FencedRecords:
        """Refund records, in the layout's shape (stamped like the charges)."""
        return cls(
            documents,
            lambda record: layout.refund_document(as_refund(record)),
            lambda stored: refund_record(layout.refund_of(stored.body), stored.stamp),
        )

    async def claim(self, record: Record) -> Record:
        """Create the record (the create is the lock); a taken key raises the core's
        `RecordExistsError` with the stored record and the database's time."""
        for _ in range(CLAIM_ATTEMPTS):
            try:
                return self._from_document(await self._documents.create(self._to_document(record)))
            except DocumentExistsError:
                pass
            found = await self._documents.read(record.key, record.partition)
            if found.document is not None:
                raise RecordExistsError(self._from_document(found.document), found.database_now_ms)
            # Deleted between our create and the read (an operator's cleanup): create again.
        raise RecordChangedError(f"{record.key!r} kept appearing and vanishing")

    async def read(self, key: str, partition: str) -> RecordRead:
        """The stored record (or None) and the database's time, in one request."""
        found = await self._documents.read(key, partition)
        record = self._from_document(found.document) if found.document is not None else None
        return RecordRead(record, found.database_now_ms)

    async def take_over(self, existing: Record, owner: str, lease_seconds: float) -> Record:
        """Claim `existing` for `owner`, If-Match its ETag."""
        return await self._replace(existing.owned_by(owner, lease_seconds), existing)

    async def complete(
        self, owned: Record, result: JsonInput, status: RecordStatus = RecordStatus.COMPLETED
    ) -> Record:
        """Mark the owned record done (or refused) with `result`, If-Match its ETag."""
        stored_result: JsonValue = json.loads(json.dumps(result))
        return await self._replace(replace(owned, status=status, result=stored_result), owned)

    async def release(self, owned: Record) -> None:
        """Delete the owned record, If-Match its ETag, so the next claim starts afresh; moved
        on or gone, there is nothing of ours to release (as the core's CosmosStore). Billing
        itself never releases: after a failed call its owner's redelivery goes on at once
        inside the lease, and any other waits the lease out, under the same downstream key."""
        if owned.stamp is None:
            raise ValueError(f"record {owned.key!r} was never written: nothing to match")
        with contextlib.suppress(RecordChangedError):
            await self._documents.delete(owned.key, owned.partition, etag=owned.stamp.etag)

    async def _replace(self, record: Record, fence: Record) -> Record:
        if fence.stamp is None:
            raise ValueError(f"record {fence.key!r} was never written: nothing to match")
        stored = await self._documents.replace(self._to_document(record), etag=fence.stamp.etag)
        return self._from_document(stored)
