"""A bare eventId refused after the cut-over the operator sets (issue 46, item 5).

Before the nonce the dispatcher published every event under its bare eventId, which any sender
can guess; billing and shipping still took it, for the outbox documents written then. Once
those are consumed, the operator sets `BARE_EVENT_ID_CUTOVER`: an event the broker took in at
or after it must carry its nonce, or billing and shipping dead-letter it on its first delivery
(`MessageIdMismatch`) and act on nothing. The message is the SDK's own, its enqueued time the
broker's annotation, read through the app's adapter; billing and shipping run over fakes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusReceivedMessage
from fakes import (
    FakeFencedDocuments,
    FakePaymentGateway,
    billing_over,
    event_message,
    shipments_in,
    shipping_over,
    stored_orders,
)
from sdk_messages import received_message

from exactly_once.decisions import Outcome, Settlement
from orders.adapters.servicebus import to_received_order_message
from orders.domain.events import BareEventIdCutover, new_event_message_id
from orders.settings import Settings, SettingsError

CUTOVER = datetime(2026, 12, 1, tzinfo=UTC)
AFTER = BareEventIdCutover(CUTOVER)


def sent(message_id: str, taken_in: datetime | None) -> ServiceBusReceivedMessage:
    """o-1's OrderAccepted as the broker delivers it, under `message_id`."""
    body = event_message().body
    return received_message(message_id, data=body, enqueued_time=taken_in)


def event_id() -> str:
    return str(json.loads(event_message().body)["eventId"])


async def test_billing_refuses_a_bare_event_id_taken_in_after_the_cutover_and_charges_nothing() -> (
    None
):
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    forged = sent(event_id(), CUTOVER + timedelta(seconds=1))

    decision = await billing_over(inbox, payments, orders, bare_event_ids=AFTER).handle(
        to_received_order_message(forged)
    )

    assert (decision.settlement, decision.dead_letter_reason) == (
        Settlement.DEAD_LETTER,
        "MessageIdMismatch",
    )
    assert "BARE_EVENT_ID_CUTOVER" in (decision.dead_letter_description or "")
    assert payments.requests == []


async def test_shipping_refuses_it_too_and_ships_nothing() -> None:
    orders, inbox = stored_orders("o-1", charged=True), FakeFencedDocuments()
    forged = sent(event_id(), CUTOVER)  # at the cut-over itself: refused

    decision = await shipping_over(inbox, orders, bare_event_ids=AFTER).handle(
        to_received_order_message(forged)
    )

    assert decision.dead_letter_reason == "MessageIdMismatch"
    assert shipments_in(inbox) == []


@pytest.mark.parametrize(
    ("message_id", "taken_in"),
    [
        ("nonce", CUTOVER + timedelta(days=1)),  # an event under its nonce, any time
        ("bare", CUTOVER - timedelta(seconds=1)),  # published before the cut-over
    ],
)
async def test_billing_still_takes_an_event_with_its_nonce_or_a_bare_one_taken_in_before(
    message_id: str, taken_in: datetime
) -> None:
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()
    named = new_event_message_id(event_id()) if message_id == "nonce" else event_id()

    decision = await billing_over(inbox, payments, orders, bare_event_ids=AFTER).handle(
        to_received_order_message(sent(named, taken_in))
    )

    assert (decision.outcome, decision.settlement) == (Outcome.PROCESSED, Settlement.COMPLETE)
    assert len(payments.requests) == 1


async def test_without_a_cutover_a_bare_event_id_is_still_taken() -> None:
    orders, inbox, payments = stored_orders("o-1"), FakeFencedDocuments(), FakePaymentGateway()

    decision = await billing_over(inbox, payments, orders).handle(
        to_received_order_message(sent(event_id(), datetime.now(UTC)))
    )

    assert decision.outcome is Outcome.PROCESSED


def test_an_unknown_enqueued_time_is_judged_by_the_time_of_processing() -> None:
    """A host that does not say when the broker took the message in: now decides."""
    assert (
        BareEventIdCutover(datetime.now(UTC) - timedelta(minutes=1)).allows_bare(datetime.now(UTC))
        is False
    )
    assert to_received_order_message(sent(event_id(), None)).enqueued_time is None


# --- the setting ------------------------------------------------------------------------------

BASE = {"COSMOS_ENDPOINT": "https://example.documents.azure.com:443/"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("2026-12-01T00:00:00Z", CUTOVER),
        ("2026-12-01T01:00:00+01:00", CUTOVER),
    ],
)
def test_the_cutover_setting_is_an_iso_time_with_its_offset(
    text: str, expected: datetime | None
) -> None:
    settings = Settings.from_env({**BASE, "BARE_EVENT_ID_CUTOVER": text})
    assert settings.bare_event_id_cutover == expected


@pytest.mark.parametrize("text", ["2026-12-01T00:00:00", "yesterday", "2026-13-01T00:00:00Z"])
def test_a_cutover_without_an_offset_or_not_a_time_is_refused_at_start(text: str) -> None:
    with pytest.raises(SettingsError, match="BARE_EVENT_ID_CUTOVER"):
        Settings.from_env({**BASE, "BARE_EVENT_ID_CUTOVER": text})
