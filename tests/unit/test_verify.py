"""The audit, against a plan replayed through the real core and the fake store."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from fakes import LAYOUT, FakeOrderStore

from exactly_once.decisions import Settlement
from orders.domain.dead_letters import DeadLetteredMessage
from orders.domain.load_plan import LoadMix, LoadPlan, SendKind, plan_load
from orders.domain.received import ReceivedOrderMessage
from orders.service.consumer import OrderConsumer
from orders.service.verify import audit
from orders.service.verify_run import RunRecords, audit_run

BROKER_DROPS = {SendKind.PRODUCER_RETRY, SendKind.CONFLICT_IN_WINDOW}


def replay(
    plan: LoadPlan, *, conflicts_first: bool = False, broker_drops: set[SendKind] = BROKER_DROPS
) -> tuple[list[dict[str, Any]], list[DeadLetteredMessage]]:
    """What an honest pipeline leaves behind: the broker drops what arrives inside its window
    with a MessageId it has seen (producer retries, and conflicts sent inside the window)."""
    store = FakeOrderStore()
    consumer = OrderConsumer(store, LAYOUT)
    dead: list[DeadLetteredMessage] = []
    sends = [s for s in plan.sends if s.kind not in broker_drops]
    if conflicts_first:
        sends.sort(key=lambda s: s.kind is not SendKind.CONFLICT)

    async def run() -> None:
        for send in sends:
            decision = await consumer.handle(
                ReceivedOrderMessage(send.body.encode(), send.message_id)
            )
            if decision.settlement is Settlement.DEAD_LETTER:
                dead.append(
                    DeadLetteredMessage(
                        send.message_id,
                        decision.dead_letter_reason,
                        decision.dead_letter_description,
                        send.body.encode(),
                    )
                )

    asyncio.run(run())
    documents = [doc for pk in store.partitions for doc in store.documents(pk)]
    return documents, dead


PLAN = plan_load(60, LoadMix(), seed=11, run_id="audit")


def test_an_honest_run_passes() -> None:
    documents, dead = replay(PLAN)

    report = audit(PLAN, LAYOUT.stored_run(documents), dead)

    assert report.violations == []
    assert report.ok and report.unique_orders == 60 and report.orders_in_store == 60
    assert report.dead_lettered == report.expected_dead_letters > 0
    assert report.stored_first_payload == 60
    # Every consumer-decided rejection left its note for GET.
    assert report.rejections_recorded == report.expected_dead_letters


def test_conflicts_inside_the_window_are_reported_apart_as_dropped_by_the_broker() -> None:
    in_window = sum(1 for s in PLAN.sends if s.kind is SendKind.CONFLICT_IN_WINDOW)
    documents, dead = replay(PLAN)

    report = audit(PLAN, LAYOUT.stored_run(documents), dead)

    assert in_window > 0
    assert report.conflicts_in_window == {
        "sent": in_window,
        "dropped_by_broker": in_window,
        "dead_lettered": 0,
    }


def test_a_conflict_inside_the_window_that_got_through_is_an_allowed_mismatch() -> None:
    documents, dead = replay(PLAN, broker_drops={SendKind.PRODUCER_RETRY})

    report = audit(PLAN, LAYOUT.stored_run(documents), dead)

    assert report.ok, report.violations
    assert report.conflicts_in_window["dead_lettered"] == report.conflicts_in_window["sent"] > 0
    assert report.conflicts_in_window["dropped_by_broker"] == 0


def test_a_rejection_record_nobody_expected_is_reported() -> None:
    documents, dead = replay(PLAN)
    stray = {
        "id": "audit-000001:rejection:abc",
        "orderId": "audit-000001",
        "type": "orderRejection",
        "messageId": "audit-000001",
        "reason": "SchemaViolation",
    }

    report = audit(PLAN, LAYOUT.stored_run([*documents, stray]), dead)

    assert not report.ok
    assert "unexpected rejection record 'audit-000001:rejection:abc'" in report.violations


def test_a_conflicting_payload_that_won_the_race_is_accepted_when_the_first_is_dead_lettered() -> (
    None
):
    documents, dead = replay(PLAN, conflicts_first=True)

    report = audit(PLAN, LAYOUT.stored_run(documents), dead)

    assert report.ok, report.violations
    assert report.stored_conflicting_payload == sum(
        1 for s in PLAN.sends if s.kind is SendKind.CONFLICT
    )


def test_a_lost_order_is_reported() -> None:
    documents, dead = replay(PLAN)
    lost = next(d["orderId"] for d in documents if d["type"] == "order")
    documents = [d for d in documents if d["orderId"] != lost]

    report = audit(PLAN, LAYOUT.stored_run(documents), dead)

    assert not report.ok and report.missing_orders == 1
    assert f"order {lost} was sent but is not stored" in report.violations


def test_a_doubled_order_and_an_orphan_line_are_reported() -> None:
    documents, dead = replay(PLAN)
    order = next(d for d in documents if d["type"] == "order")
    doubled = copy.deepcopy(order)
    orphan = {"id": "audit-999999:line:001", "orderId": "audit-999999", "type": "orderLine"}

    report = audit(PLAN, LAYOUT.stored_run([*documents, doubled, orphan]), dead)

    assert report.duplicate_orders == 1
    assert any("stored 2 times" in v for v in report.violations)
    assert any("without their order" in v for v in report.violations)


def test_an_extra_line_is_a_doubled_effect() -> None:
    documents, dead = replay(PLAN)
    line = next(d for d in documents if d["type"] == "orderLine")
    extra = {**line, "id": line["id"] + "-again", "lineNumber": 99}

    report = audit(PLAN, LAYOUT.stored_run([*documents, extra]), dead)

    assert not report.ok and report.duplicate_orders == 1


def test_missing_and_unexplained_dead_letters_are_reported() -> None:
    documents, dead = replay(PLAN)
    stranger = DeadLetteredMessage("audit-000001", "MaxDeliveryCountExceeded", "", b"{}")

    report = audit(PLAN, LAYOUT.stored_run(documents), [*dead[1:], stranger])

    assert report.unexpected_dead_letters == 1
    assert any("is missing" in v for v in report.violations)
    assert any("MaxDeliveryCountExceeded" in v for v in report.violations)


def test_dead_letters_of_other_runs_are_ignored() -> None:
    documents, dead = replay(PLAN)
    other = DeadLetteredMessage("otherrun-000001", "InvalidJson", "", b"x")

    assert audit(PLAN, LAYOUT.stored_run(documents), [*dead, other]).ok


def test_the_whole_run_audit_reports_a_malformed_line_instead_of_failing() -> None:
    # `orders verify` reads the run twice: the integrity audit's tolerant read, and the typed
    # partitions the saga and status audits decide on. A line missing its fields is the
    # integrity audit's finding; the typed read must not stop the report before it is made.
    documents, dead = replay(PLAN)
    orphan = {"id": "audit-999999:line:001", "orderId": "audit-999999", "type": "orderLine"}
    line = next(d for d in documents if d["type"] == "orderLine")
    broken = {key: value for key, value in line.items() if key != "sku"}
    documents = [d for d in documents if d is not line]

    report = audit_run(PLAN, RunRecords([*documents, broken, orphan], dead), LAYOUT)

    assert not report.ok
    assert any("without their order" in v for v in report.violations)
    assert any(f"order {line['orderId']} has lines" in v for v in report.violations)
