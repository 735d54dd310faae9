"""`orders up` as a user runs it: everything comes up, works end to end, Ctrl-C says what it
stops and leaves no process behind, a restart resumes where it stopped, `--fresh` starts
empty."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from e2e_support import poll_until
from fakes import order_payload
from servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (this test's directory or port)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in command:
            found.append(int(entry.name))
    return found


def start_up(
    directory: Path, port: int, log: Path, env: dict[str, str], *extra: str
) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        up = subprocess.Popen(
            [sys.executable, "-m", "orders", "up", "--workers", "1", "--port", str(port),
             "--dir", str(directory), *extra],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )  # fmt: skip
    poll_until(lambda: "ready" in log.read_text() or up.poll() is not None, 120, "ready")
    assert up.poll() is None, log.read_text()[-3000:]
    return up


def ctrl_c(up: subprocess.Popen[bytes], log: Path) -> list[str]:
    """SIGINT as the terminal sends it; the lines `orders up` printed while stopping."""
    os.kill(up.pid, signal.SIGINT)
    assert up.wait(timeout=90) == 0, log.read_text()[-3000:]
    lines = log.read_text().splitlines()
    return lines[next(i for i, line in enumerate(lines) if "SIGINT" in line) :]


def peeked(directory: Path, entity: str, sub_queue: ServiceBusSubQueue | None) -> list[str]:
    """MessageIds waiting in a queue (or its dead-letter queue) of the running stack."""
    connection = json.loads((directory / "env.json").read_text())["ServiceBusConnection"]
    with (
        ServiceBusClient.from_connection_string(connection) as client,
        client.get_queue_receiver(entity, sub_queue=sub_queue) as receiver,
    ):
        return [str(m.message_id) for m in receiver.peek_messages(50, sequence_number=1)]


def test_ctrl_c_while_starting_stops_what_was_started(
    tmp_path: Path, reaped_env: dict[str, str]
) -> None:
    directory, log = tmp_path / "local", tmp_path / "up.log"
    with log.open("wb") as output:
        up = subprocess.Popen(
            [sys.executable, "-m", "orders", "up", "--workers", "1", "--port", str(free_port()),
             "--dir", str(directory)],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=reaped_env,
        )  # fmt: skip
    try:
        # The emulators are being started: their logs exist before they report ready.
        poll_until(lambda: (directory / "cosmos-emulator.log").exists(), 60, "the emulators")
    finally:
        os.kill(up.pid, signal.SIGINT)
        exit_code = up.wait(timeout=60)

    output_text = log.read_text()
    assert exit_code == 0, output_text[-3000:]
    assert "SIGINT: stopping the local stack" in output_text and "ready" not in output_text
    assert "stopped servicebus-emulator in" in output_text
    assert processes_mentioning(str(directory)) == []


GUIDE = Path(__file__).resolve().parents[2] / "packages/exactly-once/src/exactly_once/README.md"


def guide_consumer_and_entities() -> tuple[str, str]:
    """The core's guide as a reader copies it: its ```python blocks up to the entry point (the
    consumer and its worker), and its entities file (the ```json block)."""
    text = GUIDE.read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    entry = next(i for i, block in enumerate(blocks) if '__name__ == "__main__"' in block)
    [entities] = re.findall(r"^```json\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    return "\n\n".join(blocks[: entry + 1]), entities


def test_up_serves_the_stack_and_a_guide_consumer_ctrl_c_stops_it_all_a_restart_keeps_it_all(
    tmp_path: Path, reaped_env: dict[str, str]
) -> None:
    """One stack through its life (each `orders up` costs the two cores about ten seconds of
    CPU): served with a user's entities and a consumer written from the core's guide, stopped
    with Ctrl-C, restarted with all it held, restarted fresh.

    The guide's steps: its entities file to `orders up --entities`, `eval "$(orders env)"`, its
    consumer run as a script; no emulator config written by hand. Each message's outcome is one
    line of the consumer's own log."""
    consumer_code, entities = guide_consumer_and_entities()
    (tmp_path / "greetings-entities.json").write_text(entities)
    (tmp_path / "greetings.py").write_text(consumer_code)
    directory, port = tmp_path / "local", free_port()
    api = f"http://127.0.0.1:{port}"
    order_id = f"o-restart-{port}"
    consumer_log = tmp_path / "greetings.log"

    def outcome_lines() -> list[str]:
        return [
            line.split("exactly_once.outcomes:", 1)[1].split(" duration_ms=")[0].strip()
            for line in consumer_log.read_text().splitlines()
            if "exactly_once.outcomes:" in line
        ]

    def send_greetings(*messages: ServiceBusMessage) -> None:
        connection = json.loads((directory / "env.json").read_text())["ServiceBusConnection"]
        with (
            ServiceBusClient.from_connection_string(connection) as client,
            client.get_queue_sender("greetings") as sender,
        ):
            sender.send_messages(list(messages))

    # Given a stack with a stored order, a scheduled message, a dead letter and a user's queue
    first = start_up(
        directory, port, tmp_path / "first.log", reaped_env,
        "--entities", str(tmp_path / "greetings-entities.json"),
    )  # fmt: skip
    consumer: subprocess.Popen[bytes] | None = None
    try:
        exports = subprocess.run(
            [sys.executable, "-m", "orders", "env", "--dir", str(directory)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        settings = json.loads((directory / "local.settings.json").read_text())["Values"]
        posted = httpx.post(
            f"{api}/api/orders", json=order_payload(order_id), headers={"Idempotency-Key": "k"}
        )
        with consumer_log.open("wb") as output:
            consumer = subprocess.Popen(
                ["bash", "-c",
                 f'eval "$({sys.executable} -m orders env --dir {directory})" && '
                 f"exec {sys.executable} greetings.py"],
                cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True, env=reaped_env,
            )  # fmt: skip
        body = {"greeting_id": "g-1", "user_id": "u-1", "text": "hello"}
        send_greetings(ServiceBusMessage(json.dumps(body), message_id="g-1"))
        # The first alone: which of two bodies of one MessageId is the valid one is never a race.
        poll_until(lambda: len(outcome_lines()) == 1, 90, "the consumer to log its first outcome")
        send_greetings(
            ServiceBusMessage(json.dumps(body), message_id="g-1"),
            ServiceBusMessage(json.dumps({**body, "text": "bye"}), message_id="g-1"),
            ServiceBusMessage(b"{not json", message_id="poison-1"),
        )
        # The worker stores the order; the dispatcher, billing (the payment stand-in), shipping
        # and the status consumer all run, so it moves on to `shipped` (version 3).
        poll_until(
            lambda: httpx.get(f"{api}/api/orders/{order_id}").json().get("statusVersion") == 3,
            90,
            "the order to be stored, paid and shipped",
        )
        stored = httpx.get(f"{api}/api/orders/{order_id}").json()
        # The console: its URL printed, its pages served, the worker's decision counted.
        console_page = httpx.get(f"{api}/console")
        poll_until(
            lambda: httpx.get(f"{api}/console/api/counters").json()["totals"]["processed"] >= 1,
            30,
            "the console to count the worker's decision",
        )
        started = processes_mentioning(str(directory)) + processes_mentioning(f"--port {port}")
        connection = json.loads((directory / "env.json").read_text())["ServiceBusConnection"]
        with (
            ServiceBusClient.from_connection_string(connection) as client,
            client.get_queue_sender("orders") as sender,
        ):
            later = datetime.now(UTC) + timedelta(hours=1)
            sender.schedule_messages(ServiceBusMessage(b"{}", message_id="o-later"), later)
            sender.send_messages(ServiceBusMessage(b"{oops", message_id="o-poison"))
        poll_until(
            lambda: peeked(directory, "orders", ServiceBusSubQueue.DEAD_LETTER) == ["o-poison"],
            60,
            "the worker to dead-letter the poison message",
        )
        # A page that re-bound its domain to 127.0.0.1 cannot purge it.
        rebound = httpx.post(
            f"{api}/console/dead-letters/purge",
            data={"source": "orders", "sequence": "all", "confirm": "yes"},
            headers={"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}",
                     "Sec-Fetch-Site": "same-origin"},
        )  # fmt: skip
        poll_until(lambda: len(outcome_lines()) >= 4, 60, "the consumer to log four outcomes")
        consumer.send_signal(signal.SIGTERM)  # the guide's main stops on it
        consumer_exit = consumer.wait(timeout=60)
        send_greetings(
            ServiceBusMessage(json.dumps({**body, "greeting_id": "g-2"}), message_id="g-2")
        )
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
        stopping = ctrl_c(first, tmp_path / "first.log")
    left_running = processes_mentioning(str(directory)) + processes_mentioning(f"--port {port}")
    journaled = (directory / "servicebus-data" / "servicebus-journal.jsonl").stat().st_size

    # When it is stopped with Ctrl-C and started again, without --entities
    second = start_up(directory, port, tmp_path / "second.log", reaped_env)
    try:
        again = httpx.get(f"{api}/api/orders/{order_id}")
        scheduled = peeked(directory, "orders", None)
        dead_letters = peeked(directory, "orders", ServiceBusSubQueue.DEAD_LETTER)
        waiting_greetings = peeked(directory, "greetings", None)
    finally:
        ctrl_c(second, tmp_path / "second.log")

    # And once more with --fresh
    third = start_up(directory, port, tmp_path / "third.log", reaped_env, "--fresh")
    try:
        forgotten = httpx.get(f"{api}/api/orders/{order_id}")
        fresh_dead_letters = peeked(directory, "orders", ServiceBusSubQueue.DEAD_LETTER)
    finally:
        ctrl_c(third, tmp_path / "third.log")

    first_log = (tmp_path / "first.log").read_text()
    assert posted.status_code == 202
    assert f"operations console: {api}/console" in first_log
    assert console_page.status_code == 200 and "<td>queue</td>" in console_page.text
    assert "export ServiceBusConnection=" in exports and "export COSMOS_ENDPOINT=" in exports
    assert settings["ORDERS_QUEUE"] == "orders" and settings["COSMOS_KEY"]
    assert settings["CosmosConnection"].startswith("AccountEndpoint=http://127.0.0.1:")
    assert settings["PAYMENTS_URL"].startswith("http://127.0.0.1:")
    # The guide's consumer: each outcome one line of its log, its entities added by `up`.
    lines = outcome_lines()
    assert lines[0] == "consumer=greetings key=g-1 outcome=processed settlement=complete"
    assert sorted(lines[1:]) == [
        "consumer=greetings key=g-1 outcome=duplicate settlement=complete",
        "consumer=greetings key=g-1 outcome=mismatch settlement=dead_letter"
        " reason=RequestHashMismatch",
        "consumer=greetings key=poison-1 outcome=rejected settlement=dead_letter"
        " reason=InvalidMessage",
    ]
    assert consumer_exit == 0, consumer_log.read_text()[-3000:]
    assert "your entities from" in first_log
    assert "queue greetings, container greetings/cards" in first_log
    # Those naming the folder or port: `orders up`, the Service Bus emulator (its config), the
    # payment stand-in (its data), the order worker, the billing, shipping and status consumers
    # (their journals) and the HTTP API (the port); none is left after Ctrl-C.
    assert len(set(started)) >= 8
    assert left_running == []
    # The broker journaled its messages under the folder: the restart below resumes them.
    assert journaled > 0
    assert rebound.status_code == 421
    assert rebound.headers["content-type"].startswith("application/problem+json")
    # Ctrl-C says what it stops, each process as it stops, services before the emulators.
    assert stopping[0] == "SIGINT: stopping the local stack"
    assert stopping[1].startswith("stopping worker-1, dispatcher-1, billing-1")
    stopped = [line.split()[1] for line in stopping if line.startswith("stopped ")]
    assert set(stopped[:6]) == {"worker-1", "dispatcher-1", "billing-1", "shipping-1",
                                "status-1", "http-api"}  # fmt: skip
    assert set(stopped[6:9]) == {"servicebus-emulator", "cosmos-emulator", "payments-standin"}
    assert stopping[-1] == "stopped"
    # The restart kept the order, the scheduled message, the dead letter, and the user's
    # entities (added again from the folder) with the greeting sent while the consumer was away.
    assert again.status_code == 200 and again.json() == stored
    assert scheduled == ["o-later"] and dead_letters == ["o-poison"]
    assert waiting_greetings == ["g-2"]
    assert (
        f"your entities from {directory / 'entities.json'}: queue greetings"
        in (tmp_path / "second.log").read_text()
    )
    # --fresh forgot them all.
    assert forgotten.status_code == 404 and fresh_dead_letters == []
    assert f"--fresh: deleted {directory / 'payments'}" in (tmp_path / "third.log").read_text()
