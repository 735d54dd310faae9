"""The payment service stand-in as a process of its own: free port, stopped by its pid."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

SRC = Path(__file__).resolve().parents[1] / "src"
READY_PREFIX = "payments-standin listening on "
FAULT_TOKEN_ENV = "PAYMENTS_STANDIN_FAULT_TOKEN"
MONEY_TOKEN_ENV = "PAYMENTS_STANDIN_TOKEN"


@dataclass(frozen=True)
class StandinProcess:
    process: subprocess.Popen[str]
    url: str
    fault_token: str
    token: str  # what `POST /payments` and `POST /refunds` need (the app's PAYMENTS_TOKEN)

    def fault_headers(self) -> dict[str, str]:
        """What a tool sends to `/faults` (a JSON body goes with `Content-Type` of its own)."""
        return {"Authorization": f"Bearer {self.fault_token}"}

    def payments_headers(self) -> dict[str, str]:
        """What the app's payment client sends to the money routes."""
        return {"Authorization": f"Bearer {self.token}"}

    def auth(self) -> httpx.Auth:
        """Each route's token, as the operator's tools and the app hold them."""
        return StandinAuth(self)

    def signal(self, signum: int) -> int:
        """Send `signum` and wait for the exit; returns the exit code."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signum)
        code = self.process.wait(timeout=10)
        # The exited child writes nothing more: close our end (else a ResourceWarning).
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.signal(signal.SIGTERM)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)


def start_standin(data: Path | None = None, *extra: str) -> StandinProcess:
    """Started as `orders up` starts it: the fault token in its environment."""
    fault_token, token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    command = [sys.executable, "-m", "payments_standin", "--host", "127.0.0.1", "--port", "0"]
    if data is not None:
        command += ["--data", str(data)]
    process = subprocess.Popen(
        [*command, *extra],
        stdout=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": str(SRC),
            FAULT_TOKEN_ENV: fault_token,
            MONEY_TOKEN_ENV: token,
        },
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith(READY_PREFIX):
        process.kill()
        process.wait(timeout=10)
        process.stdout.close()
        raise RuntimeError(f"the stand-in did not start: {line!r}")
    return StandinProcess(process, "http://" + line.removeprefix(READY_PREFIX), fault_token, token)


class StandinAuth(httpx.Auth):
    """`Authorization: Bearer` with the fault token on `/faults`, the money token elsewhere."""

    def __init__(self, standin: StandinProcess) -> None:
        self._standin = standin

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        faults = request.url.path == "/faults"
        token = self._standin.fault_token if faults else self._standin.token
        request.headers["Authorization"] = f"Bearer {token}"
        yield request


@contextmanager
def running_standin(data: Path | None = None, *extra: str) -> Iterator[StandinProcess]:
    standin = start_standin(data, *extra)
    try:
        yield standin
    finally:
        standin.stop()
