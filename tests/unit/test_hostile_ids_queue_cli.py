"""A hostile producer's ids on the queue, and the CLI's: refused at intake by the one id grammar.

A producer that skips the API sends its order straight to the queue, the hostile id as orderId
and MessageId: the consumer dead-letters it on its first delivery as `InvalidId`, names the rule,
stores nothing (so no event is ever published for billing and shipping to disagree about). The
CLI refuses a run id that would make such ids before it reaches any server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import LAYOUT, FakeOrderStore, RecordingSettler, order_payload
from typer.testing import CliRunner

from exactly_once.decisions import Outcome
from orders.cli import app
from orders.domain.ids import ID_RULE
from orders.domain.load_plan import LoadMix, plan_load
from orders.domain.received import ReceivedOrderMessage
from orders.service.consumer import OrderConsumer

HOSTILE_IDS = [" abc", "a\u00a0b", "a\u200bb"]


@pytest.mark.parametrize("order_id", HOSTILE_IDS)
async def test_a_hostile_id_on_the_queue_is_dead_lettered_on_its_first_delivery(
    order_id: str,
) -> None:
    store = FakeOrderStore()
    settler = RecordingSettler()
    message = ReceivedOrderMessage(
        body=json.dumps(order_payload(order_id)).encode(), message_id=order_id, delivery_count=0
    )

    decision = await OrderConsumer(store, LAYOUT).handle_and_settle(message, settler)

    assert decision.outcome is Outcome.REJECTED
    [(action, details)] = settler.calls
    assert action == "dead_letter"
    assert details["reason"] == "InvalidId"
    assert ID_RULE in details["description"]
    assert store.partitions == {}  # nothing stored: no event, no charge, no shipment


@pytest.mark.parametrize("run_id", [" abc", "a\u00a0b", "a\u200bb", "r" * 52])
def test_orders_load_refuses_a_run_id_outside_the_id_rule_before_sending(
    tmp_path: Path, run_id: str
) -> None:
    manifest = tmp_path / "manifest.json"

    result = CliRunner().invoke(app, ["load", "--manifest", str(manifest), "--run-id", run_id])

    assert result.exit_code == 2, result.output
    assert "--run-id" in result.output
    assert "id rule" in " ".join(result.output.split())
    assert not manifest.exists()


def test_the_longest_run_id_makes_only_ids_in_the_rule() -> None:
    plan = plan_load(3, LoadMix(poison=1.0), seed=1, run_id="r" * 51)

    assert all(len(send.message_id) <= 64 for send in plan.sends)
