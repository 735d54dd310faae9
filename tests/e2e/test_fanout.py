"""Fan-out after the order: outbox -> dispatcher -> topic -> shipping (and billing), for real.

Real processes: both emulators, an `orders worker`, `orders dispatcher` processes and
`orders worker --subscription ...` processes; the verifier audits each consumer's effects.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from azure.cosmos import CosmosClient
from e2e_support import FAST_QUEUE, new_plan, orders_cli, poll_until, send

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.domain.load_plan import LoadMix, LoadPlan, plan_to_json
from orders.entrypoints.demo import VERIFY_POLL_SECONDS
from orders.entrypoints.dispatcher import CRASH_AFTER_PUBLISH_ENV, CRASH_EXIT_CODE
from orders.entrypoints.localstack import LocalStack, ManagedProcess, local_stack
from orders.entrypoints.runs import verify_run
from orders.entrypoints.worker import CRASH_AFTER_CHARGE_ENV
from orders.entrypoints.worker import CRASH_EXIT_CODE as WORKER_CRASH_EXIT_CODE
from orders.service.registry import BILLING, SHIPPING
from orders.service.verify import VerifyReport

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SHIPPING_ONLY = frozenset({SHIPPING})
BOTH = frozenset({SHIPPING, BILLING})
# The billing drills wait out a lease: short here, so they take seconds.
SHORT_BILLING_LEASE = {"BILLING_LEASE_SECONDS": "3"}


def start_billing(stack: LocalStack) -> None:
    """The payment stand-in and one billing consumer: shipping ships only an order whose
    charge billing recorded, so the shipping drills need them too (audited: shipping only)."""
    stack.start_payments()
    stack.start_subscriber("billing")


def wait_for_fanout(
    stack: LocalStack, plan: LoadPlan, fanout: frozenset[str], within: float = 90.0
) -> VerifyReport:
    async def poll() -> VerifyReport:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            report = await verify_run(stack.settings(), plan, fanout=fanout)
            if report.ok or loop.time() >= deadline:
                return report
            await asyncio.sleep(VERIFY_POLL_SECONDS)

    return asyncio.run(poll())


def test_every_order_is_charged_and_shipped_once_on_three_partition_key_ranges(
    tmp_path: Path,
) -> None:
    """The stack's Cosmos containers on three physical partitions, as a Cosmos container with
    more throughput (or data) has: the dispatchers lease each feed range and the consumers'
    stores route by range. Every outbox event is published once and every order handled."""
    ranges = 3
    with local_stack(FAST_QUEUE, tmp_path, cosmos_partition_ranges=ranges) as stack:
        asyncio.run(prepare_local_cosmos(stack.settings()))
        plan = new_plan(30, LoadMix(), seed=5)
        stack.start_payments()
        stack.start_worker()
        dispatchers = [stack.start_dispatcher(), stack.start_dispatcher()]
        for subscriber in ("billing", "shipping", "status"):
            stack.start_subscriber(subscriber)
        # The shares settle before the load: the second dispatcher takes its lease from the
        # first, and a lease taken from a live holder may publish a page twice (at least once,
        # which the topic's duplicate detection absorbs), where this test counts publishes.
        poll_until(
            lambda: (
                all(LEASE_TAKEN.search(d.log()) for d in dispatchers)
                and len({m[1] for d in dispatchers for m in LEASE_TAKEN.finditer(d.log())})
                == ranges
            ),
            60,
            "both dispatchers to hold their share of the three leases",
        )
        # And the one it was taken from has stopped handling it: until it balances again, it
        # reads that range beside its new owner.
        poll_until(
            lambda: takeovers(dispatchers) <= losses(dispatchers),
            60,
            "every dispatcher that lost a lease to have noticed",
        )

        send(stack, plan)
        report = wait_for_fanout(stack, plan, BOTH)

        assert report.ok, report.violations
        for consumer in ("billing", "shipping"):
            found = report.fanout[consumer]
            assert found["expected"] == plan.orders == found["effects"], consumer
            assert found["doubled"] == found["missing"] == found["stuck_in_progress"] == 0
        # One lease per feed range: the dispatchers read all three ranges between them.
        leases = {
            match[1]
            for dispatcher in dispatchers
            for match in LEASE_TAKEN.finditer(dispatcher.log())
        }
        assert len(leases) == ranges, leases
        # Each outbox event published once: a range answering for another's keys would
        # publish its events again (the consumers would hide that; the count does not).
        assert [dispatcher.stop() for dispatcher in dispatchers] == [0, 0]
        published = sum(
            int(match[1])
            for dispatcher in dispatchers
            for match in PUBLISHED.finditer(dispatcher.log())
        )
        outbox = _outbox_counts(stack)
        assert outbox["dispatched"] == outbox["all"] == published >= plan.orders


def test_every_order_is_charged_and_shipped_once_through_a_split_of_the_orders_container(
    tmp_path: Path,
) -> None:
    """The orders container's range splits while the dispatchers publish its outbox (our
    emulator's switch): the split range's lease is handed to its two children from where it
    was, so each outbox event is still published once, none from before the split again."""
    with local_stack(FAST_QUEUE, tmp_path, cosmos_partition_ranges=2) as stack:
        settings = stack.settings()
        asyncio.run(prepare_local_cosmos(settings))
        # Half the load before the split, half after: the split comes mid-stream however fast
        # the dispatchers publish the first half.
        before, after = new_plan(20, LoadMix(), seed=7), new_plan(20, LoadMix(), seed=9)
        stack.start_payments()
        stack.start_worker()
        dispatchers = [stack.start_dispatcher(), stack.start_dispatcher()]
        for subscriber in ("billing", "shipping", "status"):
            stack.start_subscriber(subscriber)
        poll_until(
            lambda: len({m[1] for d in dispatchers for m in LEASE_TAKEN.finditer(d.log())}) == 2,
            60,
            "the dispatchers to hold the two leases",
        )

        send(stack, before)
        poll_until(lambda: _outbox_counts(stack)["dispatched"] > 0, 60, "a first publish")
        response = httpx.post(
            f"{settings.cosmos_endpoint}_emulator/ranges",
            json={
                "database": settings.cosmos_database,
                "container": settings.cosmos_container,
                "split": "0",
            },
            headers={"Authorization": f"Bearer {stack.fault_token}"},
        )
        response.raise_for_status()
        send(stack, after)
        reports = [wait_for_fanout(stack, plan, BOTH) for plan in (before, after)]

        for plan, report in zip((before, after), reports, strict=True):
            assert report.ok, report.violations
            for consumer in ("billing", "shipping"):
                found = report.fanout[consumer]
                assert found["expected"] == plan.orders == found["effects"], consumer
                assert found["doubled"] == found["missing"] == found["stuck_in_progress"] == 0
        assert sum(" split feed range " in d.log() for d in dispatchers) == 1
        assert [dispatcher.stop() for dispatcher in dispatchers] == [0, 0]
        published = sum(
            int(match[1])
            for dispatcher in dispatchers
            for match in PUBLISHED.finditer(dispatcher.log())
        )
        outbox = _outbox_counts(stack)
        # Each outbox event published once: a child read from the beginning would publish
        # the events from before the split again.
        assert outbox["dispatched"] == outbox["all"] == published >= before.orders + after.orders


LEASE_TAKEN = re.compile(r"owns the lease of feed range ([0-9a-f]{12})")
TOOK_OVER = re.compile(r"took (feed range .+) over from (\S+)$", re.MULTILINE)
# Lost on renewal ("<owner> lost <range>") or found taken when balancing ("... to <taker>").
LOST = re.compile(r"(\S+) lost (feed range .+?)(?: to \S+)?$", re.MULTILINE)


def takeovers(dispatchers: list[ManagedProcess]) -> set[tuple[str, str]]:
    """(range, loser) of every lease one dispatcher took from another."""
    return {(m[1], m[2]) for d in dispatchers for m in TOOK_OVER.finditer(d.log())}


def losses(dispatchers: list[ManagedProcess]) -> set[tuple[str, str]]:
    """(range, loser) of every lease a dispatcher logged as lost."""
    return {(m[2], m[1]) for d in dispatchers for m in LOST.finditer(d.log())}


PUBLISHED = re.compile(r"dispatcher \S+ stopped: published=(\d+)")


def _outbox_counts(stack: LocalStack) -> dict[str, int]:
    settings = stack.settings()
    assert settings.cosmos_key is not None  # the local stack's emulator key
    with CosmosClient(settings.cosmos_endpoint, credential=settings.cosmos_key) as client:
        container = client.get_database_client(settings.cosmos_database).get_container_client(
            settings.cosmos_container
        )
        query = "SELECT VALUE COUNT(1) FROM c WHERE c.type = 'outbox'"
        return {
            "all": next(iter(container.query_items(query, enable_cross_partition_query=True))),
            "dispatched": next(
                iter(
                    container.query_items(
                        query + " AND c.dispatched = true", enable_cross_partition_query=True
                    )
                )
            ),
        }


def test_a_dispatcher_killed_between_publish_and_mark_republishes_and_nothing_doubles(
    stack: LocalStack,
) -> None:
    plan = new_plan(12)
    victim_order = plan.sends[5].message_id
    stack.start_worker()
    crashing = stack.start_dispatcher(
        lease_seconds=4, extra_env={CRASH_AFTER_PUBLISH_ENV: victim_order}
    )
    stack.start_subscriber("shipping")
    start_billing(stack)

    send(stack, plan)
    assert crashing.process.wait(timeout=60) == CRASH_EXIT_CODE
    # Its lease ends by the database's clock; the next dispatcher takes the range over and
    # publishes again from the last checkpoint (the victim's event among them).
    stack.start_dispatcher()
    report = wait_for_fanout(stack, plan, SHIPPING_ONLY)

    assert report.ok, report.violations
    assert report.fanout["shipping"]["effects"] == plan.orders


def test_a_stopped_dispatcher_hands_its_lease_over_at_once(stack: LocalStack) -> None:
    first_plan, second_plan = new_plan(5), new_plan(5)
    stack.start_worker()
    first = stack.start_dispatcher()
    stack.start_subscriber("shipping")
    start_billing(stack)
    send(stack, first_plan)
    assert wait_for_fanout(stack, first_plan, SHIPPING_ONLY).ok

    first.signal(signal.SIGTERM)
    assert first.process.wait(timeout=30) == 0
    stack.start_dispatcher()
    send(stack, second_plan)
    # Well inside the 30 s lease: the release, not the expiry, let the second one in.
    report = wait_for_fanout(stack, second_plan, SHIPPING_ONLY, within=20.0)
    assert report.ok, report.violations


def test_every_order_is_charged_once_with_its_amount_and_shipped_once_with_duplicate_sends(
    stack: LocalStack, tmp_path: Path
) -> None:
    """A load with duplicate sends, two competing consumers on each of billing and shipping,
    and two dispatchers (the second waits on the lease: only one reads the feed)."""
    plan = new_plan(40, LoadMix(), seed=8)
    assert len(plan.sends) > plan.orders, "the load sends duplicates"
    stack.start_payments()
    stack.start_worker()
    stack.start_dispatcher()
    stack.start_dispatcher()
    # `orders verify` judges GET's status too (a saga invariant): the status consumer keeps it.
    for subscriber in ("billing", "billing", "shipping", "shipping", "status"):
        stack.start_subscriber(subscriber)

    send(stack, plan)
    report = wait_for_fanout(stack, plan, BOTH)

    assert report.ok, report.violations
    for consumer in ("billing", "shipping"):
        found = report.fanout[consumer]
        assert found["expected"] == plan.orders == found["effects"], consumer
        assert found["doubled"] == found["missing"] == found["stuck_in_progress"] == 0

    # The same audit as a user runs it: `orders verify --json` with the fan-out objects.
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(plan_to_json(plan)))
    verified = orders_cli(stack, "verify", "--manifest", str(manifest), "--json")
    printed = json.loads(verified.stdout)
    assert verified.returncode == 0 and printed["ok"] is True
    assert printed["fanout"]["billing"]["effects"] == printed["fanout"]["shipping"]["effects"] == 40


def test_a_billing_worker_killed_between_charge_and_mark_charges_nothing_twice(
    stack: LocalStack,
) -> None:
    plan = new_plan(8)
    victim_order = plan.sends[3].message_id
    stack.start_payments()
    stack.start_worker()
    stack.start_dispatcher()
    crashing = stack.start_subscriber(
        "billing", extra_env={CRASH_AFTER_CHARGE_ENV: victim_order, **SHORT_BILLING_LEASE}
    )
    send(stack, plan)
    assert crashing.process.wait(timeout=60) == WORKER_CRASH_EXIT_CODE
    # The record stays inProgress under the dead owner's lease; after the lock and the lease
    # end, a new worker takes it over and asks again with the same key: the same charge.
    stack.start_subscriber("billing", extra_env=SHORT_BILLING_LEASE)
    stack.start_subscriber("shipping")
    report = wait_for_fanout(stack, plan, BOTH)

    assert report.ok, report.violations
    assert report.fanout["billing"]["effects"] == plan.orders


def test_a_payment_service_failing_after_charging_is_retried_into_the_same_charge(
    stack: LocalStack,
) -> None:
    plan = new_plan(6)
    stack.start_payments(extra_args=["--fault", '{"kind": "fail_after_charge", "count": 3}'])
    stack.start_worker()
    stack.start_dispatcher()
    stack.start_subscriber("billing", extra_env=SHORT_BILLING_LEASE)
    stack.start_subscriber("shipping")

    send(stack, plan)
    report = wait_for_fanout(stack, plan, BOTH)

    assert report.ok, report.violations
    assert report.fanout["billing"]["effects"] == plan.orders


def test_random_kills_of_every_process_kind_under_load_charge_and_ship_exactly_once(
    stack: LocalStack,
) -> None:
    plan = new_plan(60, LoadMix(), seed=13)
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
    loader = threading.Thread(target=send, args=(stack, plan))
    chaos = random.Random(17)
    killed: list[str] = []

    loader.start()
    while loader.is_alive() or len(killed) < 8:
        # Random moments are the point of this test, not a synchronisation.
        threading.Event().wait(chaos.uniform(0.3, 1.2))
        kind = chaos.choice(sorted(starters))
        victims = [p for p in stack.processes if p.running and p.name.startswith(kind)]
        if not victims:
            continue
        victim = chaos.choice(victims)
        victim.signal(signal.SIGKILL)
        victim.process.wait(timeout=10)
        killed.append(victim.name)
        starters[kind]()
    loader.join()
    report = wait_for_fanout(stack, plan, BOTH, within=150.0)

    assert report.ok, (killed, report.violations)
    assert report.orders_in_store == plan.orders
    for consumer in ("billing", "shipping"):
        assert report.fanout[consumer]["effects"] == plan.orders, consumer
    assert {name.split("-")[0] for name in killed} >= {"worker", "dispatcher"}
