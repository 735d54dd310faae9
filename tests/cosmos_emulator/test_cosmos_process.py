"""The CLI process (ready line, --port 0, signals, --data, --https) and in-process restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from azure.cosmos import CosmosClient, PartitionKey

from cosmos_emulator import WELL_KNOWN_KEY, start_in_background

SRC = Path(__file__).resolve().parents[2] / "src"


def launch(*args: str) -> tuple[subprocess.Popen[str], str]:
    # Given a fault token, as the local stack gives one: it draws and prints none of its own.
    env = {**os.environ, "PYTHONPATH": str(SRC), "COSMOS_EMULATOR_FAULT_TOKEN": "t" * 32}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cosmos_emulator", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    prefix = "cosmos-emulator listening on "
    stderr = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
    assert line.startswith(prefix), (line, stderr)
    return proc, line[len(prefix) :]


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    proc.send_signal(sig)
    assert proc.wait(timeout=15) == 0
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read() == ""  # exactly one line was printed
    proc.stdout.close()
    proc.stderr.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_serves_and_persists_across_restarts(tmp_path: Path, sig: int) -> None:
    data = tmp_path / "data"
    proc, url = launch("--data", str(data))
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        client = CosmosClient(url, WELL_KNOWN_KEY)
        container = client.create_database("d").create_container(
            "c", PartitionKey("/pk"), default_ttl=-1
        )
        written = container.create_item({"id": "kept", "pk": "a", "v": 1})
    finally:
        stop(proc, sig)
    assert data.exists()
    proc, url = launch("--data", str(data))
    try:
        client = CosmosClient(url, WELL_KNOWN_KEY)
        container = client.get_database_client("d").get_container_client("c")
        assert container.read()["defaultTtl"] == -1
        assert container.read_item("kept", "a") == written
        fresh = container.create_item({"id": "new", "pk": "a"})
        assert fresh["_rid"] != written["_rid"]
    finally:
        stop(proc)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_cli_https_works_with_default_sdk_options() -> None:
    proc, url = launch("--https")
    try:
        assert url.startswith("https://127.0.0.1:")
        client = CosmosClient(url, WELL_KNOWN_KEY)
        container = client.create_database("d").create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "1", "pk": "a"})
        assert container.read_item("1", "a")["id"] == "1"
    finally:
        stop(proc)


def test_in_process_data_dir_survives_restart(tmp_path: Path) -> None:
    data = tmp_path / "nested" / "data"
    with start_in_background(data_dir=data) as emu:
        client = CosmosClient(emu.url, emu.key)
        container = client.create_database("d").create_container("c", PartitionKey("/pk"))
        container.create_item({"id": "1", "pk": "a"})
        container.execute_item_batch([("create", ({"id": "2", "pk": "a"},))], partition_key="a")
    with start_in_background(data_dir=data) as emu:
        client = CosmosClient(emu.url, emu.key)
        container = client.get_database_client("d").get_container_client("c")
        ids = [d["id"] for d in container.query_items("SELECT * FROM c", partition_key="a")]
        assert ids == ["1", "2"]


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_https_in_process() -> None:
    with start_in_background(https=True) as emu:
        assert emu.url.startswith("https://")
        client = CosmosClient(emu.url, emu.key)
        assert client.create_database("d").read()["id"] == "d"


async def test_https_with_the_aio_sdk() -> None:
    from azure.cosmos.aio import CosmosClient as AioCosmosClient

    with start_in_background(https=True) as emu:
        async with AioCosmosClient(emu.url, emu.key) as client:
            db = await client.create_database("d")
            container = await db.create_container("c", PartitionKey("/pk"))
            await container.create_item({"id": "1", "pk": "a"})
            assert (await container.read_item("1", "a"))["id"] == "1"


def test_state_written_while_serving_is_complete_after_stop(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with start_in_background(data_dir=data) as emu:
        container = (
            CosmosClient(emu.url, emu.key)
            .create_database("d")
            .create_container("c", PartitionKey("/pk"))
        )
        for i in range(60):
            container.upsert_item({"id": str(i % 20), "pk": "a", "i": i})
    with start_in_background(data_dir=data) as emu:
        container = (
            CosmosClient(emu.url, emu.key).get_database_client("d").get_container_client("c")
        )
        values = sorted(d["i"] for d in container.query_items("SELECT * FROM c", partition_key="a"))
        assert values == list(range(40, 60))


def test_cli_refuses_a_data_path_that_is_a_file(tmp_path: Path) -> None:
    data = tmp_path / "state.json"
    data.write_text("{not a directory")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-m", "cosmos_emulator", "--port", "0", "--data", str(data)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert result.returncode == 2
    assert "is a file: --data names a directory" in result.stderr
    assert result.stdout == ""
