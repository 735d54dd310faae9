"""The Functions trigger, called directly with a real ServiceBusReceivedMessage.

The host (and its gRPC MessageActions) cannot run here, so settlement goes to a fake actions
object; the message is the SDK's own type, built as the SDK-type binding builds it.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.servicebus import ServiceBusReceivedMessage
from fakes import (
    LAYOUT,
    FakeDocumentStore,
    FakeFencedDocuments,
    FakeLeaseStore,
    FakeMessageActions,
    FakeOrderStore,
    event_message,
    new_write,
    order_payload,
    stored_orders,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sdk_messages import received_message

import function_app
from exactly_once import Backoff
from exactly_once.change_feed import ChangePage
from exactly_once.decisions import Outcome
from exactly_once.exceptions import TransientStoreError
from exactly_once.retries import Retrier
from exactly_once.telemetry import Telemetry
from orders.bootstrap import DispatcherRuntime, SubscriberRuntime
from orders.domain.events import OrderEvent
from orders.entrypoints import functions
from orders.entrypoints.functions import (
    function_dispatcher_runtime,
    function_subscriber_runtimes,
    use_function_consumer,
)
from orders.entrypoints.lazy_runtime import Lazy
from orders.observability import ConsumerTelemetry
from orders.service.consumer import OrderConsumer
from orders.service.dispatcher import OutboxDispatcher
from orders.service.registry import CONSUMERS, ORDERS
from orders.service.saga import OrderSaga
from orders.service.shipping import ShippingConsumer
from orders.service.subscribers import Source


def received(body: bytes, message_id: str, delivery_count: int = 0) -> ServiceBusReceivedMessage:
    return received_message(
        message_id, data=body, delivery_count=delivery_count, correlation_id="corr-42"
    )


async def invoke(message: ServiceBusReceivedMessage) -> list[tuple[str, Any, dict[str, Any]]]:
    actions = FakeMessageActions()
    process_order = function_app.consumer_triggers[ORDERS]
    await process_order(received_message=message, message_actions=actions)
    return actions.calls


@functools.cache
def indexed_functions() -> list[Any]:
    # Like the host, index once: a second get_functions() on one app raises "not unique".
    return list(function_app.app.get_functions())


def function_bindings(name: str) -> list[dict[str, Any]]:
    [function] = [f for f in indexed_functions() if f.get_function_name() == name]
    bindings: list[dict[str, Any]] = json.loads(function.get_function_json())["bindings"]
    return bindings


def test_every_service_bus_trigger_is_declared_from_the_registry() -> None:
    """One pipeline: the order consumer's trigger is a registry entry's like the others', and
    no Service Bus trigger is declared by hand beside them."""
    service_bus = {"serviceBusTrigger"}
    declared = {
        function.get_function_name()
        for function in indexed_functions()
        if {binding["type"] for binding in function_bindings(function.get_function_name())}
        & service_bus
    }

    assert declared == {spec.function_name for spec in CONSUMERS}
    assert set(function_app.consumer_triggers) == {spec.name for spec in CONSUMERS}
    assert CONSUMERS[0].name == ORDERS and CONSUMERS[0].function_name == "process_order"


def test_binding_is_a_peeklock_trigger_that_settles_explicitly() -> None:
    [binding] = function_bindings("process_order")

    assert binding["type"] == "serviceBusTrigger"
    assert binding["queueName"] == "%ORDERS_QUEUE%"
    assert binding["connection"] == "ServiceBusConnection"
    assert binding["autoCompleteMessages"] is False


def test_http_api_is_hosted_behind_function_keys_on_every_path() -> None:
    # The ASGI app gets every path under the host's routePrefix (`api`), keys required.
    trigger, output = function_bindings("http_app_func")

    assert trigger["type"] == "httpTrigger"
    assert trigger["route"] == "/{*route}"
    assert trigger["authLevel"] == "FUNCTION"
    assert {"GET", "POST"} <= set(trigger["methods"])
    assert output["type"] == "http"


async def test_new_order_is_completed(function_store: FakeOrderStore) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    message = received(json.dumps(order_payload(order_id)).encode(), order_id)

    calls = await invoke(message)

    assert [(name, kwargs) for name, _, kwargs in calls] == [("complete", {})]
    assert calls[0][1] is message
    assert function_store.order_ids() == [order_id]


async def test_duplicate_is_completed_without_a_second_write(
    function_store: FakeOrderStore,
) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    body = json.dumps(order_payload(order_id)).encode()
    await invoke(received(body, order_id))

    calls = await invoke(received(body, order_id, delivery_count=1))

    assert [name for name, _, _ in calls] == ["complete"]
    assert function_store.create_calls == 2 and len(function_store.documents(order_id)) == 4


async def test_mismatch_is_dead_lettered_with_both_hashes(function_store: FakeOrderStore) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    await invoke(received(json.dumps(order_payload(order_id)).encode(), order_id))

    calls = await invoke(
        received(json.dumps(order_payload(order_id, currency="USD")).encode(), order_id)
    )

    [(name, _, kwargs)] = calls
    assert name == "deadletter"
    assert kwargs["deadletter_reason"] == "RequestHashMismatch"
    assert kwargs["deadletter_error_description"].count("requestHash") == 2


@pytest.mark.parametrize(
    ("body", "message_id", "reason"),
    [
        (b"<xml/>", "o-1", "InvalidJson"),
        (json.dumps({"orderId": "o-1"}).encode(), "o-1", "SchemaViolation"),
        (json.dumps(order_payload("o-1")).encode(), "o-9", "MessageIdMismatch"),
        (b"{" + b" " * 300_000 + b"}", "o-1", "OrderTooLarge"),
    ],
)
async def test_bad_messages_are_dead_lettered_with_their_reason(
    function_store: FakeOrderStore, body: bytes, message_id: str, reason: str
) -> None:
    [(name, _, kwargs)] = await invoke(received(body, message_id))

    assert name == "deadletter"
    assert kwargs["deadletter_reason"] == reason
    assert kwargs["deadletter_error_description"]


@pytest.fixture
def short_backoff(monkeypatch: pytest.MonkeyPatch) -> Backoff:
    """The Functions bodies' backoff, scaled down to milliseconds (the default waits for up to
    120 s; tests/unit/test_backoff.py holds its arithmetic)."""
    backoff = Backoff(first_delay_seconds=0.01, max_delay_seconds=0.02, budget_seconds=0.2)
    monkeypatch.setattr(functions, "function_retrier", Retrier(backoff))
    return backoff


async def test_a_transient_store_failure_backs_off_and_is_stored_in_the_same_delivery(
    function_store: FakeOrderStore, short_backoff: Backoff
) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    function_store.fail_next(TransientStoreError("429"), times=2)

    calls = await invoke(received(json.dumps(order_payload(order_id)).encode(), order_id))

    assert [name for name, _, _ in calls] == ["complete"]
    assert function_store.order_ids() == [order_id]


async def test_a_transient_failure_that_outlasts_the_backoff_is_abandoned_without_a_scheduler(
    function_store: FakeOrderStore, short_backoff: Backoff, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Service Bus to schedule a delayed retry's copy on (its settings unset here): the
    message is abandoned, never lost. With one, it comes back later as a copy:
    tests/integration/test_function_delayed_retries.py."""
    monkeypatch.delenv("ServiceBusConnection", raising=False)
    monkeypatch.delenv("ServiceBusConnection__fullyQualifiedNamespace", raising=False)
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    function_store.fail_next(TransientStoreError("503"), times=1000)

    calls = await invoke(received(json.dumps(order_payload(order_id)).encode(), order_id))

    assert [name for name, _, _ in calls] == ["abandon"]
    assert function_store.order_ids() == []


