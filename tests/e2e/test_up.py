"""`orders up` as a user runs it: everything comes up, works end to end, and Ctrl-C leaves no
process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
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


def test_up_serves_the_whole_stack_and_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    directory = tmp_path / "local"
    port = free_port()
    log = tmp_path / "up.log"
    with log.open("wb") as output:
        up = subprocess.Popen(
            [sys.executable, "-m", "orders", "up", "--workers", "1", "--port", str(port),
             "--dir", str(directory)],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        poll_until(lambda: "ready" in log.read_text(), 120, "orders up to report ready")
        exports = subprocess.run(
            [sys.executable, "-m", "orders", "env", "--dir", str(directory)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        settings = json.loads((directory / "local.settings.json").read_text())["Values"]
        api = f"http://127.0.0.1:{port}"
        order_id = f"o-up-{port}"
        posted = httpx.post(
            f"{api}/api/orders", json=order_payload(order_id), headers={"Idempotency-Key": "k"}
        )
        poll_until(
            lambda: httpx.get(f"{api}/api/orders/{order_id}").status_code == 200,
            60,
            "the order to be stored by the worker",
        )
        # After the order: the dispatcher, billing (the payment stand-in), shipping and the
        # status consumer all run, so the order moves on to `shipped` (version 3).
        poll_until(
            lambda: httpx.get(f"{api}/api/orders/{order_id}").json()["statusVersion"] == 3,
            60,
            "billing and shipping to move the order on through the status consumer",
        )
        # The console: its URL printed, its pages served, the worker's decision counted.
        console_page = httpx.get(f"{api}/console")
        poll_until(
            lambda: httpx.get(f"{api}/console/api/counters").json()["totals"]["processed"] >= 1,
            30,
            "the console to count the worker's decision",
        )
        started = processes_mentioning(str(directory)) + processes_mentioning(f"--port {port}")
    finally:
        os.kill(up.pid, signal.SIGINT)
        exit_code = up.wait(timeout=90)

    assert posted.status_code == 202
    assert f"operations console: {api}/console" in log.read_text()
    assert console_page.status_code == 200 and "<td>queue</td>" in console_page.text
    assert "export ServiceBusConnection=" in exports and "export COSMOS_ENDPOINT=" in exports
    assert settings["ORDERS_QUEUE"] == "orders" and settings["COSMOS_KEY"]
    assert settings["CosmosConnection"].startswith("AccountEndpoint=http://127.0.0.1:")
    assert settings["PAYMENTS_URL"].startswith("http://127.0.0.1:")
    # Those naming the folder or port: `orders up`, the Service Bus emulator (its config), the
    # payment stand-in (its data), the order worker, the billing, shipping and status consumers
    # (their journals) and the HTTP API (the port).
    assert len(set(started)) >= 8
    assert exit_code == 0, log.read_text()[-2000:]
    assert processes_mentioning(str(directory)) == []
    # The broker journaled its messages under the folder: a restart of `orders up` resumes them.
    assert (directory / "servicebus-data" / "servicebus-journal.jsonl").stat().st_size > 0
    assert processes_mentioning(f"--port {port}") == []
