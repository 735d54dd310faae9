"""Every fenced shell command of README.md and docs/*.md is classified, and the local ones run
as written against a stack this test starts the way the docs say (their exit codes and the
output they show are checked). A new command fails until it is classified in `CLASSIFIED`.

Ports the docs show (8000, 8765, 42017, 42383) are replaced by the free ports the documented
servers really took; everything else runs verbatim from the repository root.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from documented_commands import (
    REPO,
    DocCommand,
    Kind,
    every_command,
    key,
    parse_http_output,
    shape_differences,
)
from servers import free_port

from orders.settings import EMULATOR_COSMOS_KEY

BODY = (
    'BODY=\'{"orderId":"o-1001","customerId":"c-42","currency":"EUR","lines":'
    '[{"sku":"apple","quantity":2,"unitPrice":1.25}]}\''
)
JSON = "-H 'Content-Type: application/json'"

# The reviewed classification: one entry per command, as `key()` spells it. Add a new
# documented command here (the failure message prints its key); remove one the docs dropped.
CLASSIFIED: dict[str, Kind] = {
    # README.md, Quick start: minutes each (the demo; the whole suite).
    "make demo": Kind.LONG_RUNNING,
    "make test": Kind.LONG_RUNNING,
    # README.md, HTTP API: `orders up` runs until Ctrl-C; its API is the one docs/http-api.md
    # starts with `orders serve`, so the curls below run against that.
    ".venv/bin/orders up": Kind.LONG_RUNNING,
    BODY: Kind.LOCAL,
    "curl -i -X POST http://127.0.0.1:8000/api/orders -H 'Idempotency-Key: 7c1f3a52' "
    f'{JSON} -d "$BODY"': Kind.LOCAL,
    "curl -i http://127.0.0.1:8000/api/orders/o-1001": Kind.LOCAL,
    # docs/http-api.md, Trying it.
    ".venv/bin/python -m servicebus_emulator --port 0 --config emulators/servicebus/config.json": (
        Kind.SERVER
    ),
    ".venv/bin/python -m cosmos_emulator --port 0": Kind.SERVER,
    "export COSMOS_ENDPOINT=http://127.0.0.1:42383/": Kind.LOCAL,
    f"export COSMOS_KEY='{EMULATOR_COSMOS_KEY}'": Kind.LOCAL,
    "export ServiceBusConnection='Endpoint=sb://127.0.0.1:42017;SharedAccessKeyName="
    "RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;'": (
        Kind.LOCAL
    ),
    "export ORDERS_QUEUE=orders": Kind.LOCAL,
    "export ORDERS_DUPLICATE_WINDOW_SECONDS=60": Kind.LOCAL,
    ".venv/bin/orders serve --port 8765": Kind.SERVER,
    ".venv/bin/orders worker": Kind.SERVER,
    "curl -i -X POST http://127.0.0.1:8765/api/orders -H 'Idempotency-Key: 7c1f3a52-order-1001' "
    f'{JSON} -d "$BODY"': Kind.LOCAL,
    "curl -i http://127.0.0.1:8765/api/orders/o-1001": Kind.LOCAL,
    "curl -s http://127.0.0.1:8765/api/orders/o-1001": Kind.LOCAL,
    "curl -i -X POST http://127.0.0.1:8765/api/orders -H 'Idempotency-Key: 7c1f3a52-order-1001' "
    f'{JSON} -d "${{BODY/EUR/USD}}"': Kind.LOCAL,
    f'curl -i -X POST http://127.0.0.1:8765/api/orders {JSON} -d "$BODY"': Kind.LOCAL,
    ".venv/bin/orders dlq list --topic order-events --subscription billing --json": Kind.LOCAL,
}
# Documented example ports -> the documented server whose real port replaces them.
EXAMPLE_PORTS = {"42017": "servicebus_emulator", "42383": "cosmos_emulator"}
API_EXAMPLE_PORTS = ("8765", "8000")
LISTENING = re.compile(r"listening on (?:https?://)?[\d.]+:(\d+)")
# Comments that say the documented answer comes once the worker has run.
EVENTUALLY = re.compile(r"\b(after|once)\b")


def test_every_documented_command_is_classified() -> None:
    documented = {key(command): command for command in every_command()}
    unclassified = [f"{c.where}: {k!r}" for k, c in documented.items() if k not in CLASSIFIED]
    stale = [k for k in CLASSIFIED if k not in documented]
    assert not unclassified, "classify these in CLASSIFIED:\n" + "\n".join(unclassified)
    assert not stale, "no longer documented; remove from CLASSIFIED:\n" + "\n".join(stale)


def test_the_extraction_sees_continuations_prompts_and_outputs() -> None:
    commands = {key(command): command for command in every_command()}
    retry = next(c for k, c in commands.items() if "-H 'Idempotency-Key: 7c1f3a52-order" in k)
    assert retry.console and retry.output[0].startswith("HTTP/1.1 ")
    assert commands["make demo"].comment.startswith("the whole pipeline")


class Walkthrough:
    """The documented commands in one environment, as a reader's shells would hold it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.env = {**os.environ, "HOME": str(workdir), "NO_COLOR": "1", "COLUMNS": "200"}
        for name in ("ServiceBusConnection", "COSMOS_ENDPOINT", "COSMOS_KEY", "ORDERS_QUEUE"):
            self.env.pop(name, None)
        self.ports: dict[str, str] = {}
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        # `.venv/bin/` is where `make setup` installs; another interpreter's bin runs the same.
        self.bin = f"{Path(sys.executable).parent}/"

    def substitute(self, text: str) -> str:
        text = text.replace(".venv/bin/", self.bin)
        for documented, real in self.ports.items():
            text = text.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{real}")
            text = text.replace(f"--port {documented}", f"--port {real}")
        return text

    def start(self, command: DocCommand) -> None:
        name = re.sub(r"\W+", "-", command.text)[:60]
        if "--port 8765" in command.text:
            port = str(free_port())
            self.ports.update(dict.fromkeys(API_EXAMPLE_PORTS, port))
        log = self.workdir / f"{name}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-c", "exec " + self.substitute(command.text)],
                cwd=REPO,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append((command.text, process))
        documented_port = next((p for p, m in EXAMPLE_PORTS.items() if m in command.text), None)
        if documented_port is not None:
            self.ports[documented_port] = self._listening_port(log, process)
        elif "serve" in command.text:
            self._wait_for_http(self.ports["8765"], process, log)

    def _listening_port(self, log: Path, process: subprocess.Popen[bytes]) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = LISTENING.search(log.read_text(errors="replace"))
            if found:
                return found.group(1)
            assert process.poll() is None, log.read_text(errors="replace")
            time.sleep(0.05)  # polling a child's log for its ready line; bounded
        raise AssertionError(f"no 'listening on' line in {log}")

    def _wait_for_http(self, port: str, process: subprocess.Popen[bytes], log: Path) -> None:
        import socket

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                with socket.create_connection(("127.0.0.1", int(port)), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)  # polling a port that is not yet bound; bounded
        raise AssertionError(f"nothing listened on {port}: {log.read_text(errors='replace')}")

    def run(self, command: DocCommand, prelude: list[str]) -> subprocess.CompletedProcess[str]:
        script = "\n".join([*prelude, self.substitute(command.text)])
        return subprocess.run(
            ["bash", "-c", script],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def stop(self) -> None:
        for _, process in reversed(self.processes):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
        for _, process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@pytest.fixture(scope="session")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walkthrough]:
    """The servers the docs start, started as the docs start them, with their exports."""
    running = Walkthrough(tmp_path_factory.mktemp("documented-stack"))
    try:
        for command in every_command():
            if CLASSIFIED.get(key(command)) is not Kind.SERVER:
                continue
            running.start(command)
            if "cosmos_emulator" in command.text:
                # The exports sit between the emulators and `orders serve` in the docs.
                for export in every_command():
                    if export.text.startswith("export ") and export.document == command.document:
                        name, _, value = export.text.removeprefix("export ").partition("=")
                        running.env[name] = running.substitute(_unquoted(value))
        yield running
    finally:
        running.stop()
    left = [name for name, process in running.processes if process.poll() is None]
    assert not left, f"left running: {left}"


