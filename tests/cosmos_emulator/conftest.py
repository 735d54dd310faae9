"""Fixtures: an emulator per test module, and a fresh database + container per test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy, PartitionKey
from azure.cosmos.aio import ContainerProxy as AioContainerProxy
from azure.cosmos.aio import CosmosClient as AioCosmosClient
from cosmos_rest import unique
from raw_http import EmulatorProcess

from cosmos_emulator import RunningCosmosEmulator, start_in_background


@pytest.fixture(scope="module")
def cosmos_emulator() -> Iterator[RunningCosmosEmulator]:
    """A running emulator on a free port, stopped by its own handle."""
    with start_in_background("127.0.0.1", 0) as emu:
        yield emu


@pytest.fixture
def fresh_emulator() -> Iterator[RunningCosmosEmulator]:
    """An emulator of the test's own, for tests that inject faults or restart."""
    with start_in_background("127.0.0.1", 0) as emu:
        yield emu


@pytest.fixture
def emulator_process() -> Iterator[EmulatorProcess]:
    """`python -m cosmos_emulator` as a process of its own, so its memory can be measured."""
    src = Path(__file__).resolve().parents[2] / "src"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cosmos_emulator", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        url = line.removeprefix("cosmos-emulator listening on ")
        assert url != line, line
        yield EmulatorProcess(proc.pid, int(url.rstrip("/").rsplit(":", 1)[1]), url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.fixture(scope="module")
def client(cosmos_emulator: RunningCosmosEmulator) -> CosmosClient:
    return CosmosClient(cosmos_emulator.url, cosmos_emulator.key)


@pytest.fixture
def database(client: CosmosClient) -> Iterator[DatabaseProxy]:
    db = client.create_database(unique("db"))
    yield db
    client.delete_database(db)


@pytest.fixture
def container(database: DatabaseProxy) -> ContainerProxy:
    return database.create_container(unique("c"), PartitionKey("/pk"))


@pytest.fixture
def ttl_container(database: DatabaseProxy) -> ContainerProxy:
    return database.create_container(unique("ttl"), PartitionKey("/pk"), default_ttl=-1)


@pytest.fixture
async def aio_container(
    cosmos_emulator: RunningCosmosEmulator,
) -> AsyncIterator[AioContainerProxy]:
    async with AioCosmosClient(cosmos_emulator.url, cosmos_emulator.key) as aio_client:
        db = await aio_client.create_database(unique("adb"))
        try:
            yield await db.create_container(unique("ac"), PartitionKey("/pk"), default_ttl=-1)
        finally:
            await aio_client.delete_database(db)


REPO = Path(__file__).resolve().parents[2]
VERCEL_BIN = REPO / "emulators" / "cosmos" / "node_modules" / ".bin" / "cosmosdb-server"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"cosmosdb-server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"cosmosdb-server did not listen on {port} within {timeout}s")


@pytest.fixture(scope="session")
def vercel_url() -> Iterator[str]:
    """@vercel/cosmosdb-server over HTTPS on a free port (cross-check only)."""
    if shutil.which("node") is None and os.environ.get("CI") != "true":
        pytest.skip("node is not installed (the cross-check runs wherever Node is present)")
    if not VERCEL_BIN.exists():
        pytest.fail(f"{VERCEL_BIN} is missing: run `make node-crosscheck` (npm ci)")
    port = _free_port()
    proc = subprocess.Popen(
        [str(VERCEL_BIN), "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for_port(port, proc)
        yield f"https://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