def flaky_runtime_build(
    failures: int, consumer: OrderConsumer
) -> tuple[Lazy[SubscriberRuntime], list[int]]:
    """The order consumer's runtime, whose build fails `failures` times (a role assignment not
    yet effective, the store unreachable at start) before it succeeds; and the builds tried."""
    builds: list[int] = []

    async def build() -> SubscriberRuntime:
        builds.append(len(builds) + 1)
        if len(builds) <= failures:
            raise ConnectionError("the store is unreachable")
        return SubscriberRuntime(Source(queue=ORDERS), consumer)

    return Lazy(build, "orders consumer"), builds


async def test_a_runtime_that_fails_to_build_backs_off_in_place_and_is_built_again(
    short_backoff: Backoff, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ServiceNotReadyError` never leaves the function (the host would abandon at once,
    spending a delivery): the build is tried again after a backoff, in the same delivery."""
    store = FakeOrderStore()
    lazy, builds = flaky_runtime_build(2, OrderConsumer(store, LAYOUT))
    monkeypatch.setitem(function_subscriber_runtimes, ORDERS, lazy)
    order_id = f"o-{uuid.uuid4().hex[:8]}"

    calls = await invoke(received(json.dumps(order_payload(order_id)).encode(), order_id))

    assert [name for name, _, _ in calls] == ["complete"]
    assert builds == [1, 2, 3]
    assert store.order_ids() == [order_id]


async def test_a_runtime_that_never_builds_is_handed_back_after_the_backoff_not_raised(
    short_backoff: Backoff, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy, builds = flaky_runtime_build(1_000, OrderConsumer(FakeOrderStore(), LAYOUT))
    monkeypatch.setitem(function_subscriber_runtimes, ORDERS, lazy)
    order_id = f"o-{uuid.uuid4().hex[:8]}"

    decision = await functions.process_event_message(
        ORDERS,
        received(json.dumps(order_payload(order_id)).encode(), order_id),
        actions := FakeMessageActions(),
    )

    assert [name for name, _, _ in actions.calls] == ["abandon"]
    assert decision.outcome == Outcome.TRANSIENT_FAILURE
    assert len(builds) > 2  # backed off and tried again, not abandoned at the first failure


async def test_a_delivery_backed_off_in_the_host_is_one_process_span_settled_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    backoff = Backoff(first_delay_seconds=0.01, max_delay_seconds=0.02, budget_seconds=0.2)
    telemetry = Telemetry(tracer_provider=tracer_provider)
    monkeypatch.setattr(functions, "function_retrier", Retrier(backoff, telemetry=telemetry))
    store = FakeOrderStore()
    consumer_telemetry = ConsumerTelemetry(tracer_provider=tracer_provider, destination="orders")
    use_function_consumer(OrderConsumer(store, LAYOUT, consumer_telemetry))
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    store.fail_next(TransientStoreError("429"), times=2)

    try:
        calls = await invoke(received(json.dumps(order_payload(order_id)).encode(), order_id))
    finally:
        use_function_consumer(None)

    # Three attempts, one delivery: the consumer's span joined the host's and named it.
    assert [name for name, _, _ in calls] == ["complete"]
    [span] = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "process orders"
    assert attributes["orders.outcome"] == "processed"
    assert attributes["messaging.servicebus.disposition_status"] == "complete"
    assert attributes["messaging.servicebus.message.delivery_count"] == 1
    assert "error.type" not in attributes


async def test_unexpected_failure_is_abandoned_after_its_immediate_retries(
    function_store: FakeOrderStore,
) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    # The first attempt and the three immediate retries (Backoff.immediate_retries) all fail.
    function_store.fail_next(KeyError("surprise"), times=4)

    calls = await invoke(received(json.dumps(order_payload(order_id)).encode(), order_id))

    assert [name for name, _, _ in calls] == ["abandon"]


async def test_an_unexpected_glitch_is_retried_at_once_and_completed(
    function_store: FakeOrderStore,
) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    function_store.fail_next(KeyError("surprise"))

    calls = await invoke(received(json.dumps(order_payload(order_id)).encode(), order_id))

    assert [name for name, _, _ in calls] == ["complete"]


# --- Fan-out: the Cosmos DB trigger (outbox dispatcher) and the two subscription triggers ----


def test_the_outbox_dispatcher_is_a_cosmos_trigger_with_our_lease_container_and_retries() -> None:
    [binding] = function_bindings("dispatch_outbox")
    assert binding["type"] == "cosmosDBTrigger"
    assert (binding["databaseName"], binding["containerName"]) == (
        "%COSMOS_DATABASE%",
        "%COSMOS_CONTAINER%",
    )
    assert binding["leaseContainerName"] == "%COSMOS_LEASES_CONTAINER%"
    assert binding["connection"] == "CosmosConnection"
    assert binding["createLeaseContainerIfNotExists"] is False  # managed identity cannot
    [function] = [f for f in indexed_functions() if f.get_function_name() == "dispatch_outbox"]
    retry = function.get_settings_dict("retry_policy")
    assert retry is not None
    assert retry["strategy"] == "exponential_backoff" and retry["max_retry_count"] == "-1"


@pytest.mark.parametrize(
    ("function_name", "subscription"),
    [("ship_order", "%SHIPPING_SUBSCRIPTION%"), ("bill_order", "%BILLING_SUBSCRIPTION%")],
)
def test_each_subscriber_is_a_peeklock_topic_trigger_on_its_subscription(
    function_name: str, subscription: str
) -> None:
    [binding] = function_bindings(function_name)
    assert binding["type"] == "serviceBusTrigger"
    assert binding["topicName"] == "%ORDER_EVENTS_TOPIC%"
    assert binding["subscriptionName"] == subscription
    assert binding["autoCompleteMessages"] is False


async def test_the_shipping_trigger_runs_the_shipping_core_and_settles() -> None:
    inbox = FakeFencedDocuments()
    lazy = function_subscriber_runtimes["shipping"]
    orders = stored_orders("o-fn", charged=True)
    shipping = ShippingConsumer(
        FakeDocumentStore(inbox), OrderSaga(FakeDocumentStore(orders), LAYOUT), LAYOUT
    )
    lazy.use(SubscriberRuntime(Source(queue="unused"), shipping))
    event = event_message("o-fn")
    message = received_message(event.message_id or "", data=event.body)
    try:
        first, again = FakeMessageActions(), FakeMessageActions()
        ship_order = function_app.consumer_triggers["shipping"]
        await ship_order(received_message=message, message_actions=first)
        await ship_order(received_message=message, message_actions=again)
    finally:
        lazy.use(None)

    assert (
        [name for name, _, _ in first.calls] == [name for name, _, _ in again.calls] == ["complete"]
    )
    assert ("o-fn", "o-fn:shipment") in inbox.documents


def test_the_status_consumer_is_a_peeklock_queue_trigger_on_the_status_queue() -> None:
    [binding] = function_bindings("apply_status")
    assert binding["type"] == "serviceBusTrigger"
    assert binding["queueName"] == "%STATUS_QUEUE%"
    assert binding["autoCompleteMessages"] is False
    assert binding.get("isSessionsEnabled", False) is False  # STATUS_SESSIONS unset here


def test_with_status_sessions_the_status_trigger_takes_sessions() -> None:
    """The host indexes with the app settings in the environment (a fresh interpreter here)."""
    probe = (
        "import json, function_app\n"
        "[f] = [f for f in function_app.app.get_functions() "
        "if f.get_function_name() == 'apply_status']\n"
        "print(json.loads(f.get_function_json())['bindings'][0].get('isSessionsEnabled'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "STATUS_SESSIONS": "true"},
        cwd=str(Path(function_app.__file__).parent),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


class RecordingEvents:
    def __init__(self) -> None:
        self.published: list[str] = []

    async def publish_event(
        self, event: OrderEvent, trace_context: dict[str, str], *, message_id: str
    ) -> None:
        self.published.append(event.event_id)


class MarkingFeed:
    """Only `mark_dispatched` is used by `dispatch`; the host's trigger reads the feed."""

    def __init__(self) -> None:
        self.marked: list[str] = []

    async def feed_ranges(self) -> list[str]:
        raise AssertionError("the Functions host reads the change feed, not the dispatcher")

    async def read_changes(
        self, feed_range: str, continuation: str | None, max_items: int
    ) -> ChangePage:
        raise AssertionError("the Functions host reads the change feed, not the dispatcher")

    async def mark_dispatched(self, document: dict[str, Any]) -> None:
        self.marked.append(document["id"])


async def test_the_cosmos_trigger_publishes_and_marks_only_undispatched_outbox_documents() -> None:
    write = new_write("o-feed")
    order, outbox = write[0], write[1]
    done = {**outbox, "id": "o-done:outbox:OrderAccepted", "dispatched": True}
    events, feed = RecordingEvents(), MarkingFeed()
    dispatcher = OutboxDispatcher(feed, events, FakeLeaseStore(), LAYOUT)
    function_dispatcher_runtime.use(DispatcherRuntime(dispatcher))
    try:
        changes = func.DocumentList([func.Document.from_dict(d) for d in (order, outbox, done)])
        await function_app.dispatch_outbox(changes=changes)
    finally:
        function_dispatcher_runtime.use(None)

    assert events.published == feed.marked == ["o-feed:outbox:OrderAccepted"]


# --- monitoring at import, settings through settings.py (issue 23) -----------------------------

_IMPORT_PROBE = (
    "import json, os, function_app\n"
    "from opentelemetry import trace\n"
    "from orders.adapters import monitoring\n"
    "print(json.dumps({'configured': monitoring._state is not None,"
    " 'provider': type(trace.get_tracer_provider()).__module__}), flush=True)\n"
    # Leave without the exporters' exit-time flush to an endpoint that does not exist.
    "os._exit(0)\n"
)


def _import_function_app(env: dict[str, str]) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("APPLICATIONINSIGHTS_")}
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
        cwd=str(Path(function_app.__file__).parent),
    )
    assert result.returncode == 0, result.stderr
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    answer["stderr"] = result.stderr
    return answer


def test_importing_the_function_app_configures_monitoring_before_any_runtime() -> None:
    """In its OpenTelemetry mode the host forwards no worker logs: the exporter must exist from
    the import on, not from the first message (no runtime is built in this probe)."""
    answer = _import_function_app(
        {
            "APPLICATIONINSIGHTS_CONNECTION_STRING": (
                "InstrumentationKey=00000000-0000-0000-0000-000000000000;"
                "IngestionEndpoint=http://127.0.0.1:9/"
            )
        }
    )
    assert answer["configured"] is True
    assert answer["provider"].startswith("opentelemetry.sdk")


def test_without_application_insights_the_import_configures_nothing() -> None:
    answer = _import_function_app({})
    assert answer["configured"] is False


def test_a_broken_connection_string_is_logged_and_the_app_still_imports() -> None:
    answer = _import_function_app({"APPLICATIONINSIGHTS_CONNECTION_STRING": "not a connection"})
    assert answer["configured"] is False
    assert "could not be configured" in answer["stderr"]


def test_function_app_reads_no_setting_itself() -> None:
    """STATUS_SESSIONS comes from settings.py, which every host reads it through."""
    import ast

    from orders.settings import Settings, status_sessions_enabled

    source = Path(function_app.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "os" not in imported and "os.environ" not in source
    assert status_sessions_enabled({"STATUS_SESSIONS": " TRUE "}) is True
    assert status_sessions_enabled({"STATUS_SESSIONS": "false"}) is False
    assert status_sessions_enabled({}) is False
    env = {"COSMOS_ENDPOINT": "https://x/", "STATUS_SESSIONS": "True"}
    assert Settings.from_env(env).status_sessions is status_sessions_enabled(env) is True
    assert function_app.STATUS_SESSIONS is status_sessions_enabled()
