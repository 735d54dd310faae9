"""Stopping the local stack (what Ctrl-C on `orders up` does), on real child processes: all
services get SIGTERM at once, each is reported as it exits, the emulators go last, and one that
ignores SIGTERM is killed after the timeout and reported as such."""

from __future__ import annotations

import re
from pathlib import Path

from orders.entrypoints.localstack import LocalStack, _wait_for_line, stop_together

READY = re.compile(r"ready")
# Exits on SIGTERM after `delay` seconds (a drain), or never when `delay` is negative.
CHILD = """
import signal, sys, time
delay = float(sys.argv[1])
def on_term(*_):
    if delay >= 0:
        time.sleep(delay)
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    signal.pause()
"""


def spawn(stack: LocalStack, name: str, delay: float) -> None:
    _wait_for_line(stack.spawn(name, ["-c", CHILD, str(delay)]), READY)


def test_services_stop_together_and_each_is_reported_as_it_stops(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    spawn(stack, "servicebus-emulator", 0)
    spawn(stack, "worker-1", 1.0)
    spawn(stack, "http-api", 0)
    lines: list[str] = []

    stack.stop(lines.append)

    assert lines[0] == "stopping worker-1, http-api"
    # Together: the quick one is reported first, before the one that drains.
    assert re.fullmatch(r"stopped http-api in \d+\.\d s", lines[1])
    assert re.fullmatch(r"stopped worker-1 in \d+\.\d s", lines[2])
    assert lines[3:5] == ["stopping servicebus-emulator", lines[4]]
    assert lines[4].startswith("stopped servicebus-emulator in ")
    assert not any(process.running for process in stack.processes)


def test_a_process_that_ignores_sigterm_is_killed_and_reported(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    spawn(stack, "stubborn", -1)
    lines: list[str] = []

    stop_together(stack.processes, lines.append, timeout=0.5)

    assert lines == ["stopping stubborn", "killed stubborn: it did not stop in 0.5 s"]
    assert stack.processes[0].process.returncode == -9
