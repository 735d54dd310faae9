"""The emulator as a separate process, so tests can read its memory from /proc."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from servicebus_emulator import connection_string

REPO = Path(__file__).resolve().parents[2]
PROCESS_QUEUE = "robust"
# A second queue for traffic that round-trip probes on PROCESS_QUEUE should not wade through.
PROCESS_OTHER_QUEUE = "robust-other"
# How much the emulator's resident memory may grow while a test attacks it. Generous: the
# failures it catches grow by gigabytes (an unbounded loop, an unread output buffer).
RSS_MARGIN = 96 * 1024 * 1024
_READY = re.compile(r"servicebus-emulator listening on 127\.0\.0\.1:(\d+)\n")


class EmulatorProcess:
    """`python -m servicebus_emulator` on a free port; stopped by its own process id."""

    def __init__(
        self, config: dict[str, Any], workdir: Path, extra_args: tuple[str, ...] = ()
    ) -> None:
        config_path = workdir / "servicebus-config.json"
        config_path.write_text(json.dumps(config))
        self.stderr_path = workdir / "servicebus-emulator.stderr"
        self._stderr = self.stderr_path.open("ab")  # a restart on the same workdir appends
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servicebus_emulator",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--config",
                str(config_path),
                "--log-level",
                "ERROR",  # internal errors (tracebacks) only: tests assert there are none
                *extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the emulator prints one line once it listens
        match = _READY.fullmatch(line)
        if match is None:
            stderr = self.stderr()  # read before stop() closes the file
            self.stop()
            raise RuntimeError(f"emulator did not start: {line!r} {stderr}")
        self.host = "127.0.0.1"
        self.port = int(match.group(1))
        self.pid = self.proc.pid
        self.connection_string = connection_string(self.host, self.port)

    def rss_bytes(self) -> int:
        """Resident memory of the emulator process (VmRSS)."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
        assert match is not None, status
        return int(match.group(1)) * 1024

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the emulator (a crash)."""
        self.proc.kill()
        self.proc.wait()
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a broker stuck in a loop ignores SIGTERM
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


def wait_until(condition: Any, timeout: float, interval: float = 0.02) -> bool:
    """Poll `condition()` until it is true or `timeout` seconds pass; returns the last result."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def assert_serves_sdk_client(conn_str: str, queue: str) -> None:
    """A well-behaved SDK client can send a message and receive it back."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    marker = f"probe-{time.monotonic_ns()}"
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(marker, message_id=marker))
        with client.get_queue_receiver(queue) as receiver:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                for msg in receiver.receive_messages(max_message_count=1, max_wait_time=2):
                    receiver.complete_message(msg)
                    if str(msg) == marker:
                        return
    raise AssertionError(f"the SDK client did not get its message {marker} back")
