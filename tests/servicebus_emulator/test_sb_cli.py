"""`python -m servicebus_emulator` in its own process, driven by the SDK from this one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator import connection_string

REPO = Path(__file__).resolve().parents[2]


def test_cli_serves_the_project_config_and_stops_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servicebus_emulator",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--config",
            str(REPO / "emulators" / "servicebus" / "config.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(r"servicebus-emulator listening on 127\.0\.0\.1:(\d+)\n", line)
        assert match, f"unexpected first line {line!r}"
        port = int(match.group(1))
        with ServiceBusClient.from_connection_string(
            connection_string("127.0.0.1", port)
        ) as client:
            with client.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage("cli", message_id="cli-1"))
            with client.get_queue_receiver("orders") as receiver:
                (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
                assert str(msg) == "cli"
                receiver.complete_message(msg)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == ""  # exactly one line on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_cli_refuses_an_unsupported_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        '{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [],'
        '"Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r",'
        '"Properties": {"FilterType": "Sql",'
        '"SqlFilter": {"SqlExpression": "newid() = 1"}}}]}]}]}],'
        '"Logging": {"Type": "File"}}}',
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "servicebus_emulator", "--port", "0", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert result.returncode == 2
    assert "function newid() is not supported" in result.stderr
    assert result.stdout == ""
