"""docs/new-consumer.md's worked example, applied as written to a copy of the repository: a new
consumer is three hand-written files, every place derived from the registry or the Bicep array
picks it up, and it runs on our emulators.

The copy is made once per module under a temporary directory; the worktree is never touched.
Its code runs in subprocesses with the copy's `src` first on the path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from function_index import indexed_functions

from orders.service.registry import consumer_names

from . import bicep_model
from .bicep_model import REPO_ROOT, named_resource, parse, resolve, resources

DOC = REPO_ROOT / "docs" / "new-consumer.md"
# What a checkout holds that the example touches or derives from.
COPIED = (
    "src",
    "function_app.py",
    "host.json",
    "local.settings.sample.json",
    "infra",
    "emulators",
    "scripts",
    "pyproject.toml",
)
SKIPPED = shutil.ignore_patterns("__pycache__", "*.egg-info", "node_modules", ".mypy_cache")
BLOCK = re.compile(r"^```(?:python|bicep)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
HEADER = re.compile(
    r"^(?:#|//) (?:new file: (?P<new>\S+)"
    r"|(?P<path>\S+), (?:with the other imports|a new element of (?P<array>\w+)):)$"
)
NEW_FILES = {
    "src/orders/service/notifications.py",
    "src/orders/service/registry.py",
    "infra/main.bicep",
}
OFFICIAL_CONFIG = "emulators/servicebus/config.json"
GENERATED = {OFFICIAL_CONFIG, "local.settings.sample.json"}
SUBSCRIPTION = "Microsoft.ServiceBus/namespaces/topics/subscriptions"


@dataclass(frozen=True)
class Step:
    """One snippet of the doc and where it goes."""

    path: str
    code: str
    new_file: bool = False
    array: str | None = None  # the Python tuple or Bicep array it is a new element of


def documented_steps() -> list[Step]:
    steps = []
    for block in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        header, _, code = block.partition("\n")
        match = HEADER.match(header)
        assert match, f"a snippet of {DOC.name} does not say where it goes: {header!r}"
        if match["new"]:
            steps.append(Step(match["new"], code, new_file=True))
        else:
            steps.append(Step(match["path"], code, array=match["array"]))
    return steps


def apply(root: Path, step: Step) -> None:
    target = root / step.path
    if step.new_file:
        assert not target.exists(), step.path
        target.write_text(step.code, encoding="utf-8")
        return
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    added = step.code.splitlines(keepends=True)
    if step.array is None:  # an import: after the module's last top-level import
        at = max(i for i, line in enumerate(lines) if line.startswith(("from ", "import "))) + 1
    else:  # an element: before the line that closes the tuple or array it opens
        start = next(
            i
            for i, line in enumerate(lines)
            if re.match(rf"^(?:var )?{step.array}\b.*[\[(]$", line.rstrip())
        )
        at = next(i for i in range(start + 1, len(lines)) if lines[i].rstrip() in (")", "]"))
    target.write_text("".join(lines[:at] + added + lines[at:]), encoding="utf-8")


def snapshot(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}


@dataclass(frozen=True)
class Copy:
    root: Path
    hand_written: set[str]
    regenerated: set[str]

    @property
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.root / "src")}

    def python(self, code: str, timeout: float = 60) -> Any:
        """Run `code` with the copy's package; the JSON it prints last."""
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env={**os.environ, **self.env},
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Copy:
    root = tmp_path_factory.mktemp("repo")
    for name in COPIED:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=SKIPPED)
        else:
            shutil.copy2(source, root / name)
    before = snapshot(root)
    for step in documented_steps():
        apply(root, step)
    written = snapshot(root)
    generator = subprocess.run(
        [sys.executable, "scripts/derived_config.py"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
    )
    assert generator.returncode == 0, generator.stderr
    return Copy(root, changed(before, written), changed(written, snapshot(root)))


def test_a_new_consumer_is_three_hand_written_files(copy: Copy) -> None:
    assert len(documented_steps()) == 4  # the module, an import and an entry, an array element
    assert copy.hand_written == NEW_FILES
    assert len(copy.hand_written) == 3
    # `make derived-config` then regenerates the two emulator files, and only those.
    assert copy.regenerated == GENERATED


def test_the_registry_lists_it_with_its_setting(copy: Copy) -> None:
    found = copy.python(
        "import json\n"
        "from orders.service.registry import app_setting_names, consumer_names\n"
        "print(json.dumps([list(consumer_names()), sorted(app_setting_names())]))\n"
    )
    names, settings = found
    assert names == [*consumer_names(), "notifications"]
    assert "NOTIFICATIONS_SUBSCRIPTION" in settings


DOOR_OF_ITS_OWN = """
import json
from types import SimpleNamespace
from exactly_once import ExactlyOnceConsumer
from orders.adapters.servicebus_consumers import registered_door
from orders.service.registry import consumer_named
from orders.settings import DEFAULT_RECORD_RETENTION


class Wiring:  # what the entry's factory reads of the process's wiring
    settings = SimpleNamespace(record_retention=DEFAULT_RECORD_RETENTION)

    def inbox_store(self):
        return object()  # never used: nothing is decided here


built = consumer_named("notifications").factory(Wiring())
print(json.dumps({
    "door": isinstance(built, ExactlyOnceConsumer),
    "consumer": getattr(built, "consumer", None),
    "driven_as_it_is": registered_door("notifications", built) is built,
}))
"""


def test_its_entry_builds_a_door_of_its_own_that_the_hosts_drive_as_it_is(copy: Copy) -> None:
    """The entry builds the user's `ExactlyOnceConsumer` itself (no adapter around it), and the
    hosts' `registered_door` hands that very object to the trigger and the worker loop
    (tests/integration/test_consumers_through_the_door.py runs it in both hosts)."""
    found = copy.python(DOOR_OF_ITS_OWN)
    assert found == {"door": True, "consumer": "notifications", "driven_as_it_is": True}


def test_the_function_app_indexes_a_trigger_for_it(copy: Copy) -> None:
    functions = indexed_functions(copy.root, copy.env)
    (binding,) = functions["notify_customer"]
    assert binding["type"] == "serviceBusTrigger"
    assert binding["topicName"] == "%ORDER_EVENTS_TOPIC%"
    assert binding["subscriptionName"] == "%NOTIFICATIONS_SUBSCRIPTION%"
    assert binding["autoCompleteMessages"] is False
    # Every function the app had is still there, as it was.
    assert functions.items() >= indexed_functions().items()


@pytest.fixture
def copied_infra(copy: Copy, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Bicep model reads the copy's infra/ (its parse cache emptied before and after)."""
    bicep_model.parse.cache_clear()
    monkeypatch.setattr(bicep_model, "INFRA", copy.root / "infra")
    yield
    bicep_model.parse.cache_clear()


@pytest.mark.usefixtures("copied_infra")
def test_the_bicep_deploys_its_subscription_role_setting_and_output() -> None:
    messaging = "modules/messaging.bicep"
    subscription = named_resource(messaging, SUBSCRIPTION, "notifications")
    assert subscription.body["parent"] == "topic"
    assert resolve(messaging, subscription.body["properties"]["maxDeliveryCount"]) == 10
    site = next(
        r for r in resources(parse("modules/functionapp.bicep")) if r.type.endswith("sites")
    )
    settings = resolve(
        "modules/functionapp.bicep", site.body["properties"]["siteConfig"]["appSettings"]
    )
    assert {"name": "NOTIFICATIONS_SUBSCRIPTION", "value": "notifications"} in settings
    roles = list(resources(parse("modules/roles.bicep")))
    receivers = [
        r for r in roles if str(r.body.get("scope", "")).startswith("consumerSubscriptions[")
    ]
    assert [r.body["scope"] for r in receivers][-1] == "consumerSubscriptions[2]"
    assert {r.condition for r in receivers} == {"grantUserSubscriptions"}
    scopes = [r.body["name"] for r in roles if r.type == SUBSCRIPTION and r.existing]
    assert resolve("modules/roles.bicep", scopes[-1]) == "notifications"
    output = resolve(
        "main.bicep", parse("main.bicep")["outputs"]["ORDER_EVENTS_SUBSCRIPTIONS"]["value"]
    )
    assert {"name": "notifications", "setting": "NOTIFICATIONS_SUBSCRIPTION"} in output


def test_the_emulators_topologies_have_its_subscription(copy: Copy) -> None:
    local = copy.python(
        "import json\n"
        "from orders.entrypoints.localstack import QueueOptions\n"
        "print(json.dumps(QueueOptions().config()))\n"
    )
    official = json.loads((copy.root / OFFICIAL_CONFIG).read_text(encoding="utf-8"))
    for config in (local, official):
        (namespace,) = config["UserConfig"]["Namespaces"]
        (topic,) = namespace["Topics"]
        assert "notifications" in [s["Name"] for s in topic["Subscriptions"]]


RUN_ON_EMULATORS = """
import asyncio, json, time
from datetime import UTC, datetime
from decimal import Decimal

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from orders.adapters.cosmos_client import prepare_local_cosmos
from orders.adapters.cosmos_client import create_cosmos_client, inbox_container
from orders.domain.events import OrderAccepted
from orders.domain.messages import OrderPlaced
from orders.entrypoints.localstack import local_stack

ORDER = OrderPlaced.model_validate(
    {"orderId": "o-notify-1", "customerId": "c-1", "currency": "EUR",
     "lines": [{"sku": "s", "quantity": 1, "unitPrice": Decimal("12.5")}]}
)
EVENT = OrderAccepted.of(ORDER, total_amount="12.5", accepted_at=datetime.now(UTC))


async def publish(settings):
    connection = settings.servicebus_connection_string
    async with ServiceBusClient.from_connection_string(connection) as bus:
        async with bus.get_topic_sender(settings.order_events_topic) as sender:
            message = ServiceBusMessage(EVENT.body(), message_id=EVENT.event_id)
            await sender.send_messages(message)


async def record(settings):
    async with create_cosmos_client(settings) as client:
        container = inbox_container(client, settings)
        return await container.read_item(f"notification:{EVENT.order_id}", EVENT.order_id)


with local_stack() as stack:
    settings = stack.settings()
    asyncio.run(prepare_local_cosmos(settings))
    worker = stack.start_subscriber("notifications")
    asyncio.run(publish(settings))
    deadline = time.monotonic() + 60
    while not worker.decisions() and time.monotonic() < deadline:
        time.sleep(0.2)
    decisions = worker.decisions()
    stored = asyncio.run(record(settings))
print(json.dumps({"decisions": decisions, "stored": stored}, default=str))
"""


@pytest.mark.slow
def test_it_runs_on_our_emulators(copy: Copy) -> None:
    """`orders worker --subscription notifications` from the copy, on our two emulators: an
    OrderAccepted published to the topic reaches it, is recorded and completed."""
    found = copy.python(RUN_ON_EMULATORS, timeout=110)
    (decision,) = found["decisions"]
    assert (decision["outcome"], decision["settlement"]) == ("processed", "complete")
    assert found["stored"]["type"] == "notification"
    assert found["stored"]["orderId"] == "o-notify-1"
