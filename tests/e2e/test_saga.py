"""The order saga for real: cancels at every point through the API's core, billing refunding,
shipping skipping, crash drills of every process that takes part, and the verifier's
invariants (every counter 0) as the user runs them.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import new_plan, orders_cli, send

from orders.adapters.decision_journals import JournalFolder, consumer_of
from orders.bootstrap import ConsoleRuntime, HttpRuntime, build_console_runtime, build_http_runtime
from orders.domain.decision_counters import KIND_COUNTERS, kind_counter
from orders.domain.load_plan import (
    CancelPoint,
    LoadMix,
    LoadPlan,
    PlannedCancel,
    SendKind,
    plan_from_json,
    plan_load,
)
from orders.entrypoints.demo import VERIFY_POLL_SECONDS, wait_for_audit
from orders.entrypoints.http_api import create_app
from orders.entrypoints.localstack import LocalStack, ManagedProcess
from orders.entrypoints.runs import send_cancels, verify_run
from orders.entrypoints.worker import CRASH_AFTER_REFUND_ENV, CRASH_EXIT_CODE
from orders.service.cancels import CancelResults
from orders.service.registry import BILLING, SHIPPING, STATUS, downstream_consumers
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


async def histories_over_http(
    stack: LocalStack, order_ids: list[str]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[tuple[str, int]]]]:
    """GET's `statusHistory` and the console timeline's (status, version) steps, per order:
    the real HTTP app and console, in-process, over the stack's emulators."""
    settings = stack.settings()

    async def http_runtime() -> HttpRuntime:
        return await build_http_runtime(settings)

    async def console_runtime() -> ConsoleRuntime:
        return await build_console_runtime(settings)

    app = create_app(http_runtime, console_factory=console_runtime)
    got: dict[str, list[dict[str, Any]]] = {}
    timelines: dict[str, list[tuple[str, int]]] = {}
    async with (
        app.router.lifespan_context(app),  # closes the runtimes' clients at the end
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client,
    ):
        for order_id in order_ids:
            answer = await client.get(f"/api/orders/{order_id}")
            assert answer.status_code == 200, answer.text
            got[order_id] = answer.json()["statusHistory"]
            page = (await client.get("/console/orders", params={"orderId": order_id})).text
            assert "data-pending" not in page, order_id  # every step is in the history
            timelines[order_id] = [
                (status, int(version))
                for status, version in re.findall(
                    r'<li data-step="(\w+)" data-version="(\d+)">', page
                )
            ]
    return got, timelines


def assert_counters_equal_decision_logs(stack: LocalStack) -> None:
    journals = sorted(stack.workdir.glob("*.decisions.jsonl"))
    logged: dict[str, Counter[str]] = defaultdict(Counter)
    for journal in journals:
        for line in journal.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "backoff" in entry:  # a wait announced before deciding again: not a decision
                continue
            logged[consumer_of(journal)][kind_counter(entry["outcome"])] += 1
    counters = asyncio.run(JournalFolder(stack.workdir).counters())

    assert set(counters.by_consumer) == set(logged) >= {"orders", "billing", "shipping", "status"}
    for consumer, kinds in logged.items():
        counted = counters.by_consumer[consumer]
        assert {k: counted[k] for k in KIND_COUNTERS if counted[k]} == dict(kinds), consumer
        assert counted["decisions"] == sum(kinds.values()), consumer
    # the cancels' decisions are counted too
    assert (
        counters.by_consumer["billing"]["refunded"]
        + counters.by_consumer["billing"]["nothing_to_refund"]
        >= 1
    )


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
    all_consumers = frozenset(spec.name for spec in downstream_consumers())
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
    cancels = cancels_after_charge(plan, 4)
    answered = asyncio.run(send_cancels(stack.settings(), cancels))
    stack.start_subscriber("shipping")
    report = settle(stack, plan, answered)

    assert report.ok, report.violations
    assert report.invariants is not None and not any(report.invariants.values())
    assert report.fanout["shipping"]["effects"] == 1  # the one order not cancelled
    assert len(refunds(stack)) == 4

    # Every view tells one truth (#39): each order's history is the same in GET, the console's
    # timeline and `orders show`, complete and in version order, cancels included.
    order_ids = sorted({s.message_id for s in plan.sends if s.kind is SendKind.ORIGINAL})
    cancelled = sorted({cancel.order_id for cancel in cancels})
    got, timelines = asyncio.run(histories_over_http(stack, order_ids))
    for order_id in order_ids:
        history = [(change["status"], change["version"]) for change in got[order_id]]
        assert timelines[order_id] == history, order_id
        assert history[0] == ("placed", 1) and [v for _, v in history] == sorted(
            {v for _, v in history}
        ), history
    shipped = next(order_id for order_id in order_ids if order_id not in cancelled)
    shown = {}
    for order_id in (cancelled[0], shipped):
        answer = orders_cli(stack, "show", order_id, "--json")
        assert answer.returncode == 0, answer.stderr
        shown[order_id] = json.loads(answer.stdout)
        assert shown[order_id]["statusHistory"] == got[order_id]
        assert shown[order_id]["outbox"] and shown[order_id]["payment"]  # its events, its charge
        assert not [k for d in shown[order_id]["outbox"] for k in d if k.startswith("_")]
    assert shown[cancelled[0]]["refund"] and not shown[cancelled[0]]["shipment"]
    assert shown[shipped]["shipment"] and not shown[shipped]["refund"]
    for order_id in cancelled:  # cancelled after its charge: paid, cancelled, refunded
        changes = [(c["status"], c["version"]) for c in got[order_id]]
        assert changes == [("placed", 1), ("paid", 2), ("cancelled", 5), ("refunded", 6)]
    # ... and each consumer's counters on the console are its decision log, kind by kind.
    assert_counters_equal_decision_logs(stack)


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
        headers={
            "Idempotency-Key": f"billing:{victim}",
            "Authorization": f"Bearer {stack.payments_token}",
        },
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
