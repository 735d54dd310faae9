"""The natural path (issue 35, docs/order-path.md): one order message through the Functions
entry to its settlement, on our Cosmos emulator through the real SDK, with the modules of the
app (`orders`) and the core (`exactly_once`) it passes through recorded.

The rule: the path is the chain of calls that carries the message to the outside world, twice:
to the store's write (the SDK's transactional batch) and to its settlement (the hand-off to the
host's message actions). A step is entering a module different from its caller's on that
chain; frames of one module in a row are one step; the SDKs, the standard library and the test
are no steps. The settlement's chain counts from where it leaves the write's. Helpers a step
calls and returns from on the way (parsing, hashing, laying out documents, telemetry) are not on
the chain, so not on the path.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
from fakes import FakeMessageActions, order_payload
from sdk_messages import received_message
from servers import CosmosServer

import function_app
import orders.adapters.process_clients as process_clients
from orders.entrypoints.functions import function_subscriber_runtimes
from orders.service.registry import ORDERS

# Whose modules count: the app's and the core's.
COUNTED = ("orders", "exactly_once")
MAX_STEPS = 10


def module_of(frame: FrameType | None) -> str:
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


def counted(module: str) -> bool:
    return any(module == package or module.startswith(f"{package}.") for package in COUNTED)


# Where the message's work meets the outside: the SDK's transactional batch (the order, its
# outbox event and lines in one write) and the host's settlement of the message.
WRITE = ("azure.cosmos.aio._container", "execute_item_batch")
# (The Functions host's message actions block, so the core's settler hands them to a thread.)
SETTLEMENT = ("asyncio.threads", "to_thread")


def chain(frame: FrameType | None) -> list[str]:
    """The app's and the core's modules on the stack below `frame`, outermost first, each run
    of frames in one module one entry."""
    modules: list[str] = []
    while frame is not None:
        module = module_of(frame)
        if counted(module) and (not modules or modules[-1] != module):
            modules.append(module)
        frame = frame.f_back
    return modules[::-1]


@contextmanager
def stacks_at(*places: tuple[str, str]) -> Iterator[dict[tuple[str, str], list[str]]]:
    """The chain of modules that called each place, the last time it was called (the message's
    settlement is the last hand-off to a thread; the store's client may hand some off too)."""
    found: dict[tuple[str, str], list[str]] = {}

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event != "call":
            return
        place = (module_of(frame), frame.f_code.co_name)
        if place in places:
            found[place] = chain(frame.f_back)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield found
    finally:
        sys.setprofile(previous)


def path_of(write: list[str], settlement: list[str]) -> list[str]:
    """The write's chain, then the settlement's from where it leaves the write's."""
    shared = 0
    while shared < min(len(write), len(settlement)) and write[shared] == settlement[shared]:
        shared += 1
    return write + settlement[shared:]


@pytest.fixture
async def functions_host(
    python_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    """The Functions host's app settings, its order runtime built and warmed by one message."""
    for name, value in {
        "COSMOS_ENDPOINT": python_cosmos.endpoint,
        "COSMOS_KEY": python_cosmos.key,
        "COSMOS_DATABASE": f"order-path-{uuid.uuid4().hex[:8]}",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(process_clients, "_shared_clients", None)
    try:
        await deliver(f"o-warm-{uuid.uuid4().hex[:8]}")
        yield
    finally:
        await function_subscriber_runtimes[ORDERS].close()
        await process_clients.shared_process_clients().close()


async def deliver(order_id: str) -> FakeMessageActions:
    actions = FakeMessageActions()
    message = received_message(order_id, data=json.dumps(order_payload(order_id)).encode())
    trigger = function_app.consumer_triggers[ORDERS]
    await trigger(received_message=message, message_actions=actions)
    return actions


async def the_path_of_one_order(order_id: str) -> list[str]:
    with stacks_at(WRITE, SETTLEMENT) as stacks:
        actions = await deliver(order_id)

    assert [name for name, _, _ in actions.calls] == ["complete"]
    assert WRITE in stacks and SETTLEMENT in stacks, stacks
    return path_of(stacks[WRITE], stacks[SETTLEMENT])


async def test_an_order_message_goes_from_the_trigger_to_its_settlement_in_at_most_10_steps(
    functions_host: None,
) -> None:
    path = await the_path_of_one_order(f"o-{uuid.uuid4().hex[:8]}")

    assert path[0] == "orders.entrypoints.functions"
    assert path[-1] == "exactly_once.servicebus"  # the core's settler, handing off to the host
    assert len(path) <= MAX_STEPS, path
    # Only the door is entered again: its backoff calls back into it, and its settler settles.
    again = {module for module in path if path.count(module) > 1}
    assert again <= {"exactly_once.servicebus"}, f"a module entered twice: {path}"


# The guide's door, then the order consumer, which writes through the core's document store
# directly: no adapter of the app between the consumer and the core's CosmosStore.
NATURAL_PATH = [
    "orders.entrypoints.functions",  # the trigger's body: the guide's one call
    "exactly_once.servicebus",  # the door: with_message_actions, one span per delivery
    "exactly_once._backoff",  # a transient failure decided again after a backoff
    "exactly_once.servicebus",  # the door decides: the message read whole, the error frame
    "orders.adapters.servicebus_consumers",  # the door's effect: the consumer's core
    "orders.service.consumer",  # parse, hash, lay out the order's documents
    "exactly_once._orchestrator",  # create_or_find: the order document is its own marker
    "exactly_once.cosmos",  # the core's CosmosStore: one transactional batch
    "exactly_once.decisions",  # settle(): the decision's one mapping to the broker
    "exactly_once.servicebus",  # the core's settler over the host's message actions
]


async def test_the_order_path_is_the_natural_one(functions_host: None) -> None:
    path = await the_path_of_one_order(f"o-{uuid.uuid4().hex[:8]}")

    assert path == NATURAL_PATH
