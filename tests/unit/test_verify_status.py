"""The status audit over plain data: the final version is the highest legal one."""

from __future__ import annotations

from typing import Any

from fakes import LAYOUT

from orders.domain.dead_letters import DeadLetteredMessage
from orders.domain.load_plan import LoadMix, StatusKind, plan_load
from orders.domain.status import status_message_id
from orders.service.verify_status import audit_statuses, produced_updates

PLAN = plan_load(20, LoadMix(), seed=4, run_id="vs", status_updates=True, reorder=True)


def settled_documents(
    lose: str | None = None,
) -> tuple[list[dict[str, Any]], list[DeadLetteredMessage]]:
    """What a correct status consumer leaves: each order at its highest legal version."""
    documents, dead = [], []
    versions: dict[str, list[int]] = {}
    for update in PLAN.status_updates:
        if update.kind is StatusKind.ILLEGAL:
            dead.append(DeadLetteredMessage(update.message_id, "IllegalStatusTransition", "", b""))
        elif update.kind is StatusKind.UPDATE:
            versions.setdefault(update.order_id, []).append(update.version)
    for order_id, applied in versions.items():
        top = max(applied) - (1 if order_id == lose else 0)
        # the audit reads versions and history; a status document and its entries always name
        # a status too (which one does not matter to the audit)
        history = [{"status": "paid", "version": v, "at": "t"} for v in sorted(applied)]
        documents.append(
            {
                "orderId": order_id,
                "type": "orderStatus",
                "status": "paid",
                "version": top,
                "history": history,
            }
        )
    return documents, dead


def test_a_settled_run_passes() -> None:
    documents, dead = settled_documents()
    found = audit_statuses(PLAN, LAYOUT.order_partitions(documents), dead, produced=set())
    assert found.ok and found.final_state_mismatches == 0
    assert found.illegal_dead_lettered == found.illegal_sent > 0
    assert found.stale == found.distinct_updates - found.applied - found.illegal_dead_lettered


def test_a_lost_update_is_a_final_state_mismatch() -> None:
    victim = PLAN.status_updates[0].order_id
    documents, dead = settled_documents(lose=victim)
    found = audit_statuses(PLAN, LAYOUT.order_partitions(documents), dead, produced=set())
    assert not found.ok and found.final_state_mismatches == 1


def test_an_illegal_update_not_dead_lettered_fails() -> None:
    documents, dead = settled_documents()
    found = audit_statuses(PLAN, LAYOUT.order_partitions(documents), dead[1:], produced=set())
    assert not found.ok


def test_producers_updates_count_and_their_dead_letters_are_honoured() -> None:
    documents, dead = settled_documents()
    order_id = documents[0]["orderId"]
    produced = produced_updates({order_id}, billing=True, shipping=True)
    assert produced == {(order_id, 2), (order_id, 3)}
    # Shipped (3) dead-lettered for this order: it must not be expected as its final state.
    dead.append(
        DeadLetteredMessage(status_message_id(order_id, 3), "IllegalStatusTransition", "", b"")
    )
    found = audit_statuses(PLAN, LAYOUT.order_partitions(documents), dead, produced)
    assert found.illegal_dead_lettered == found.illegal_sent + 1  # the producer's, counted
    assert found.final_state_mismatches == 0  # every path here ends above version 3

    without_producers = audit_statuses(PLAN, LAYOUT.order_partitions(documents), dead[:-1], set())
    assert found.distinct_updates - without_producers.distinct_updates == len(
        produced - {(u.order_id, u.version) for u in PLAN.status_updates}
    )


def test_a_change_recorded_late_in_the_history_counts_as_stale_not_applied() -> None:
    documents, dead = settled_documents()
    before = audit_statuses(PLAN, LAYOUT.order_partitions(documents), dead, produced=set())
    history = documents[0]["history"]
    history[0] = {**history[0], "late": True}  # it arrived after a newer version was applied

    after = audit_statuses(PLAN, LAYOUT.order_partitions(documents), dead, produced=set())

    assert before.applied > 0
    assert (after.applied, after.stale) == (before.applied - 1, before.stale + 1)