def _unquoted(value: str) -> str:
    import shlex

    [word] = shlex.split(value)
    return word


def _expected_statuses(comment: str) -> set[int]:
    return {int(code) for code in re.findall(r"\b([1-5]\d\d)\b", comment)}


def _mismatch(command: DocCommand, result: subprocess.CompletedProcess[str]) -> str | None:
    """Why the command's result is not what its docs show, or None."""
    if result.returncode != 0:
        return f"exit {result.returncode}: {result.stderr[-1000:]}"
    actual = parse_http_output(result.stdout.splitlines())
    if command.output:
        documented = parse_http_output(command.output)
        if documented.status is not None and documented.status != actual.status:
            return f"status {actual.status}, documented {documented.status}\n{result.stdout}"
        missing = documented.headers - actual.headers
        if missing:
            return f"headers {sorted(missing)} documented, not sent\n{result.stdout}"
        differences = shape_differences(documented.body, actual.body)
        if differences:
            return "\n".join([*differences, result.stdout])
    expected = _expected_statuses(command.comment) if "curl -i" in command.text else set()
    if expected and actual.status not in expected:
        return f"status {actual.status}, documented {sorted(expected)}"
    return None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_local_commands_run_as_documented(walkthrough: Walkthrough) -> None:
    by_document: dict[str, list[DocCommand]] = {}
    for command in every_command():
        by_document.setdefault(command.document, []).append(command)
    # The docs that start servers first: README's curls use the API they start.
    ordered = sorted(by_document, key=lambda name: name == "README.md")
    failures: list[str] = []
    ran = 0
    for document in ordered:
        prelude: list[str] = []
        for command in by_document[document]:
            if CLASSIFIED.get(key(command)) is not Kind.LOCAL:
                continue
            if command.text.startswith("export "):
                continue  # applied to the environment by the fixture
            if re.match(r"^[A-Z_]+=", command.text):
                prelude.append(command.text)  # a shell variable the next commands use
                continue
            deadline = time.monotonic() + (60 if EVENTUALLY.search(command.comment) else 0)
            while True:
                why = _mismatch(command, walkthrough.run(command, prelude))
                if why is None or time.monotonic() >= deadline:
                    break
                time.sleep(0.2)  # the worker stores the order in its own time; bounded
            ran += 1
            if why is not None:
                failures.append(f"{command.where}: {command.text}\n{why}")
    assert ran >= 8, f"only {ran} documented commands ran"
    assert not failures, "\n\n".join(failures)
