"""The order saga for real: cancels at every point through the API's core, billing refunding,
shipping skipping, crash drills of every process that takes part, and the verifier's
invariants (every counter 0) as the user runs them.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from e2e_support import new_plan, orders_cli, send

from orders.bootstrap import send_cancels, verify_run
from orders.domain.load_plan import (
    CancelPoint,
    LoadMix,
    LoadPlan,
    PlannedCancel,
    plan_from_json,
    plan_load,
)
from orders.entrypoints.demo import VERIFY_POLL_SECONDS, wait_for_audit
from orders.entrypoints.localstack import LocalStack, ManagedProcess
from orders.entrypoints.worker import CRASH_AFTER_REFUND_ENV, CRASH_EXIT_CODE
from orders.service.cancels import CancelResults
from orders.service.registry import BILLING, CONSUMERS, SHIPPING, STATUS
from orders.service.verify import VerifyReport

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BOTH = frozenset({SHIPPING, BILLING, STATUS})
SHORT_BILLING_LEASE = {"BILLING_LEASE_SECONDS": "3"}
INVARIANTS = {
    "cancelled_and_shipped",
    "cancelled_charged_not_refunded",
    "refunded_more_than_once",
    "refund_amount_mismatch",
    "charged_without_stored_order",
    "charge_amount_mismatch",
    "shipped_without_charge",
    "payment_failed_but_charged",
    "final_status_mismatch",
}


def settle(
    stack: LocalStack,
    plan: LoadPlan,
    cancels: CancelResults | None = None,
    within: float = 120.0,
) -> VerifyReport:
    async def poll() -> VerifyReport:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            report = await verify_run(stack.settings(), plan, fanout=BOTH, cancel_results=cancels)
            if report.ok or loop.time() >= deadline:
                return report
            await asyncio.sleep(VERIFY_POLL_SECONDS)

    return asyncio.run(poll())


def cancels_after_charge(plan: LoadPlan, count: int) -> tuple[PlannedCancel, ...]:
    return tuple(
        PlannedCancel(send.message_id, CancelPoint.AFTER_CHARGE, (f"k-{send.message_id}",))
        for send in plan.sends[:count]
    )


def refunds(stack: LocalStack) -> list[dict[str, str]]:
    """Every refund the payment stand-in made (one page is plenty here)."""
    answer = httpx.get(f"{stack.payments_url}/refunds", params={"limit": "1000"}, timeout=10)
    answer.raise_for_status()
    return list(answer.json()["refunds"])


def start_pipeline(stack: LocalStack, *, shipping: bool = True) -> None:
    """Order worker, dispatcher and status consumer (GET's status is an invariant too)."""
    stack.start_worker()
    stack.start_dispatcher()
    stack.start_subscriber("status")
    if shipping:
        stack.start_subscriber("shipping")


def test_orders_load_cancels_and_verify_prove_every_invariant(
    stack: LocalStack, tmp_path: Path
) -> None:
    """As a user runs it: `orders load --cancels` then `orders verify --json`."""
    stack.start_payments()
    start_pipeline(stack)
    stack.start_subscriber("billing")
    manifest = tmp_path / "manifest.json"

    loaded = orders_cli(
        stack, "load", "--manifest", str(manifest), "--orders", "24", "--cancels", "12"
    )
    assert loaded.returncode == 0, loaded.stderr
    assert "cancels before_billing" in loaded.stderr
    # Wait in-process with the audit `orders verify` prints (every registered consumer), not
    # with a new `orders verify` process per poll: each one spends a second of CPU starting.
    plan = plan_from_json(json.loads(manifest.read_text()))
    all_consumers = frozenset(spec.name for spec in CONSUMERS)
    assert asyncio.run(wait_for_audit(stack, plan, 120, all_consumers)).ok
    printed = json.loads(orders_cli(stack, "verify", "--manifest", str(manifest), "--json").stdout)

    assert printed["ok"] is True
    assert set(printed["invariants"]) >= INVARIANTS
    assert all(count == 0 for count in printed["invariants"].values()), printed["invariants"]
    assert len(json.loads(manifest.read_text())["cancels"]) == 12


def test_a_billing_worker_killed_between_refund_and_mark_refunds_once(stack: LocalStack) -> None:
    plan = new_plan(6)
    victim = plan.sends[2].message_id
    cancels = cancels_after_charge(plan, 3)
    stack.start_payments()
    start_pipeline(stack, shipping=False)  # nothing ships before the cancels land
    crashing = stack.start_subscriber(
        "billing", extra_env={CRASH_AFTER_REFUND_ENV: victim, **SHORT_BILLING_LEASE}
    )
    send(stack, plan)
    answered = asyncio.run(send_cancels(stack.settings(), cancels))
    assert crashing.process.wait(timeout=60) == CRASH_EXIT_CODE
    # The refund record stays inProgress under the dead owner's lease; the redelivered cancel
    # event is taken over and asks the provider again with refund:<orderId>: the same refund.
    stack.start_subscriber("billing", extra_env=SHORT_BILLING_LEASE)
    stack.start_subscriber("shipping")
    report = settle(stack, plan, answered)

    assert report.ok, report.violations
    assert answered.to_json() == {"after_charge": {"cancelled": 3}}
    assert report.invariants is not None and not any(report.invariants.values())
    # Each cancel came after its charge, so each was paid back: once, the victim's included.
    assert sorted(r["orderId"] for r in refunds(stack)) == sorted(c.order_id for c in cancels)


def test_a_payment_service_failing_after_refunding_is_retried_into_the_same_refund(
    stack: LocalStack,
) -> None:
    plan = new_plan(5)
    stack.start_payments(extra_args=["--fault", '{"kind": "fail_after_refund", "count": 3}'])
    start_pipeline(stack, shipping=False)
    stack.start_subscriber("billing", extra_env=SHORT_BILLING_LEASE)
    send(stack, plan)
    answered = asyncio.run(send_cancels(stack.settings(), cancels_after_charge(plan, 4)))
    stack.start_subscriber("shipping")
    report = settle(stack, plan, answered)

    assert report.ok, report.violations
    assert report.invariants is not None and not any(report.invariants.values())
    assert report.fanout["shipping"]["effects"] == 1  # the one order not cancelled
    assert len(refunds(stack)) == 4


def test_a_charge_refused_for_good_ends_the_order_payment_failed_and_it_never_ships(
    stack: LocalStack,
) -> None:
    """The payment provider refuses one order's charge for good (its key was taken by another
    charge: 422): billing dead-letters the event `PaymentRefused`, the order ends in
    `payment_failed` and shipping never ships it, whichever of the two gets the event first.
    Every invariant holds, `shipped_without_charge` among them, and GET's status says so."""
    plan = new_plan(4)
    victim = plan.sends[1].message_id
    stack.start_payments()
    taken = httpx.post(
        f"{stack.payments_url}/payments",
        json={"orderId": f"elsewhere-{victim}", "amount": "0.01", "currency": "EUR"},
        headers={"Idempotency-Key": f"billing:{victim}"},
        timeout=10,
    )
    assert taken.status_code == 201, taken.text
    start_pipeline(stack)
    stack.start_subscriber("billing")

    send(stack, plan)
    report = settle(stack, plan)

    assert report.ok, report.violations
    assert report.invariants is not None and not any(report.invariants.values())
    assert {"shipped_without_charge", "payment_failed_but_charged"} <= set(report.invariants)
    assert report.fanout["shipping"]["effects"] == plan.orders - 1
    assert report.fanout["billing"]["effects"] == plan.orders - 1


def test_random_kills_with_cancels_keep_every_invariant(stack: LocalStack) -> None:
    """SIGKILL of order workers, dispatchers, billing (charges and refunds) and shipping at
    random moments while orders are placed and cancelled at every point."""
    plan = plan_load(40, LoadMix(), seed=21, run_id="sagakill", cancels=16)
    stack.start_payments()
    starters: dict[str, Callable[[], ManagedProcess]] = {
        "worker": stack.start_worker,
        "dispatcher": lambda: stack.start_dispatcher(lease_seconds=4),
        "billing": lambda: stack.start_subscriber("billing", extra_env=SHORT_BILLING_LEASE),
        "shipping": lambda: stack.start_subscriber("shipping"),
    }
    for start in starters.values():
        start()
        start()
    stack.start_subscriber("status")
    answers: list[CancelResults] = []

    def load_and_cancel() -> None:
        send(stack, plan)
        answers.append(asyncio.run(send_cancels(stack.settings(), plan.cancels)))

    loader = threading.Thread(target=load_and_cancel)
    chaos = random.Random(23)
    killed: list[str] = []
    loader.start()
    while loader.is_alive() or len(killed) < 8:
        # Random moments are the point of this test, not a synchronisation.
        threading.Event().wait(chaos.uniform(0.3, 1.2))
        # Every kind in turn, so each is killed at least twice; which one and when is random.
        kind = sorted(starters)[len(killed) % len(starters)]
        victims = [p for p in stack.processes if p.running and p.name.startswith(kind)]
        if not victims:
            continue
        victim = chaos.choice(victims)
        victim.signal(signal.SIGKILL)
        victim.process.wait(timeout=10)
        killed.append(victim.name)
        starters[kind]()
    loader.join()
    report = settle(stack, plan, answers[0] if answers else None, within=150.0)

    assert report.ok, (killed, report.violations)
    assert report.invariants is not None and not any(report.invariants.values())
    assert {name.split("-")[0] for name in killed} == set(starters)
