"""A consumer the guide does not show, written from the guide, shared by the tests that run it
in-process (test_any_consumer.py) and by the drill's worker processes (invoice_drill_worker.py):
`InvoiceIssued` writes an invoice and a ledger entry into the customer's partition
(`effects.inbox`: a partition the payload names, not the key's), and a second consumer e-mails
the invoice through `two_phase` with a downstream key of its own."""

from __future__ import annotations

import json
from typing import Protocol

from pydantic import BaseModel

from exactly_once import ConsumerOptions, Effects, ExactlyOnceConsumer, Outcome, Store, exactly_once
from exactly_once.store import JsonMapping

INVOICING, INVOICE_EMAILS = "invoicing", "invoice-emails"


class InvoiceIssued(BaseModel):
    invoice_id: str
    customer_id: str
    amount_cents: int


def parse_invoice(body: bytes) -> InvoiceIssued:
    return InvoiceIssued.model_validate_json(body)


def invoice(invoice_id: str, customer_id: str, amount_cents: int = 1200) -> bytes:
    body = {"invoice_id": invoice_id, "customer_id": customer_id, "amount_cents": amount_cents}
    return json.dumps(body).encode()


def mail_key(invoice_id: str) -> str:
    """The downstream key the e-mail consumer gives the provider for an invoice."""
    return f"invoice-mail:{invoice_id}"


def mail_text(invoice: InvoiceIssued) -> str:
    return f"invoice {invoice.invoice_id}: {invoice.amount_cents} cents"


class Mailer(Protocol):
    """An e-mail provider that deduplicates on the key it is given (what `two_phase` needs)."""

    async def send(self, key: str, to: str, text: str) -> str: ...


def invoice_consumers(
    store: Store, mailer: Mailer, options: ConsumerOptions[InvoiceIssued] | None = None
) -> tuple[ExactlyOnceConsumer[InvoiceIssued], ExactlyOnceConsumer[InvoiceIssued]]:
    """(the invoicing consumer, the e-mail consumer); `options` go to both `exactly_once`s."""

    @exactly_once(consumer=INVOICING, parse=parse_invoice, store=store, options=options)
    async def issue_invoice(invoice: InvoiceIssued, effects: Effects) -> Outcome:
        documents: list[JsonMapping] = [
            {"id": f"invoice-{invoice.invoice_id}", "amountCents": invoice.amount_cents},
            {"id": f"ledger-{invoice.invoice_id}", "debitCents": invoice.amount_cents},
        ]
        return await effects.inbox(invoice.customer_id, documents)

    @exactly_once(consumer=INVOICE_EMAILS, parse=parse_invoice, store=store, options=options)
    async def email_invoice(invoice: InvoiceIssued, effects: Effects) -> Outcome:
        async def call(downstream_key: str) -> str:
            return await mailer.send(downstream_key, invoice.customer_id, mail_text(invoice))

        done = await effects.two_phase(call, downstream_key=mail_key(invoice.invoice_id))
        return done.outcome

    return issue_invoice, email_invoice
