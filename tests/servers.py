"""Starting local servers for tests: free ports on 127.0.0.1, stopped by their own pid."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
VERCEL_COSMOS_SERVER = REPO / "emulators" / "cosmos" / "node_modules" / ".bin" / "cosmosdb-server"


@dataclass(frozen=True)
class CosmosServer:
    name: str
    endpoint: str
    key: str
    # What our emulator's `/_emulator/faults` needs as `Authorization: Bearer` (others: "").
    fault_token: str = ""


async def fail_replaces(server: CosmosServer, item_id: str, *, status: int, count: int) -> None:
    """Our emulator answers `status` to the next `count` replaces of `item_id` (a rule of its
    fault switches, scoped to that item so no other test's requests meet it)."""
    rule = {"status": status, "count": count, "operation": "Replace", "path_contains": item_id}
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{server.endpoint}_emulator/faults", json=rule, headers=_fault_bearer(server)
        )
        response.raise_for_status()


async def clear_faults(server: CosmosServer) -> None:
    """Every fault rule of our emulator removed: the store is back."""
    async with httpx.AsyncClient() as client:
        response = await client.delete(
            f"{server.endpoint}_emulator/faults", headers=_fault_bearer(server)
        )
        response.raise_for_status()


def _fault_bearer(server: CosmosServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.fault_token}"}


# (server, test) -> (a server's known gap, the exception or exceptions it shows up as)
KnownGaps = dict[tuple[str, str], tuple[str, type[BaseException] | tuple[type[BaseException], ...]]]


def expect_known_gap(request: pytest.FixtureRequest, server: str, gaps: KnownGaps) -> None:
    """Make the requesting test a strict xfail where `gaps` declares one for `server`: the day
    the server is fixed, the test says so."""
    gap = gaps.get((server, request.node.originalname))
    if gap:
        reason, shows_as = gap
        request.applymarker(pytest.mark.xfail(reason=reason, raises=shows_as, strict=True))


def skip_or_fail(reason: str) -> None:
    """Optional servers skip on developer machines, but CI must really run them."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)  # polling a port that is not yet bound; bounded by the deadline
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout} s")


def wait_for_output(
    log: Path, pattern: re.Pattern[str], process: subprocess.Popen[Any], timeout: float = 30.0
) -> re.Match[str]:
    """The first match of `pattern` in what a process wrote to `log`; AssertionError when it
    exits or the time is up first (a line that never comes must fail, not hang)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pattern.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return found
        if process.poll() is not None:
            break
        time.sleep(0.05)  # polling a file another process writes; bounded by the deadline
    raise AssertionError(f"no {pattern.pattern!r} in {log}: {log.read_text(errors='replace')!r}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@contextmanager
def small_tmpfs(mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of `size_bytes` mounted at `mount_point` for a block, so that a test can fill a
    real disk (ENOSPC from the kernel, not a mock); unmounted after it, never left mounted.
    Needs root and mount(8): elsewhere the test skips (and fails in CI, `skip_or_fail`)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        skip_or_fail("a full disk needs a tmpfs mounted for the test: run as root with mount(8)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs for a full disk: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        unmounted = subprocess.run(
            ["umount", str(mount_point)], capture_output=True, text=True, check=False
        )
        if unmounted.returncode != 0:  # a descriptor left open on it: never leave the mount
            subprocess.run(["umount", "--lazy", str(mount_point)], check=True)
            raise AssertionError(f"the small disk was still in use: {unmounted.stderr.strip()}")


TAG_VARIABLE = "ORDERS_TEST_TAG"


def processes_tagged(tag: str) -> list[int]:
    """Pids whose environment carries `tag`: every process a test started and every process
    those started in turn (children inherit the environment, whatever session or process
    group they put themselves in; /proc tells the truth)."""
    marker = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@contextmanager
def reaped_processes() -> Iterator[dict[str, str]]:
    """An environment for the processes a test starts, tagged; when the block ends, however it
    ends, every process that still carries the tag is killed (SIGKILL, which no disposition a
    suite inherits can ignore) and waited for. The demo and `orders up` put their children in
    sessions of their own, so a process group would not reach them: the tag does."""
    tag = os.urandom(8).hex()
    try:
        yield {**os.environ, TAG_VARIABLE: tag}
    finally:
        deadline = time.monotonic() + 30
        while (left := processes_tagged(tag)) and time.monotonic() < deadline:
            for pid in left:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)  # reaping takes a moment; bounded by the deadline above


def vercel_server_unavailable_reason() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (the @vercel/cosmosdb-server cross-check needs Node 20+)"
    if not VERCEL_COSMOS_SERVER.exists():
        return "run `make test` (npm ci in emulators/cosmos) to install @vercel/cosmosdb-server"
    return None


@contextmanager
def vercel_cosmos_server() -> Iterator[str]:
    """The third-party Cosmos wire server over HTTPS (self-signed); yields its endpoint."""
    port = free_port()
    process = subprocess.Popen(
        [str(VERCEL_COSMOS_SERVER), "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield f"https://127.0.0.1:{port}/"
    finally:
        stop_process(process)
