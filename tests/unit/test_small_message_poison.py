"""The corpus of hostile events and status updates against their parsers: each case is refused
with its reason (the same list runs through real workers in tests/e2e/test_poison_fanout.py)."""

from __future__ import annotations

import json

import pytest
from poison_corpus import (
    PoisonCase,
    event_poison_cases,
    status_poison_cases,
    valid_cancel_event_document,
    valid_event_document,
    valid_status_document,
)

from orders.domain.events import parse_order_event
from orders.domain.messages import MessageRejected
from orders.domain.received import ReceivedOrderMessage
from orders.domain.status import parse_status_changed

EVENTS = event_poison_cases("u")
STATUSES = status_poison_cases("u")


def received(case: PoisonCase) -> ReceivedOrderMessage:
    return ReceivedOrderMessage(case.body, case.message_id, body_kind=case.body_kind)


@pytest.mark.parametrize("case", EVENTS, ids=[c.name for c in EVENTS])
def test_every_hostile_event_is_refused_with_its_reason(case: PoisonCase) -> None:
    with pytest.raises(MessageRejected) as caught:
        parse_order_event(received(case))
    assert caught.value.reason.value == case.reason


@pytest.mark.parametrize("case", STATUSES, ids=[c.name for c in STATUSES])
def test_every_hostile_status_update_is_refused_with_its_reason(case: PoisonCase) -> None:
    with pytest.raises(MessageRejected) as caught:
        parse_status_changed(received(case))
    assert caught.value.reason.value == case.reason


def test_the_valid_documents_the_cases_start_from_parse() -> None:
    for event in (valid_event_document("u-ok"), valid_cancel_event_document("u-ok")):
        parse_order_event(ReceivedOrderMessage(json.dumps(event).encode(), event["eventId"]))
    status = valid_status_document("u-ok")
    parse_status_changed(ReceivedOrderMessage(json.dumps(status).encode(), "u-ok:status:2"))
