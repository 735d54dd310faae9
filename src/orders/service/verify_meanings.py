"""What each figure of the audit counts, in a few words: printed beside the figure wherever the
report is shown (`orders verify`, the demo's text and HTML reports), so a newcomer can read a
figure such as "billing: effects / expected 280 / 270" without the source."""

from __future__ import annotations

# The report's own fields, by their JSON names.
CHECK_MEANINGS = {
    "ok": "every check below passed",
    "run_id": "the load run audited: its messages carry this id",
    "sent": "messages the load sent: orders, redeliveries, conflicts and poison",
    "unique_orders": "distinct orderIds among them",
    "orders_in_store": "of those, orders stored (must equal the orders that should be)",
    "duplicate_orders": "orders stored more than once (must be 0)",
    "missing_orders": "orders that should be stored and are not (must be 0)",
    "dead_lettered": "this run's messages in the orders dead-letter queue",
    "expected_dead_letters": "of them, the ones the load meant to be refused (poison, conflicts)",
    "unexpected_dead_letters": "dead letters the load did not plan (must be 0)",
    "stored_first_payload": "orders stored with the first payload sent for their id",
    "stored_conflicting_payload": "orders stored with a later, conflicting payload (must be 0)",
    "rejections_recorded": "rejection notes filed, which GET shows for a refused order",
}
CONFLICT_MEANINGS = {
    "sent": "a payload reused for an orderId within the broker's duplicate window",
    "dropped_by_broker": "of them, dropped by duplicate detection before any consumer saw them",
    "dead_lettered": "of them, refused by the consumer as a mismatch",
}
# Each fan-out consumer's audit; `effects` counts differently per consumer.
CONSUMER_MEANINGS = {
    "ok": "this consumer's checks passed",
    "expected": "stored orders not cancelled: each must have exactly one effect",
    "doubled": "orders with more than one effect, or a charge of the wrong amount (must be 0)",
    "missing": "orders not cancelled that have no effect (must be 0)",
    "stuck_in_progress": "records left half done, a charge begun and never finished (must be 0)",
}
EFFECT_MEANINGS = {
    "billing": "charges at the payment service for this run's orders, cancelled ones included "
    "(an order charged before its cancel is refunded, so effects may exceed expected)",
    "shipping": "shipments for the orders not cancelled",
}
DEFAULT_EFFECT_MEANING = "effects this consumer wrote for this run's orders"
STATUS_MEANINGS = {
    "ok": "the status checks passed",
    "sent": "status messages the load sent, duplicates included",
    "distinct_updates": "distinct (order, version) updates, the producers' paid and shipped too",
    "applied": "updates that changed a status (each order's history keeps them)",
    "stale": "updates that arrived after a newer version: the status kept, the history "
    "records them in place",
    "illegal_sent": "updates sent that no order can reach (strays)",
    "illegal_dead_lettered": "updates dead-lettered as illegal (at least the strays)",
    "final_state_mismatches": "orders not at their highest legal version (must be 0)",
}


def effect_meaning(consumer: str) -> str:
    return EFFECT_MEANINGS.get(consumer, DEFAULT_EFFECT_MEANING)
