"""The Functions host the app needs, named and checked where the app starts (issue 46).

- Importing function_app.py (what the host's indexing does first) logs the Python worker
  release it runs on, read from the worker's distribution metadata (`unknown` without it), and
  warns when that release is older than the first that indexes the Service Bus triggers'
  `message_actions` parameter: worker 4.34.0 refuses to index such an app, HTTP included.
- The Service Bus binding extension 1.0.0b2 cuts the AMQP header off, so the message it binds
  has no delivery count: the trigger reports it as unknown, never as a first delivery.

The worker cannot be installed here; its metadata is a real `.dist-info` on the interpreter's
path, which is all the check reads. The trigger is called as the host calls it, with the SDK's
own message type built as the binding builds it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import LAYOUT, FakeMessageActions, FakeOrderStore, order_payload
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sdk_messages import received_message

import function_app
from exactly_once.retries import Retrier
from exactly_once.servicebus import delivered
from exactly_once.telemetry import Telemetry
from orders.entrypoints import functions
from orders.entrypoints.functions import use_function_consumer
from orders.observability import ConsumerTelemetry
from orders.service.consumer import OrderConsumer
from orders.service.registry import ORDERS

REPO_ROOT = Path(function_app.__file__).resolve().parent
DELIVERY_COUNT = "messaging.servicebus.message.delivery_count"

_IMPORT_WITH_LOGS = (
    "import logging, os\n"
    "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
    "import function_app\n"
    "os._exit(0)\n"
)


def worker_metadata(root: Path, name: str, version: str) -> Path:
    """A distribution's metadata as pip installs it: `<name>-<version>.dist-info/METADATA`."""
    dist_info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    return root


def import_logs(extra_path: Path | None) -> str:
    """What importing function_app.py logs, in a fresh interpreter (an app indexes once)."""
    base = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("APPLICATIONINSIGHTS_", "PYTHONPATH"))
    }
    if extra_path is not None:
        base["PYTHONPATH"] = str(extra_path)
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITH_LOGS],
        capture_output=True,
        text=True,
        timeout=120,
        env=base,
        cwd=str(REPO_ROOT),
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_the_app_names_the_worker_release_it_starts_on(tmp_path: Path) -> None:
    logs = import_logs(worker_metadata(tmp_path, "azure-functions-worker", "4.41.0"))

    assert (
        "INFO Functions Python worker: azure-functions-worker 4.41.0; "
        "Service Bus binding extension: azurefunctions-extensions-bindings-servicebus 1.0.0b2"
    ) in logs
    assert "WARNING" not in logs


@pytest.mark.parametrize(
    ("distribution", "version"),
    [("azure-functions-worker", "4.34.0"), ("azure-functions-runtime", "1.2.0")],
)
def test_a_worker_without_settlement_client_support_is_named_in_a_warning(
    tmp_path: Path, distribution: str, version: str
) -> None:
    logs = import_logs(worker_metadata(tmp_path, distribution, version))

    assert f"Functions Python worker: {distribution} {version};" in logs
    [warning] = [line for line in logs.splitlines() if line.startswith("WARNING")]
    assert f"{distribution} {version} is older than {distribution}" in warning
    assert "will index no function of this app" in warning


def test_without_the_workers_metadata_the_release_is_unknown() -> None:
    logs = import_logs(None)

    assert "Functions Python worker: unknown;" in logs
    assert "WARNING" not in logs


# --- the delivery count the binding does not carry ------------------------------------------


@pytest.fixture
def traced_consumer(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The order consumer the trigger uses, with its spans kept in memory."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=tracer_provider)
    monkeypatch.setattr(functions, "function_retrier", Retrier(telemetry=telemetry))
    consumer_telemetry = ConsumerTelemetry(tracer_provider=tracer_provider, destination="orders")
    use_function_consumer(OrderConsumer(FakeOrderStore(), LAYOUT, consumer_telemetry))
    yield exporter
    use_function_consumer(None)


async def deliver(delivery_count: int | None) -> None:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    message = received_message(
        order_id, data=json.dumps(order_payload(order_id)).encode(), delivery_count=delivery_count
    )
    actions = FakeMessageActions()
    await function_app.consumer_triggers[ORDERS](received_message=message, message_actions=actions)
    assert [name for name, _, _ in actions.calls] == ["complete"]


async def test_a_delivery_count_the_binding_does_not_carry_is_reported_unknown(
    traced_consumer: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="orders.consumer"):
        await deliver(delivery_count=None)

    [line] = [r.getMessage() for r in caplog.records if "outcome=processed" in r.getMessage()]
    assert "delivery_count=unknown" in line
    [span] = traced_consumer.get_finished_spans()
    assert DELIVERY_COUNT not in (span.attributes or {})


async def test_a_delivery_count_the_binding_carries_is_reported_as_counted(
    traced_consumer: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="orders.consumer"):
        await deliver(delivery_count=2)  # two earlier attempts

    [line] = [r.getMessage() for r in caplog.records if "outcome=processed" in r.getMessage()]
    assert "delivery_count=2" in line
    [span] = traced_consumer.get_finished_spans()
    assert (span.attributes or {})[DELIVERY_COUNT] == 3  # this one counted too


def test_the_cores_delivery_of_a_message_without_the_header_has_no_count() -> None:
    """The core's hosts (its worker, a consumer called from a Functions trigger) read the same
    SDK message: no header, no count; with one, the conventions' count (this delivery too)."""
    without = delivered(received_message("m-1", data=b"{}", delivery_count=None), "orders")
    counted = delivered(received_message("m-1", data=b"{}", delivery_count=2), "orders")

    assert (without.delivery_count, counted.delivery_count) == (None, 3)
