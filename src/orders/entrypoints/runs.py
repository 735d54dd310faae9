"""A load run from end to end, as `orders load`, `orders verify`, the demo and the benchmarks
drive it: send the plan's messages, send its cancels through the core of the API's cancel route,
and read back what the stores hold for the run to audit it (`service.verify_run.audit_run`).

Each function opens clients of its own and closes them on the way out. The reads and the senders
are adapters reached by routes the import contracts name (pyproject.toml, `entrypoint-routes`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import replace

from orders.adapters.cosmos_audit import documents_of_run
from orders.adapters.cosmos_client import inbox_container, order_partitioned_store, orders_container
from orders.adapters.payments_http import HttpPaymentGateway
from orders.adapters.servicebus_load import ServiceBusLoadSender, peek_dead_letters
from orders.bootstrap import DOCUMENT_LAYOUT, ProcessClients, build_http_runtime
from orders.domain.load_plan import LoadPlan, PlannedCancel
from orders.domain.ownership import app_scope
from orders.service.cancels import CancelResults, StoreProbe, intake_canceller, run_cancels
from orders.service.load import LoadResult, run_load
from orders.service.registry import BILLING
from orders.service.verify import VerifyReport
from orders.service.verify_run import RunRecords, audit_run
from orders.settings import Settings


def _own_clients(stack: AsyncExitStack, settings: Settings) -> ProcessClients:
    clients = ProcessClients(settings)
    stack.push_async_callback(clients.close)
    return clients


async def send_load(
    settings: Settings,
    plan: LoadPlan,
    *,
    duplicate_window_seconds: float,
    on_sent: Callable[[int], None] = lambda count: None,
) -> LoadResult:
    async with AsyncExitStack() as stack:
        client = _own_clients(stack, settings).servicebus()
        sender = await stack.enter_async_context(
            ServiceBusLoadSender(
                client,
                settings.orders_queue,
                settings.status_queue if plan.status_updates else None,
                status_sessions=settings.status_sessions,
                # The load's orders are the load's cancels' to cancel (`send_cancels`).
                owner_scope=app_scope(settings.idempotency_scope),
            )
        )
        return await run_load(
            plan, sender, duplicate_window_seconds=duplicate_window_seconds, on_sent=on_sent
        )


async def send_cancels(
    settings: Settings, cancels: tuple[PlannedCancel, ...] | list[PlannedCancel]
) -> CancelResults:
    """These planned cancels, each at its point, through the core of the API's cancel route
    (the stack's shared caller scope, as an API caller without a principal has)."""
    async with AsyncExitStack() as stack:
        clients = _own_clients(stack, settings)
        runtime = await build_http_runtime(settings, clients=clients)
        stack.push_async_callback(runtime.close)
        cosmos = await clients.cosmos()
        probe = StoreProbe(
            order_partitioned_store(orders_container(cosmos, settings)),
            order_partitioned_store(inbox_container(cosmos, settings)),
            DOCUMENT_LAYOUT,
        )
        scope = app_scope(settings.idempotency_scope)
        cancel = intake_canceller(runtime.intake, scope)
        return await run_cancels(tuple(cancels), cancel, probe)


async def verify_run(
    settings: Settings,
    plan: LoadPlan,
    *,
    fanout: frozenset[str] = frozenset(),
    cancel_results: CancelResults | None = None,
    on_read: Callable[[int], None] = lambda count: None,
) -> VerifyReport:
    """Read what the stores hold for the run (Cosmos, the dead-letter queues and, with billing
    in `fanout`, the payment service) and audit it (`verify_run.audit_run`); `on_read` hears
    how many documents were read, page by page."""
    async with AsyncExitStack() as stack:
        clients = _own_clients(stack, settings)
        cosmos = await clients.cosmos(create_local_resources=False)
        bus = clients.servicebus()
        documents = await documents_of_run(orders_container(cosmos, settings), plan.run_id, on_read)
        records = RunRecords(documents, await peek_dead_letters(bus, settings.orders_queue))
        if fanout:
            inbox = await documents_of_run(inbox_container(cosmos, settings), plan.run_id, on_read)
            records = replace(records, inbox=inbox)
        if BILLING in fanout:
            async with HttpPaymentGateway(
                settings.require_payments(),
                settings.payments_timeout_seconds,
                token=settings.payments_token,
            ) as payments:
                records = replace(
                    records,
                    charges=await payments.list_all_charges(),
                    refunds=await payments.list_all_refunds(),
                )
        if plan.status_updates:
            status_dead_letters = await peek_dead_letters(bus, settings.status_queue)
            records = replace(records, status_dead_letters=status_dead_letters)
    return audit_run(plan, records, DOCUMENT_LAYOUT, fanout=fanout, cancel_results=cancel_results)
