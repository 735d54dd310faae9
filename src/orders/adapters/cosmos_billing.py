"""Billing's charge and refund records in Cosmos DB, as the `exactly_once` core's records.

The core's `CosmosStore` claims, takes over and completes them for `Effects.two_phase`
(`service/billing.py`) in these `RecordShape`s, which keep billing's flat documents of `type`
`billing` / `refund` (`cosmos_layout.charge_document`, `refund_document`: the console, the
audits and operators read them) as they always were: records written before billing ran on the
core read back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from azure.cosmos.aio import ContainerProxy

from exactly_once.cosmos import CosmosStore
from exactly_once.store import Record, RecordStatus
from orders.adapters.cosmos_layout import (
    BILLING_DOCUMENT_TYPE,
    REFUND_DOCUMENT_TYPE,
    charge_document,
    charge_of,
    refund_document,
    refund_of,
)
from orders.domain.inbox import (
    NO_REQUEST_HASH,
    BillingRecord,
    BillingStatus,
    RefundRecord,
    charge_claim,
    claim_field,
    refund_claim,
)
from orders.service.billing import BillingStores

# Billing's records share the inbox container, partitioned by orderId, with shipping's.
ORDER_ID = "orderId"


def billing_stores(inbox: ContainerProxy) -> BillingStores:
    """Billing's charges and refunds in the inbox container, each in its shape."""
    return BillingStores(
        charges=CosmosStore(inbox, partition_key_field=ORDER_ID, shape=ChargeRecordShape()),
        refunds=CosmosStore(inbox, partition_key_field=ORDER_ID, shape=RefundRecordShape()),
    )


_CORE_STATUS = {
    BillingStatus.IN_PROGRESS: RecordStatus.IN_PROGRESS,
    BillingStatus.COMPLETED: RecordStatus.COMPLETED,
    BillingStatus.REFUSED: RecordStatus.FAILED,
}
_BILLING_STATUS = {core: billing for billing, core in _CORE_STATUS.items()}


class _ClaimFields(TypedDict):
    """What a charge record and a refund record both hold of the core's record."""

    record_id: str
    order_id: str
    status: BillingStatus
    owner: str
    lease_seconds: float
    amount: str
    currency: str
    attempts: int


def _claim_fields(record: Record) -> _ClaimFields:
    return _ClaimFields(
        record_id=record.key,
        order_id=record.partition,
        status=_BILLING_STATUS[record.status],
        owner=record.owner,
        lease_seconds=record.lease_seconds,
        amount=claim_field(record.data, "amount"),
        currency=claim_field(record.data, "currency"),
        attempts=record.attempts,
    )


def _answer(record: Record) -> str | None:
    """The downstream's id a record holds: a refused one holds why instead, which billing's
    documents never kept (the dead letter says it)."""
    return record.result if isinstance(record.result, str) else None


def _core_record(
    stored: BillingRecord | RefundRecord,
    key: str,
    partition: str,
    *,
    downstream_key: str,
    result: str | None,
    data: dict[str, str],
) -> Record:
    """A stored charge or refund record as the core's (the store adds its stamp and expiry)."""
    return Record(
        key=key,
        partition=partition,
        request_hash=NO_REQUEST_HASH,
        status=_CORE_STATUS[stored.status],
        owner=stored.owner,
        lease_seconds=stored.lease_seconds,
        attempts=stored.attempts,
        downstream_key=downstream_key,
        result=result,
        data={**data},
    )


class ChargeRecordShape:
    """A charge's record as a `billing` document: the payment key is the downstream key, the
    payment id the result, the message id, amount and currency the claim's data."""

    record_type = BILLING_DOCUMENT_TYPE

    def fields(self, record: Record) -> dict[str, Any]:
        return charge_document(
            BillingRecord(
                **_claim_fields(record),
                message_id=claim_field(record.data, "messageId"),
                payment_key=str(record.downstream_key),
                payment_id=_answer(record),
            )
        )

    def record(self, document: Mapping[str, Any], key: str, partition: str) -> Record:
        charge = charge_of(document)
        return _core_record(
            charge,
            key,
            partition,
            downstream_key=charge.payment_key,
            result=charge.payment_id,
            data=charge_claim(charge.message_id, charge.amount, charge.currency),
        )


class RefundRecordShape:
    """A refund's record as a `refund` document: the refund key is the downstream key, the
    refund id the result, the charge's payment id, amount and currency the claim's data."""

    record_type = REFUND_DOCUMENT_TYPE

    def fields(self, record: Record) -> dict[str, Any]:
        return refund_document(
            RefundRecord(
                **_claim_fields(record),
                payment_id=claim_field(record.data, "paymentId"),
                refund_key=str(record.downstream_key),
                refund_id=_answer(record),
            )
        )

    def record(self, document: Mapping[str, Any], key: str, partition: str) -> Record:
        refund = refund_of(document)
        return _core_record(
            refund,
            key,
            partition,
            downstream_key=refund.refund_key,
            result=refund.refund_id,
            data=refund_claim(refund.payment_id, refund.amount, refund.currency),
        )
