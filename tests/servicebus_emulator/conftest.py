"""Shared fixtures: an emulator per test on a free port, with short lock / window settings."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sb_process import PROCESS_OTHER_QUEUE, PROCESS_QUEUE, EmulatorProcess
from sb_support import queue_config, queue_entry

from servicebus_emulator import RunningEmulator, start_in_background


@pytest.fixture
def queue_name() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_emulator() -> Iterator[Callable[..., RunningEmulator]]:
    """Start emulators with custom queue properties; all are stopped at teardown."""
    started: list[RunningEmulator] = []

    def make(queue: str, **properties: Any) -> RunningEmulator:
        emu = start_in_background(config=queue_config(queue_entry(queue, **properties)))
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.stop()


@pytest.fixture
def make_config_emulator() -> Iterator[Callable[[dict[str, Any]], RunningEmulator]]:
    """Start emulators from whole official-format configs; all are stopped at teardown."""
    started: list[RunningEmulator] = []

    def make(config: dict[str, Any]) -> RunningEmulator:
        emu = start_in_background(config=config)
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.stop()


@pytest.fixture
def emulator(make_emulator: Callable[..., RunningEmulator], queue_name: str) -> RunningEmulator:
    """An emulator with one queue (`queue_name`): lock 2 s, dedup window 2 s, 3 deliveries."""
    return make_emulator(queue_name)


@pytest.fixture
def project_emulator() -> Iterator[RunningEmulator]:
    """An emulator serving the project's own `emulators/servicebus/config.json` (queue `orders`)."""
    config = Path(__file__).resolve().parents[2] / "emulators" / "servicebus" / "config.json"
    with start_in_background(config) as emu:
        yield emu


@pytest.fixture(scope="module")
def emulator_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    """The emulator in its own process (queues `PROCESS_QUEUE`, `PROCESS_OTHER_QUEUE`), shared
    by one test module, so tests can read its memory from /proc; stopped by its own pid."""
    proc = EmulatorProcess(
        queue_config(queue_entry(PROCESS_QUEUE), queue_entry(PROCESS_OTHER_QUEUE)),
        tmp_path_factory.mktemp("sb-process"),
    )
    yield proc
    proc.stop()
